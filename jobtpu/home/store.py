"""state.json: the lock, a strict typed load, atomic save with a .bak of the last good copy.

Readers take no lock (a save is an atomic rename, so they see a whole file); every
read-modify-write happens inside `Store.transaction`, which holds the state lock only for as long
as the caller's in-memory edit takes — never across network work."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from jobtpu import timing
from jobtpu.errors import BusyError, ConfigError
from jobtpu.home.layout import (
    Home,
    open_append,
    open_lock,
    regular_fd,
    rename_synced,
    write_atomic,
    write_temp,
)
from jobtpu.schema.state import (
    VERSION,
    Attempt,
    Ending,
    Job,
    MachineRecord,
    State,
    Status,
    job_problem,
    machine_problem,
    unknown_job,
)

__all__ = ["State", "Store", "VERSION", "decode_state", "parse_json_file", "unknown_job"]


def parse_json_file(path: Path, text: str | bytes) -> Any:
    """Parse JSON (machines.json, and any file a typed decode refused, to say why); a syntax error is
    reported as `file:line:col: message`, in the standard library's words."""
    import orjson  # here, not at the top: `--help` never parses anything

    hint = f"fix {path} by hand; jobtpu has not changed it" + (
        f" (its last good copy is {path.name}.bak)" if path.name == "state.json" else "")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    # orjson refused it: the standard library names the line and column of a syntax error, and the
    # hooks refuse what orjson could not write back (NaN, Infinity, integers beyond 64 bits).
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path.name}:{e.lineno}:{e.colno}: {e.msg}", hint=hint) from None
    except _BadNumber as e:
        raise ConfigError(f"{path.name}: {e}", hint=hint) from None
    except RecursionError:  # orjson stops at 1024 levels; the standard library at the stack's end
        raise ConfigError(f"{path.name}: nested too deeply to be a jobtpu file", hint=hint) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path.name}: not valid JSON text ({str(e)[:80]})", hint=hint) from None


class _BadNumber(Exception):
    pass


def _refuse_constant(word: str) -> Any:
    raise _BadNumber(f"{word} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 19 or not -2**63 <= int(text) < 2**64:
        raise _BadNumber(f"the number {text[:30]}{'…' if len(text) > 30 else ''} is too large")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _BadNumber(f"the number {text[:30]} is too large")
    return value


_DECODER = msgspec.json.Decoder(State)
_ENCODER = msgspec.json.Encoder()


def decode_state(raw: bytes | str, path: Path) -> State:
    """state.json's bytes as a State, strictly: every type (msgspec), then what types cannot say
    (id uniqueness, status and reason words, requests...). Anything wrong is one ConfigError naming
    the file, the job or machine, and the path of the bad value."""
    hint = f"fix {path} by hand (the last good copy is {path.name}.bak); nothing was changed"
    try:
        state = _DECODER.decode(raw)
    except RecursionError:  # in a free-form part (a node's spec), where no type bounds the depth
        raise ConfigError(f"{path.name}: nested too deeply to be a jobtpu file", hint) from None
    except msgspec.MsgspecError as e:
        # Not JSON at all, or a number JSON cannot carry: said in the standard library's words
        # (line and column). Otherwise the value at the path has the wrong shape.
        data = parse_json_file(path, raw)
        if not isinstance(e, msgspec.ValidationError):  # text only the standard library takes (a lone surrogate)
            raise ConfigError(f"{path.name}: not valid JSON text ({str(e)[:80]})", hint) from None
        raise ConfigError(f"{path.name}: {_where(str(e), data)}", hint) from None
    if state.version != VERSION:
        raise ConfigError(f"{path.name}: version {state.version!r} is not one this jobtpu reads ({VERSION})", hint)
    seen: set[int] = set()
    for job in state.jobs:
        problem = job_problem(job)
        if problem is not None:
            raise ConfigError(f"{path.name}: job {job.id}: {problem}", hint)
        if job.id in seen:
            raise ConfigError(f"{path.name}: job id {job.id} appears twice", hint)
        seen.add(job.id)
    for name, record in state.machines.items():
        problem = machine_problem(record)
        if problem is not None:
            raise ConfigError(f"{path.name}: machine {name!r}: {problem}", hint)
    if not -2**63 <= state.next_id < 2**63:
        raise ConfigError(f"{path.name}: the number {str(state.next_id)[:30]} is too large", hint)
    # Ids are never reused, even if a user deleted the newest job or lowered next_id by hand.
    state.next_id = max([state.next_id, *(j.id + 1 for j in state.jobs)])
    return state


_STRUCTS: dict[str, type[msgspec.Struct]] = {"jobs": Job, "attempts": Attempt, "ending": Ending,
                                             "machines": MachineRecord}


_ENUMS: dict[str, tuple[str, ...]] = {"status": tuple(s.value for s in Status), "kind": ("create", "delete")}


def _where(message: str, data: Any) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.jobs[3].n`" as "job 7: $.jobs[3].n: expected int,
    got str": the job's id or the machine's name first (the path alone would make a reader count)."""
    what, _, path = message.partition(" - at ")
    path = path.strip("`") or "$"
    what = what.replace("`", "")
    label = ""
    job = re.match(r"\$\.jobs\[(\d+)\]", path)
    if job and isinstance(data, dict) and isinstance(data.get("jobs"), list):
        record = data["jobs"][int(job[1])]
        job_id = record.get("id") if isinstance(record, dict) else None
        label = f"job {job_id}: " if isinstance(job_id, int) and not isinstance(job_id, bool) else ""
    elif path.startswith("$.machines[...]") and isinstance(data, dict) and isinstance(data.get("machines"), dict):
        name = _failing_machine(data["machines"])
        if name is not None:
            label, path = f"machine {name!r}: ", path.replace("[...]", f"[{name!r}]", 1)
    if what.startswith("Invalid enum value"):
        words = _ENUMS.get(path.rsplit(".", 1)[-1])
        what += f" (valid: {', '.join(words)})" if words else ""
    elif what.startswith("Object contains unknown field"):
        owner = re.findall(r"([a-z]+)(?:\[[^\]]*\])?", path.rsplit(".", 1)[-1]) if path != "$" else []
        struct = _STRUCTS.get(owner[0]) if owner else State
        if struct is not None:
            what += f" (valid: {', '.join(sorted(struct.__struct_fields__))})"
    if what[1:2].islower():  # "Expected int" reads on after a colon as "expected int"
        what = what[:1].lower() + what[1:]
    return f"{label}{path}: {what}"


def _failing_machine(machines: dict[str, Any]) -> str | None:
    for name, record in machines.items():
        try:
            msgspec.convert(record, MachineRecord)
        except msgspec.ValidationError:
            return name
    return None


class Snapshot(NamedTuple):
    """The state.json a session read or last wrote: its bytes (the next save's .bak) and its stamp
    (inode, size, mtime, ctime: every save is a rename of a new file, so another writer changes
    it). A stamp of None matches no file: the session must read it again."""

    raw: bytes | None
    stamp: bytes | None


def stamp_of(path: Path) -> bytes | None:
    try:
        return _stamp(os.stat(path))
    except FileNotFoundError:
        return None


def _stamp(st: os.stat_result) -> bytes:
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}".encode()


class Store:
    def __init__(self, home: Home) -> None:
        self.home = home
        self.path = home.state_file

    def read(self) -> tuple[State, Snapshot]:
        """The state and the snapshot it came from (one read of the file)."""
        try:
            with open(self.path, "rb", opener=_no_block) as f:  # a FIFO there never hangs the read
                raw: bytes | None = f.read()
                stamp: bytes | None = _stamp(os.fstat(f.fileno()))
        except FileNotFoundError:
            raw = stamp = None
        return self._parse(raw), Snapshot(raw, stamp)

    def load(self) -> State:
        return self.read()[0]

    def _parse(self, raw: bytes | None) -> State:
        if raw is None or not raw.strip():
            self.refuse_lost_state(raw)
            return State()
        return decode_state(raw, self.path)

    def refuse_lost_state(self, text: str | bytes | None) -> None:
        """A missing or empty state.json is a fresh start only in a home without history. Where jobs
        have lived (a .bak, logs, history, job folders), it means the file was lost: starting afresh
        would forget jobs that may still run, so every command stops and says how to restore it."""
        evidence = self._history_evidence()
        if evidence is None:
            return
        what = "missing" if text is None else "empty"
        backup = self.home.state_backup
        hint = (f"restore the last good copy: cp {backup} {self.path}" if _has_content(backup) else
                f"restore {self.path.name} from a backup")
        raise ConfigError(f"state.json is {what}, but this home has held jobs ({evidence}); "
                          "jobtpu will not start an empty queue over them",
                          hint=hint + '; to start an empty queue on purpose, write {"jobs": []} into it')

    def _history_evidence(self) -> str | None:
        """What shows this home held jobs, or None. (Not the id mark nor secrets.json: a first submit
        that failed while saving leaves those, and nothing was lost then.)"""
        home = self.home
        if _has_content(home.state_backup):
            return home.state_backup.name
        if _has_content(home.history_file):
            return home.history_file.name
        for folder, what in ((home.root / "logs", "logs/"), (home.local_run_root / "jobs", "job folders in run/jobs/")):
            with contextlib.suppress(OSError):
                if any(p.name.isdigit() for p in folder.iterdir()):
                    return what
        return None

    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[None]:
        self.home.ensure()
        wait = timing.current().state_lock_wait if timeout is None else timeout
        with hold_lock(self.home.state_lock, wait, what="state.json"):
            yield

    @contextlib.contextmanager
    def transaction(self, start: tuple[State, Snapshot] | None = None) -> Iterator[State]:
        """Lock, load, let the caller edit, save if anything changed. An exception saves nothing.
        `start`: what an earlier read() returned, left unchanged: used as it is while the file is still
        the one it came from (a submit then reads and checks 10k jobs once, not twice)."""
        with self.lock():
            state, snapshot = start if start is not None and self.unchanged(start[1]) else self.read()
            original = encode(state)
            yield state
            self.save_if_changed(state, original, snapshot)

    def _keep_as_backup(self, previous: bytes) -> None:
        """Make state.json.bak the file about to be replaced, whose bytes are `previous` (read and
        checked under the lock this runs under). A hard link costs no copy of a file of ten thousand
        jobs on every save; where links are not allowed, a copy."""
        backup = self.home.state_backup
        link = backup.with_name(f".{backup.name}.{os.urandom(6).hex()}.tmp")  # a name os.link never finds taken
        try:
            os.link(self.path, link)
            os.replace(link, backup)
        except OSError:
            link.unlink(missing_ok=True)
            write_atomic(backup, previous)

    def unchanged(self, snapshot: Snapshot) -> bool:
        """Whether state.json is still the file of `snapshot` (call it under the lock)."""
        return snapshot.stamp is not None and stamp_of(self.path) == snapshot.stamp

    def save_if_changed(self, state: State, original: Encoded, snapshot: Snapshot) -> Snapshot:
        """Save `state` (under the lock) unless it encodes as `original`; the snapshot now on disk."""
        return self.save_encoded(encode(state), original, snapshot)

    def save_encoded(self, now: Encoded, original: Encoded, snapshot: Snapshot) -> Snapshot:
        """save_if_changed for a state already encoded (`now`): a pass encodes ten thousand jobs once."""
        if now == original:
            return snapshot
        return self._save(now, snapshot.raw)

    def _save(self, encoded: Encoded, previous: bytes | None) -> Snapshot:
        if previous is not None and previous.strip():
            # previous parsed and validated, so it is a good copy (an empty one is not kept: the
            # .bak must stay the way back to the jobs).
            self._keep_as_backup(previous)
        data = render(encoded)
        rename_synced(write_temp(self.path, data), self.path)
        # Stamped after the rename (which changes the ctime), under the lock every writer takes.
        return Snapshot(data, stamp_of(self.path))


class Encoded(NamedTuple):
    """A State as state.json's parts: each job's line, and the rest. Two are equal exactly when
    their files would be."""

    head: bytes  # version and next_id
    jobs: list[bytes]
    ids: list[int]
    machines: list[bytes]  # one `"name": {...}` per machine


def encode_jobs(jobs: list[Job]) -> list[bytes]:
    """Each job as its line of state.json (msgspec encodes the Structs directly, no dicts between)."""
    return list(map(_ENCODER.encode, jobs))


def encode_head(state: State) -> bytes:
    """Everything of state.json but its jobs and machines."""
    enc = _ENCODER.encode
    head = b'  "version": %d,\n  "next_id": %d,\n' % (state.version, state.next_id)
    if state.last_pass is not None:
        head += b'  "last_pass": ' + enc(state.last_pass) + b",\n"
    if state.untold:
        head += b'  "untold": ' + enc(state.untold) + b",\n"
    return head


def encode(state: State) -> Encoded:
    enc = _ENCODER.encode
    head = encode_head(state)
    return Encoded(head=head,
                   jobs=encode_jobs(state.jobs), ids=[job.id for job in state.jobs],
                   machines=[enc(name) + b": " + enc(record) for name, record in state.machines.items()])


def records(jobs: list[Job]) -> list[dict[str, Any]]:
    """The jobs as plain objects, each as state.json stores it (for tables)."""
    records: list[dict[str, Any]] = msgspec.to_builtins(jobs)
    return records


def jobs_document(jobs: list[Job]) -> bytes:
    """`{"jobs": [...]}` as `status --json` prints it: the records as state.json stores them."""
    return b'{"jobs":[' + b",".join(encode_jobs(jobs)) + b"]}\n"


def render(encoded: Encoded) -> bytes:
    """state.json's layout: one job per line (easy to read, grep and edit by hand, and a third smaller
    than indenting every field), one machine per line, the rest indented."""
    machines = (b'  "machines": {\n    ' + b",\n    ".join(encoded.machines) + b"\n  },\n"
                if encoded.machines else b'  "machines": {},\n')
    jobs = b'  "jobs": [\n' + b"".join(b"    " + line + b",\n" for line in encoded.jobs[:-1]) + (
        b"    " + encoded.jobs[-1] + b"\n" if encoded.jobs else b"") + b"  ]\n"
    return b"{\n" + encoded.head + machines + jobs + b"}\n"


def _no_block(path: str, flags: int) -> int:
    """An opener for a file jobtpu reads in the home: a FIFO or a device put there is refused at once."""
    return regular_fd(os.open(path, flags | os.O_NONBLOCK), Path(path))


def _has_content(path: Path) -> bool:
    try:
        with open(path, "rb", opener=_no_block) as f:
            return bool(f.read(4096).strip())
    except OSError:
        return False


def append_line(path: Path, line: str) -> None:
    fd = open_append(path)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_id_mark(home: Home) -> int:
    """The highest id ever given out in this home (0 before the first submit)."""
    try:
        text = home.id_mark.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return 0
    if not text.isdigit() or len(text) > 18:
        raise ConfigError(f"{home.id_mark.name}: must hold the highest job id given out, a whole number (got {text[:20]!r})",
                          hint=f"write into {home.id_mark} the highest id this home ever used (see history.jsonl and logs/)")
    return int(text)


def write_id_mark(home: Home, job_id: int) -> None:
    """Before the job is saved: a crash in between skips an id, it never gives one out twice."""
    write_atomic(home.id_mark, f"{job_id}\n".encode())


@contextlib.contextmanager
def hold_lock(path: Path, timeout: float, what: str) -> Iterator[None]:
    """An exclusive flock on `path`, waiting at most `timeout` seconds. Released by the kernel on a crash."""
    fd = open_lock(path)
    try:
        if not try_lock(fd, timeout):
            raise BusyError(f"{what} is locked by another jobtpu command for over {timeout:.0f}s",
                            hint=f"check for a stuck jobtpu process holding {path}")
        yield
    finally:
        os.close(fd)


def try_lock(fd: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(timing.current().lock_poll)


# ---- ids and history: the home's rules for naming jobs and retiring them ------------------------

def highest_used_id(home: Home) -> int:
    """The highest id any job of this home ever had, even if state.json and the id mark lost it
    (hand edits, deleted files, a home from before the mark): ids are never reused, since logs,
    secrets and remote folders are named by them."""
    import re

    used = [int(p.name) for p in (home.root / "logs").glob("*") if p.name.isdigit()]
    used += [int(p.name) for p in (home.local_run_root / "jobs").glob("*") if p.name.isdigit()]
    if home.history_file.exists():
        with open(home.history_file, "rb", opener=_no_block) as f:
            used += [int(m[1]) for line in f if (m := re.match(rb'\{"id": ?(\d+)', line))]
    return max(used, default=0)


def take_next_id(home: Home, state: State) -> int:
    """Inside a transaction: the id for a new job, spent at once (the id mark is written before
    anything is filed under it, so whatever fails later, no other job ever gets this id)."""
    job_id = max(state.next_id, highest_used_id(home) + 1, read_id_mark(home) + 1)
    state.next_id = job_id + 1
    write_id_mark(home, job_id)
    return job_id


def append_to_history(home: Home, jobs: list[Job]) -> None:
    """Append ended jobs to history.jsonl, one line each: one write and one fsync, however many.
    The caller removes them from state.json afterwards (a crash in between lists a job twice, never
    loses it)."""
    if not jobs:
        return
    append_line(home.history_file, b"\n".join(encode_jobs(jobs)).decode())

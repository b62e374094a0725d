"""state.json: the lock, load with validation, atomic save with a .bak of the last good copy.

Readers take no lock (a save is an atomic rename, so they see a whole file); every
read-modify-write happens inside `Store.transaction`, which holds the state lock only for as long
as the caller's in-memory edit takes — never across network work."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import listing
from .errors import BusyError, ConfigError, NotFoundError
from .home import Home, open_append, open_lock, rename_synced, write_atomic, write_temp
from .schema import FIELDS, LISTED, STATUSES

if TYPE_CHECKING:
    from .model import Job

VERSION = 1
_TOP_KEYS = {"version", "next_id", "jobs", "machines"}


def unknown_job(job_id: int) -> NotFoundError:
    """The one error every command gives for an id it does not know."""
    return NotFoundError(f"no job {job_id} in state.json", hint="`jobtpu status --all-users` lists every job")


class State:
    """Everything state.json holds. (A plain class: see Home.)"""

    def __init__(self, next_id: int = 1, jobs: list[Job] | None = None,
                 machines: dict[str, dict[str, Any]] | None = None) -> None:
        self.next_id = next_id
        self.jobs: list[Job] = jobs if jobs is not None else []
        self.machines: dict[str, dict[str, Any]] = machines if machines is not None else {}  # known of each machine

    def __eq__(self, other: object) -> bool:
        return isinstance(other, State) and self.to_json() == other.to_json()

    def job(self, job_id: int) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def require_job(self, job_id: int) -> Job:
        job = self.job(job_id)
        if job is None:
            raise unknown_job(job_id)
        return job

    def to_json(self) -> dict[str, Any]:
        from .model import compact

        return {"version": VERSION, "next_id": self.next_id,
                "jobs": [compact(j.to_json()) for j in self.jobs], "machines": self.machines}


def parse_json_file(path: Path, text: str | bytes) -> Any:
    """Parse JSON (orjson: 10k jobs must load in milliseconds); a syntax error is reported as
    `file:line:col: message`, in the standard library's words."""
    import orjson  # here, not at the top: `--help` and a cached `status` never parse anything

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


def state_from_json(data: Any, path: Path) -> State:
    from .model import Job

    where = path.name
    hint = f"fix {path} by hand (the last good copy is {path.name}.bak); nothing was changed"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be an object", hint)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (valid: {', '.join(sorted(_TOP_KEYS))})", hint)
    version = data.get("version", VERSION)
    if version != VERSION:
        raise ConfigError(f"{where}: version {version!r} is not one this jobtpu reads ({VERSION})", hint)
    jobs: list[Job] = []
    seen: set[int] = set()
    raw_jobs = data.get("jobs", [])
    if not isinstance(raw_jobs, list):
        raise ConfigError(f"{where}: 'jobs' must be a list", hint)
    for index, record in enumerate(raw_jobs):
        label = f"job {record.get('id', '#' + str(index))}" if isinstance(record, dict) else f"jobs[{index}]"
        try:
            if not isinstance(record, dict):
                raise TypeError("must be an object")
            job = Job.from_json(record)
        except (TypeError, ValueError, KeyError) as e:
            raise ConfigError(f"{where}: {label}: {e}", hint) from None
        if job.id in seen:
            raise ConfigError(f"{where}: job id {job.id} appears twice", hint)
        seen.add(job.id)
        jobs.append(job)
    next_id = data.get("next_id", 1)
    if not isinstance(next_id, int) or isinstance(next_id, bool):
        raise ConfigError(f"{where}: 'next_id' must be an integer", hint)
    machines = data.get("machines", {})
    if not isinstance(machines, dict) or not all(isinstance(v, dict) for v in machines.values()):
        raise ConfigError(f"{where}: 'machines' must map names to objects", hint)
    from .model import check_machine_record

    for name, machine_record in machines.items():
        try:
            check_machine_record(machine_record)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: machine {name!r}: {e}", hint) from None
    # Ids are never reused, even if a user deleted the newest job or lowered next_id by hand.
    next_id = max([next_id, *(j.id + 1 for j in jobs)])
    return State(next_id=next_id, jobs=jobs, machines=machines)


def _plainly_valid(jobs: list[Any]) -> bool:
    """The checks a listing relies on, as a tight loop (10k records in a few ms)."""
    ids = set()
    for j in jobs:
        if type(j) is not dict or type(j.get("id")) is not int or type(j.get("user")) is not str \
                or j.get("status") not in STATUSES or not FIELDS.issuperset(j) or not j.keys() >= LISTED:
            return False
        ids.add(j["id"])
    return len(ids) == len(jobs)


class Store:
    def __init__(self, home: Home) -> None:
        self.home = home
        self.path = home.state_file

    def read_text(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def load(self) -> State:
        return self._parse(self.read_text())

    def _parse(self, text: str | None) -> State:
        if text is None or not text.strip():
            self.refuse_lost_state(text)
            return State()
        return state_from_json(parse_json_file(self.path, text), self.path)

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

    def load_records(self) -> list[dict[str, Any]]:
        """The job records as stored, each with at least the fields a listing promises. For read-only
        listings of many jobs: building and fully validating 10k Job objects costs more than the
        listing itself. Every command that changes state validates fully through load()."""
        try:
            with open(self.path, "rb") as f:
                raw, stamp = f.read(), listing.stamp_of(os.fstat(f.fileno()))
        except FileNotFoundError:
            self.refuse_lost_state(None)
            return []
        if not raw.strip():
            self.refuse_lost_state(raw)
            return []
        data = parse_json_file(self.path, raw)
        jobs = data.get("jobs") if isinstance(data, dict) else None
        if listing.made_from(self.home, stamp) and isinstance(jobs, list) and _plainly_valid(jobs) \
                and set(data) <= _TOP_KEYS and data.get("version", VERSION) == VERSION:
            return jobs  # a file jobtpu saved (or one fully validated before): the listed fields suffice
        # Edited by hand since the last save: validated as fully as every other command does, so a
        # listing refuses exactly what they refuse. Then the listings are rebuilt, and the next
        # listing is quick again.
        loaded = state_from_json(data, self.path).jobs
        if not (isinstance(jobs, list) and _plainly_valid(jobs)):  # records missing listed fields
            from .model import compact

            jobs = [compact(j.to_json()) for j in loaded]
        self._refresh_listings(jobs, stamp)
        return jobs

    def _refresh_listings(self, jobs: list[dict[str, Any]], stamp: bytes) -> None:
        """After a hand edit, the next listing rebuilds the per-user listings, so the ones after it are
        quick again. Only if no save is under way and state.json is still the file that was read."""
        try:  # a cache: a home this user may only read simply goes without
            fd = open_lock(self.home.state_lock)
        except OSError:
            return
        try:
            if try_lock(fd, 0) and listing.stamp_of(os.stat(self.path)) == stamp:
                import orjson

                listing.write(self.home, [j["user"] for j in jobs], [orjson.dumps(j) for j in jobs], stamp)
        except OSError:
            pass
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def lock(self, timeout: float = 30.0) -> Iterator[None]:
        self.home.ensure()
        with hold_lock(self.home.state_lock, timeout, what="state.json"):
            yield

    @contextlib.contextmanager
    def transaction(self) -> Iterator[State]:
        """Lock, load, let the caller edit, save if anything changed. An exception saves nothing."""
        with self.lock():
            before = self.read_text()
            state = self._parse(before)
            original = state.to_json()
            yield state
            document = state.to_json()
            if document != original:
                self._save(document, before)

    def _save(self, document: dict[str, Any], previous_text: str | None) -> None:
        import orjson

        job_lines = [orjson.dumps(job) for job in document["jobs"]]
        if previous_text is not None and previous_text.strip():
            # previous_text parsed and validated, so it is a good copy (an empty one is not kept:
            # the .bak must stay the way back to the jobs).
            write_atomic(self.home.state_backup, previous_text.encode())
        tmp = _write_synced(self.path, render(document, job_lines))
        # The per-user listings name the exact file they list (a rename keeps inode, size, mtime).
        listing.write(self.home, [job["user"] for job in document["jobs"]], job_lines, listing.stamp_of(os.stat(tmp)))
        rename_synced(tmp, self.path)


def render(document: dict[str, Any], job_lines: list[bytes]) -> str:
    """state.json's layout: one job per line (easy to read, grep and edit by hand, and a third smaller
    than indenting every field), the rest indented. `job_lines`: the jobs, already serialized."""
    import orjson

    lines = []
    for key, value in document.items():
        if key == "jobs":
            continue
        if isinstance(value, dict) and value:  # machines: one per line
            entries = [f"    {orjson.dumps(k).decode()}: {orjson.dumps(v).decode()}" for k, v in value.items()]
            lines.append(f'  "{key}": {{\n' + ",\n".join(entries) + "\n  },")
        else:
            lines.append(f'  "{key}": {orjson.dumps(value).decode()},')
    jobs = [f"    {line.decode()}" for line in job_lines]
    body = ",\n".join(jobs)
    return "{\n" + "\n".join(lines) + '\n  "jobs": [\n' + body + ("\n" if jobs else "") + "  ]\n}\n"


def _has_content(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return bool(f.read(4096).strip())
    except OSError:
        return False


def _write_synced(path: Path, text: str) -> Path:
    return write_temp(path, text.encode())


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
            time.sleep(0.02)


# ---- ids and history: the home's rules for naming jobs and retiring them ------------------------

def highest_used_id(home: Home) -> int:
    """The highest id any job of this home ever had, even if state.json and the id mark lost it
    (hand edits, deleted files, a home from before the mark): ids are never reused, since logs,
    secrets and remote folders are named by them."""
    import re

    used = [int(p.name) for p in (home.root / "logs").glob("*") if p.name.isdigit()]
    used += [int(p.name) for p in (home.local_run_root / "jobs").glob("*") if p.name.isdigit()]
    if home.history_file.exists():
        with open(home.history_file, "rb") as f:
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
    import orjson

    append_line(home.history_file, "\n".join(orjson.dumps(j.to_json()).decode() for j in jobs))

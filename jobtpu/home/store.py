"""state.json: the lock, the load (schema/state_file.py decodes it), atomic save with a .bak of the
last good copy; the id mark and history.jsonl; the pass lock.

Readers take no lock (a save is an atomic rename, so they see a whole file); every
read-modify-write happens inside `Store.transaction`, which holds the state lock only for as long
as the caller's in-memory edit takes — never across network work."""

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from jobtpu import timing
from jobtpu.errors import BusyError, ConfigError
from jobtpu.home import fence, safefs
from jobtpu.home.layout import (
    Home,
    open_append,
    open_lock,
    rename_synced,
    write_atomic,
    write_temp,
)
from jobtpu.schema.state import Job, State
from jobtpu.schema.state_file import Encoded, decode_state, encode, encode_jobs, render


class StateVersion(NamedTuple):
    """Which state.json a session read or last wrote: its bytes (the next save's .bak) and its stamp
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

    def read(self) -> tuple[State, StateVersion]:
        """The state and the version of the file it came from (one read)."""
        try:  # never through a link, never blocking on a FIFO, never more than its cap (docs/design.md §2)
            fd = safefs.open_file(self.home.root, self.path.name)
        except FileNotFoundError:
            fd = -1
        raw: bytes | None = None
        stamp: bytes | None = None
        if fd >= 0:
            try:
                raw, stamp = safefs.read_capped(fd, self.path.name, safefs.CAP_LARGE), _stamp(os.fstat(fd))
            finally:
                os.close(fd)
        return self._parse(raw), StateVersion(raw, stamp)

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
    def transaction(self, start: tuple[State, StateVersion] | None = None) -> Iterator[State]:
        """Lock, load, let the caller edit, save if anything changed. An exception saves nothing.
        `start`: what an earlier read() returned, left unchanged: used as it is while the file is still
        the one it came from (a submit then reads and checks 10k jobs once, not twice)."""
        with self.lock():
            state, version = start if start is not None and self.unchanged(start[1]) else self.read()
            original = encode(state)
            yield state
            self.save_if_changed(state, original, version)

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

    def unchanged(self, version: StateVersion) -> bool:
        """Whether state.json is still the file of `version` (call it under the lock)."""
        return version.stamp is not None and stamp_of(self.path) == version.stamp

    def save_if_changed(self, state: State, original: Encoded, version: StateVersion) -> StateVersion:
        """Save `state` (under the lock) unless it encodes as `original`; the version now on disk."""
        return self.save_encoded(encode(state), original, version)

    def save_encoded(self, now: Encoded, original: Encoded, version: StateVersion) -> StateVersion:
        """save_if_changed for a state already encoded (`now`): a pass encodes ten thousand jobs once."""
        if now == original:
            return version
        return self._save(now, version.raw)

    def _save(self, encoded: Encoded, previous: bytes | None) -> StateVersion:
        # A runner's save carries its lease token; a stale runner's is refused (home-files.md §1.7).
        token = fence.check_save(self.home, previous)
        if token is not None:
            encoded = encoded._replace(head=fence.with_token(encoded.head, token))
        if previous is not None and previous.strip():
            # previous parsed and validated, so it is a good copy (an empty one is not kept: the
            # .bak must stay the way back to the jobs).
            self._keep_as_backup(previous)
        data = render(encoded)
        rename_synced(write_temp(self.path, data), self.path)
        # Stamped after the rename (which changes the ctime), under the lock every writer takes.
        return StateVersion(data, stamp_of(self.path))


def _has_content(path: Path) -> bool:
    try:
        fd = safefs.open_file(path.parent, path.name)
    except (OSError, safefs.UnsafePath):
        return False
    try:
        return bool(safefs.read_fd(fd, 4096).strip())
    finally:
        os.close(fd)


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
        text = safefs.read_regular(home.root, home.id_mark, safefs.CAP_ID).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return 0
    if not text.isdigit() or len(text) > 18:  # its content is never echoed: it may be anything a member put there
        raise ConfigError(f"{home.id_mark.name}: must hold the highest job id given out, a whole number",
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

    used = [int(p.name) for p in (home.root / "logs").glob("*") if p.name.isdigit()]
    used += [int(p.name) for p in (home.local_run_root / "jobs").glob("*") if p.name.isdigit()]
    with contextlib.suppress(FileNotFoundError), open_history(home) as f:
        used += [int(m[1]) for line in f if (m := re.match(rb'\{"id": ?(\d+)', line))]
    return max(used, default=0)


def open_history(home: Home) -> BinaryIO:
    """history.jsonl to read line by line, opened through safefs (no link, no FIFO): FileNotFoundError
    when there is none, UnsafePath when what is there is not a regular file."""
    return os.fdopen(safefs.open_file(home.root, home.history_file.name), "rb")


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


@contextlib.contextmanager
def pass_lock(home: Home, wait: float) -> Iterator[bool]:
    """Hold the home's pass lock (waiting up to `wait` seconds); yields whether it was taken."""
    home.ensure()
    fd = open_lock(home.pass_lock)
    try:
        yield try_lock(fd, wait)
    finally:
        os.close(fd)

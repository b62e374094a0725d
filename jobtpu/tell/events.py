"""The home's event log: what happened to jobs and machines, one JSON object per line in
`<home>/events.jsonl`, rotated by size, read back with filters, followed like `tail -F`.

Wiring (the only calls the pass and the CLI make):

- A pass collects `Event`s as it goes and, once per pass, calls `append(home.root, events)`:
  * job events: `Event(now, JOB_LAUNCHED, job=id, machine=m, user=u, attempt=n, detail={"workers": w})`,
    `JOB_RUNNING` (first pass that sees the attempt running), `JOB_ENDED` with
    `detail={"status": "finished"|"failed"|"killed", "reason": r, "exit_code": c}`, `JOB_RECOVERING`
    with `detail={"reason": r, "recover": "resume"|"rerun"|...}`, `JOB_RESUMED` (the first attempt
    launched after a recovery);
  * `PREEMPTED` (machine=m, and job/attempt when a job was on it) when the pass first sees it;
  * machine state changes: `machine_event(now, name, was, state, detail)` (from manage.machine_changes);
  * TPU steps: `TPU_DELETE_STARTED/_DONE`, `TPU_CREATE_STARTED/_DONE/_FAILED`,
    `TPU_SETUP_STARTED/_DONE/_FAILED` with machine=m and `detail={"error": ...}` on failures;
  * a pass that fails: `Event(now, PASS_FAILED, detail={"error": one_line})`.
  The same list goes to `notify.deliver(...)` (see notify.py): `notification(event)` says which of
  them are worth a notification.
- `jobtpu events [--follow] [--job ID] [--machine M] [--since T]`: `--since` parsed by `since_arg`
  (an argparse `type=`), then `read(...)` or `follow(...)`, each event printed with `render_line`.
- The dashboard (`status --watch`) shows `latest(home.root, n)`.
- home.py must count `events.jsonl` among a home's own files (`_OWN_FILES`): its companions
  (`events.jsonl.1` …, `events.jsonl.lock`) then follow by prefix and are never packed in a snapshot.
  The rotated files are named `events.jsonl.N` (not `events.N.jsonl`) for exactly that reason.

Rotation: when an append would take `events.jsonl` past ROTATE_BYTES (4 MiB), the files shift
(`events.jsonl` → `.1` → `.2` … → `.KEEP`, the oldest dropped). An event is about 200 bytes, so the
log keeps roughly the last 100,000 events (20 MiB at most): weeks of a busy fleet, which `jobtpu
report` needs to split interruptions, while reading all of it stays well under a second.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from jobtpu import timing
from jobtpu.errors import BusyError
from jobtpu.home import safefs
from jobtpu.views.text import printable

EVENTS_FILE = "events.jsonl"
OUTBOX_FILE = "notify-outbox.json"  # notify.py's outbox: named here so a quiet pass need not load notify.py
ROTATE_BYTES = 4 * 1024 * 1024
KEEP = 4  # rotated files kept besides events.jsonl

# ---- the vocabulary ---------------------------------------------------------------------------------

JOB_LAUNCHED = "job_launched"
JOB_RUNNING = "job_running"
JOB_ENDED = "job_ended"
JOB_RECOVERING = "job_recovering"
JOB_RESUMED = "job_resumed"
PREEMPTED = "preempted"
MACHINE_STATE = "machine_state"
TPU_DELETE_STARTED = "tpu_delete_started"
TPU_DELETE_DONE = "tpu_delete_done"
TPU_CREATE_STARTED = "tpu_create_started"
TPU_CREATE_DONE = "tpu_create_done"
TPU_CREATE_FAILED = "tpu_create_failed"
TPU_SETUP_STARTED = "tpu_setup_started"
TPU_SETUP_DONE = "tpu_setup_done"
TPU_SETUP_FAILED = "tpu_setup_failed"
PASS_FAILED = "pass_failed"

KINDS = frozenset({JOB_LAUNCHED, JOB_RUNNING, JOB_ENDED, JOB_RECOVERING, JOB_RESUMED, PREEMPTED, MACHINE_STATE,
                   TPU_DELETE_STARTED, TPU_DELETE_DONE, TPU_CREATE_STARTED, TPU_CREATE_DONE, TPU_CREATE_FAILED,
                   TPU_SETUP_STARTED, TPU_SETUP_DONE, TPU_SETUP_FAILED, PASS_FAILED})

# What a notification destination may ask for (machines.json "notify" … "events").
FAILED = "failed"
RECOVERED = "recovered"
FINISHED = "finished"
MACHINE_DOWN = "machine_down"
MACHINE_UP = "machine_up"
RECREATE_FAILED = "recreate_failed"
NOTIFICATIONS = (FAILED, RECOVERED, FINISHED, MACHINE_DOWN, MACHINE_UP, RECREATE_FAILED)

UP = "up"


@dataclass
class Event:
    time: float
    kind: str
    job: int | None = None
    machine: str | None = None
    user: str | None = None
    attempt: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # given when the event is decided, so a pass telling it again is recognised

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"time": self.time, "kind": self.kind}
        for key in ("id", "job", "machine", "user", "attempt"):
            value = getattr(self, key)
            if value is not None:
                doc[key] = value
        if self.detail:
            doc["detail"] = self.detail
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Event | None:
        """The event a line holds, or None for anything that is not one (a line torn by a crash, a
        hand edit): a damaged line costs that line, never the whole log."""
        if not isinstance(doc, dict):
            return None
        when, kind = doc.get("time"), doc.get("kind")
        if isinstance(when, bool) or not isinstance(when, int | float) or not isinstance(kind, str):
            return None
        job, attempt = doc.get("job"), doc.get("attempt")
        machine, user, detail = doc.get("machine"), doc.get("user"), doc.get("detail") or {}
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (job, attempt)):
            return None
        if not all(v is None or isinstance(v, str) for v in (machine, user)) or not isinstance(detail, dict):
            return None
        ident = doc.get("id")
        return cls(float(when), kind, job, machine, user, attempt, detail, ident if isinstance(ident, str) else None)


def machine_event(now: float, name: str, was: str | None, state: str, detail: str | None = None) -> Event:
    """A machine's state change, as manage.machine_changes sees it."""
    return Event(now, MACHINE_STATE, machine=name, detail={"from": was, "to": state, "detail": detail})


def notification(event: Event) -> str | None:
    """The notification name an event is, if any (see NOTIFICATIONS)."""
    if event.kind == JOB_ENDED:
        status = event.detail.get("status")
        return FINISHED if status == "finished" else FAILED if status == "failed" else None
    if event.kind == JOB_RESUMED:
        return RECOVERED
    if event.kind == TPU_CREATE_FAILED:
        return RECREATE_FAILED
    if event.kind == MACHINE_STATE:
        was, now = event.detail.get("from"), event.detail.get("to")
        if was == UP and now != UP:
            return MACHINE_DOWN
        if now == UP and was is not None and was != UP:  # a machine seen for the first time is no news
            return MACHINE_UP
    return None


# ---- writing ----------------------------------------------------------------------------------------

def events_path(home_root: Path) -> Path:
    return home_root / EVENTS_FILE


def rotated_path(home_root: Path, k: int) -> Path:
    return home_root / f"{EVENTS_FILE}.{k}"


def _real_account() -> dict[str, Any]:
    from jobtpu.home.trust import account_name

    uid = os.getuid()
    return {"uid": uid, "account": account_name(uid)}


def append(home_root: Path, events: Iterable[Event], max_bytes: int = ROTATE_BYTES, keep: int = KEEP) -> None:
    """Add `events` at the end of the log in one write (readers never see half a batch), rotating
    first when the batch would take the file past `max_bytes`. Not synced: an event lost to a power
    cut is a missing log line, not a wrong state, and a pass should not wait for the disk for it."""
    by = _real_account()  # the account that recorded them, whatever --user said (docs/design.md §7)
    data = b"".join(orjson.dumps({**e.to_json(), **by}) + b"\n" for e in events)
    if not data:
        return
    path = events_path(home_root)
    with _locked(home_root):  # one writer at a time, so a rotation never races another append
        with contextlib.suppress(FileNotFoundError):
            size = os.stat(path, follow_symlinks=False).st_size
            if size and size + len(data) > max_bytes:
                _rotate(home_root, keep)
        if _ends_mid_line(path):  # a writer died mid-line: end that line, or ours would be glued to it
            data = b"\n" + data
        # Never through a link, never blocking on a FIFO (docs/design.md §2): UnsafePath names it.
        fd = safefs.open_file(home_root, EVENTS_FILE, os.O_WRONLY | os.O_APPEND, create=True)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def _ends_mid_line(path: Path) -> bool:
    try:
        fd = _open_read(path)
    except (OSError, safefs.UnsafePath):
        return False  # none yet (or a planted link or FIFO, which the append refuses next)
    try:
        size = os.fstat(fd).st_size
        return size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(home_root: Path) -> Iterator[None]:
    fd = safefs.open_file(home_root, f"{EVENTS_FILE}.lock", os.O_RDWR, create=True)
    try:
        wait = safefs.lock_wait()
        if not safefs.lock(fd, wait):  # a teammate holding it for ever costs one wait, never the pass
            raise BusyError(f"{EVENTS_FILE}.lock is held by another process for over {wait:g}s; "
                            "these events are not logged", hint="see who holds it: fuser -v on that file")
        yield
    finally:
        os.close(fd)


def _rotate(home_root: Path, keep: int) -> None:
    """events.jsonl → .1 → .2 … → .keep; renames move a planted symlink, never follow it."""
    rotated_path(home_root, keep).unlink(missing_ok=True)
    for k in range(keep - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.rename(rotated_path(home_root, k), rotated_path(home_root, k + 1))
    if keep > 0:
        os.rename(events_path(home_root), rotated_path(home_root, 1))
    else:
        events_path(home_root).unlink()


# ---- reading ----------------------------------------------------------------------------------------

@dataclass
class Filter:
    job: int | None = None
    machine: str | None = None
    since: float | None = None

    def __call__(self, event: Event) -> bool:
        return ((self.job is None or event.job == self.job)
                and (self.machine is None or event.machine == self.machine)
                and (self.since is None or event.time >= self.since))


def _log_files(home_root: Path) -> list[Path]:
    """Every file of the log, oldest first."""
    rotated = []
    k = 1
    while rotated_path(home_root, k).exists():
        rotated.append(rotated_path(home_root, k))
        k += 1
    return [*reversed(rotated), events_path(home_root)]


def _parse(lines: Iterable[bytes], wanted: Filter) -> Iterator[Event]:
    for line in lines:
        if not line.strip():
            continue
        try:
            event = Event.from_json(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
        if event is not None and wanted(event):
            yield event


def _open_read(path: Path) -> int:
    """A descriptor reading a file at the top of the home: no link, never blocking on a FIFO."""
    return safefs.open_file(path.parent, path.name)


def _read_file(path: Path) -> bytes:
    try:
        fd = _open_read(path)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read()


def read(home_root: Path, job: int | None = None, machine: str | None = None,
         since: float | None = None) -> list[Event]:
    """The events that match, oldest first, across the rotated files. A line that is not a whole
    event (the unfinished last line of a writer that died) is left out."""
    wanted = Filter(job, machine, since)
    found: list[Event] = []
    for path in _log_files(home_root):
        found.extend(_parse(_read_file(path).splitlines(), wanted))
    return found


def latest(home_root: Path, n: int = 10) -> list[Event]:
    """The last `n` events, read from the end of events.jsonl only (cheap enough for a dashboard
    redrawn every few seconds); fewer right after a rotation."""
    path = events_path(home_root)
    try:
        fd = _open_read(path)
    except (OSError, safefs.UnsafePath):
        return []
    with os.fdopen(fd, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        chunk = min(size, max(4096, 512 * n))
        f.seek(size - chunk)
        lines = f.read().splitlines()
    if chunk < size:
        lines = lines[1:]  # the first line read may be the end of a longer one
    return list(_parse(lines, Filter()))[-n:] if n > 0 else []


def follow(home_root: Path, job: int | None = None, machine: str | None = None, since: float | None = None,
           poll: float | None = None) -> Iterator[Event]:
    """What `read` returns, then each new matching event as it is appended, for ever (the caller
    stops iterating). Survives rotation: the file it was reading is finished before the newer ones,
    so no event is missed or shown twice, even when several rotations happen between two polls."""
    wanted = Filter(job, machine, since)
    current = _Tail(events_path(home_root))
    done: set[tuple[int, int]] = set()  # the files read to their end (they only ever get renamed)
    for path in _log_files(home_root)[:-1]:
        if not current.same_file(path):
            yield from _parse(_read_whole(path, done), wanted)
    while True:
        yield from _parse(current.new_lines(), wanted)
        if not current.replaced():
            time.sleep(timing.current().events_poll if poll is None else poll)
            continue
        yield from _parse(current.new_lines(), wanted)  # what was written before the rotation
        if current.identity:
            done.add(current.identity)
        current.close()
        current = _Tail(events_path(home_root))
        for path in _unread(home_root, done, current):
            yield from _parse(_read_whole(path, done), wanted)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _read_whole(path: Path, done: set[tuple[int, int]]) -> list[bytes]:
    identity = _identity(path)
    if identity is not None:
        done.add(identity)
    return _read_file(path).splitlines()


def _unread(home_root: Path, done: set[tuple[int, int]], current: _Tail) -> list[Path]:
    """The rotated files written after the last one read (several rotations may have happened
    between two polls), oldest first."""
    newer = []
    for path in _log_files(home_root)[:-1][::-1]:  # .1, .2, …: newest first
        identity = _identity(path)
        if identity in done:
            break
        if identity is not None and identity != current.identity:
            newer.append(path)
    return newer[::-1]


class _Tail:
    """An open events file read as it grows; knows when its name now points at another file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.buffer = b""
        try:
            self.fd: int | None = _open_read(path)
            st = os.fstat(self.fd)
            self.identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            self.fd, self.identity = None, None

    def same_file(self, path: Path) -> bool:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return False
        return self.identity == (st.st_dev, st.st_ino)

    def replaced(self) -> bool:
        """The name now leads to another file (or to one where there was none)."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return self.identity != (st.st_dev, st.st_ino)

    def new_lines(self) -> list[bytes]:
        """The complete lines written since the last call; a partial last line waits for its end."""
        if self.fd is None:
            return []
        chunks = []
        while chunk := os.read(self.fd, 1 << 20):
            chunks.append(chunk)
        data = self.buffer + b"".join(chunks)
        done, _, self.buffer = data.rpartition(b"\n")
        return done.split(b"\n") if done else []

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ---- for people -------------------------------------------------------------------------------------

_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """A moment as a user gives it: a duration ago (`90s`, `10m`, `2h`, `1d`) or an ISO time
    (`2026-01-31T12:00`, local time unless it names a zone, `Z` for UTC). ValueError with one line."""
    now = time.time() if now is None else now
    match = _AGO.match(text)
    if match:
        return now - float(match.group(1)) * _UNIT[match.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give a duration ago (10m, 2h, 1d) or an ISO time "
                         "like 2026-01-31T12:00") from None
    return moment.timestamp()  # a naive time is the local time, as a user types it


def since_arg(text: str) -> float:
    """`parse_since` as an argparse type= (a bad value is one usage line, exit 2)."""
    try:
        return parse_since(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def render_line(event: Event, zone: Any = None) -> str:
    """One terminal-safe line: the time in `zone` (a tzinfo; None: this machine's local time), what,
    and where."""
    when = datetime.fromtimestamp(event.time, zone).strftime("%Y-%m-%d %H:%M:%S")
    return printable(f"{when}  {describe(event)}")


def describe(event: Event) -> str:
    """What happened, in words (untrusted names are not escaped here: the caller does, for its medium)."""
    d = event.detail
    who = f"job {event.job}" if event.job is not None else ""
    if who and d.get("name"):
        who += f" ({d['name']})"
    if event.attempt is not None:
        who += f" attempt {event.attempt}"
    on = f" on {event.machine}" if event.machine else ""
    if event.kind == JOB_ENDED:
        why = f" ({d['reason']})" if d.get("reason") else ""
        return f"{who}{on}: {d.get('status', 'ended')}{why}"
    if event.kind == JOB_RECOVERING:
        how = f", will {d['recover']}" if d.get("recover") else ""
        return f"{who}{on}: recovering from {d.get('reason') or 'a failure'}{how}"
    if event.kind == MACHINE_STATE:
        change = f"{d.get('from')} -> {d.get('to')}" if d.get("from") else f"{d.get('to')}"
        return f"{event.machine}: {change}" + (f" ({d['detail']})" if d.get("detail") else "")
    if event.kind == PASS_FAILED:
        return f"pass failed: {d.get('error', '')}"
    words = event.kind.replace("_", " ")
    if event.kind.startswith("tpu_"):
        words = f"TPU {words[4:]}"
    subject = f"{who}{on}" if who else (event.machine or "")
    error = f": {d['error']}" if d.get("error") else ""
    return f"{subject}: {words}{error}" if subject else f"{words}{error}"

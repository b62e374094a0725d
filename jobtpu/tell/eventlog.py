"""The event log on disk: `<home>/events.jsonl`, appended one batch per write under a lock, rotated
by size, read back with filters (oldest first) or from its end for a dashboard.

Rotation: when an append would take `events.jsonl` past ROTATE_BYTES (4 MiB), the files shift
(`events.jsonl` → `.1` → `.2` … → `.KEEP`, the oldest dropped). An event is about 200 bytes, so the
log keeps roughly the last 100,000 events (20 MiB at most): weeks of a busy fleet, which `jobtpu
report` needs to split interruptions, while reading all of it stays well under a second.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from jobtpu.decide.events import Event
from jobtpu.errors import BusyError, JobtpuError
from jobtpu.home import safefs
from jobtpu.schema.msgspec_lib import msgspec

EVENTS_FILE = "events.jsonl"
ROTATE_BYTES = 4 * 1024 * 1024
KEEP = 4  # rotated files kept besides events.jsonl


# ---- writing ----------------------------------------------------------------------------------------

def events_path(home_root: Path) -> Path:
    return home_root / EVENTS_FILE


def rotated_path(home_root: Path, k: int) -> Path:
    return home_root / f"{EVENTS_FILE}.{k}"


def _real_account() -> dict[str, Any]:
    from jobtpu.home.trust import account_name

    uid = os.getuid()
    return {"uid": uid, "account": account_name(uid)}


def append(home_root: Path, events: Iterable[Event], max_bytes: int = ROTATE_BYTES, keep: int = KEEP) -> list[str]:
    """Add `events` at the end of the log in one write (readers never see half a batch), rotating
    first when the batch would take the file past `max_bytes`. Synced before it returns: a pass
    drops from state.json's `untold` the events it finds here (docs/design.md §3), so one the disk
    could still lose must not be found. Returns a line for each thing a rotation found in its way
    and cleared (`_clear`)."""
    by = _real_account()  # the account that recorded them, whatever --user said (docs/design.md §7)
    data = b"".join(orjson.dumps({**e.to_json(), **by}) + b"\n" for e in events)
    if not data:
        return []
    path = events_path(home_root)
    lines: list[str] = []
    with _locked(home_root):  # one writer at a time, so a rotation never races another append
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(path, follow_symlinks=False)
            if st.st_size and st.st_size + len(data) > max_bytes and stat.S_ISREG(st.st_mode):
                lines += _rotate(home_root, keep)
        if _ends_mid_line(path):  # a writer died mid-line: end that line, or ours would be glued to it
            data = b"\n" + data
        # Never through a link, never blocking on a FIFO (docs/design.md §2): UnsafePath names it.
        fd = safefs.open_file(home_root, EVENTS_FILE, os.O_WRONLY | os.O_APPEND, create=True)
        try:
            safefs.write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    return lines


def _ends_mid_line(path: Path) -> bool:
    try:
        fd = open_read(path)
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


def _rotate(home_root: Path, keep: int) -> list[str]:
    """events.jsonl → .1 → .2 … → .keep; renames move a planted symlink, never follow it. Whatever a
    member put at a rotated name is cleared first (`_clear`), so a folder there never stops the log."""
    lines = [line for k in range(1, keep + 1) for line in _clear(home_root, rotated_path(home_root, k).name)]
    dropped = rotated_path(home_root, keep) if keep > 0 else events_path(home_root)
    lines += _carry(home_root, dropped)
    rotated_path(home_root, keep).unlink(missing_ok=True)
    for k in range(keep - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.rename(rotated_path(home_root, k), rotated_path(home_root, k + 1))
    if keep > 0:
        os.rename(events_path(home_root), rotated_path(home_root, 1))
    else:
        events_path(home_root).unlink()
    return lines


def _carry(home_root: Path, dropped: Path) -> list[str]:
    """Before the oldest file is dropped, what it counted goes into the carried totals (tell/totals.py),
    so that `jobtpu metrics`' counters never go down. Saved before the drop: a writer dying between
    the two counts that file twice, never loses it."""
    from jobtpu.tell import totals

    gone = totals.tally(parse_lines(read_file(dropped).splitlines(), Filter()))
    if not gone.ended and not gone.preempted:
        return []
    # A folder, link or FIFO at the totals' name (a member's, in a home whose group writes its root)
    # would stop every rotation, so every tell: cleared as the log's own names are.
    said = _clear(home_root, totals.TOTALS_FILE)
    try:
        carried = totals.load(home_root)
    except JobtpuError as e:  # broken by hand (UnsafePath too): the counters start again here
        carried = totals.Totals()
        said.append(f"{totals.TOTALS_FILE}: {e.message}: replaced by the counts of the events dropped now")
    totals.save(home_root, carried.plus(gone))
    return said


def _clear(home_root: Path, name: str) -> list[str]:
    """Make `name` in the home free or a regular file: a link, a FIFO or a socket there is removed
    (unlink never follows it), a folder is moved aside under a name the log never uses (it may hold
    a member's files: never deleted). One line says what was there and where it went."""
    path = home_root / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return []
    if stat.S_ISREG(st.st_mode):
        return []
    what = safefs.kind_of(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        path.unlink()
        return [f"{name} was {what}, not a log file: removed"]
    aside = path.with_name(f"{name}.not-a-log.{os.urandom(4).hex()}")
    os.rename(path, aside)
    return [f"{name} was {what}, not a log file: moved to {aside.name}"]


# ---- reading ----------------------------------------------------------------------------------------

class Filter(msgspec.Struct):
    job: int | None = None
    machine: str | None = None
    since: float | None = None

    def __call__(self, event: Event) -> bool:
        return ((self.job is None or event.job == self.job)
                and (self.machine is None or event.machine == self.machine)
                and (self.since is None or event.time >= self.since))


def log_files(home_root: Path) -> list[Path]:
    """Every file of the log, oldest first: what is not a regular file at a rotated name (a link, a
    FIFO, a folder a member put there) is passed over, and the next rotation clears it."""
    rotated = []
    k = 1
    while os.path.lexists(rotated_path(home_root, k)):
        if _is_regular(rotated_path(home_root, k)):
            rotated.append(rotated_path(home_root, k))
        k += 1
    return [*reversed(rotated), events_path(home_root)]


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def parse_lines(lines: Iterable[bytes], wanted: Filter) -> Iterator[Event]:
    for line in lines:
        if not line.strip():
            continue
        event = Event.from_line(line)
        if event is not None and wanted(event):
            yield event


def open_read(path: Path) -> int:
    """A descriptor reading a file at the top of the home: no link, never blocking on a FIFO."""
    return safefs.open_file(path.parent, path.name)


def read_file(path: Path) -> bytes:
    try:
        fd = open_read(path)
    except FileNotFoundError:
        return b""
    try:
        return safefs.read_capped(fd, path.name, safefs.CAP_LARGE)
    finally:
        os.close(fd)


def read(home_root: Path, job: int | None = None, machine: str | None = None,
         since: float | None = None) -> list[Event]:
    """The events that match, oldest first, across the rotated files. A line that is not a whole
    event (the unfinished last line of a writer that died) is left out."""
    wanted = Filter(job, machine, since)
    found: list[Event] = []
    for path in log_files(home_root):
        found.extend(parse_lines(read_file(path).splitlines(), wanted))
    return found


def latest(home_root: Path, n: int = 10) -> list[Event]:
    """The last `n` events, read from the end of events.jsonl only (cheap enough for a dashboard
    redrawn every few seconds); fewer right after a rotation."""
    path = events_path(home_root)
    try:
        fd = open_read(path)
    except (OSError, safefs.UnsafePath):
        return []
    with os.fdopen(fd, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        chunk = min(size, max(4096, 512 * n))
        f.seek(size - chunk)
        lines = f.read().splitlines()
    if chunk < size:
        lines = lines[1:]  # the first line read may be the end of a longer one
    return list(parse_lines(lines, Filter()))[-n:] if n > 0 else []

"""A shared home's spool (docs/reference/home-files.md §1.3): how members leave requests and how the
runner reads them, and the runner's replies.

`spool/` is the runner's folder, setgid and sticky, and the one place under the home's top folder a
member can write (besides their own `users/<name>/` and `results/`): each file there is its maker's,
and the sticky bit keeps every other member from renaming or deleting it. The runner reads a request
through a descriptor, as data, from the account the kernel says owns it: a link, a FIFO, a file with
other links, a file someone else can write or one over its size is refused with one line, and costs
that request alone.

Names:
- `submit-<first>-<count>-<random>.json`: a submit, claiming job ids first … first+count-1 (which
  file counts as a claim, and which claim holds an id: home/claims.py). The random part makes the
  name one no other member can take first.
- `archive-<first>-<random>.tar.gz`: that submit's snapshot, when the home does not have it yet.
- `act-<ns>-<random>.json`: an act (kill, hold, rerun, tag, note…), carried out in the order made.
- `.cache-<uid>/`: a member's own snapshot cache (never read by the runner).
"""

import contextlib
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from jobtpu.errors import BusyError, JobtpuError
from jobtpu.home import safefs
from jobtpu.home.layout import Home
from jobtpu.home.places import own_folder
from jobtpu.home.roles import REPLIES, SPOOL

CLAIMS_LOCK = ".claims.lock"
SUBMIT = re.compile(r"submit-([1-9][0-9]{0,11})-([1-9][0-9]{0,5})(-[0-9a-f]{12})?\.json")
ACT = re.compile(r"act-([0-9]{1,20})-([0-9a-f]{12})\.json")
MAX_ENTRIES = 10_000  # requests read in one intake; the rest wait for the next


class Entry(NamedTuple):
    name: str
    kind: str  # "submit" or "act"
    first: int = 0
    n: int = 0  # how many ids a submit claims


def entries(names: list[str]) -> list[Entry]:
    """Pure: the requests among a spool's names, submits by their first id, then acts by time."""
    submits, acts = [], []
    for name in names:
        if (m := SUBMIT.fullmatch(name)) is not None:
            submits.append(Entry(name, "submit", int(m[1]), int(m[2])))
        elif (m := ACT.fullmatch(name)) is not None:
            acts.append((int(m[1]), Entry(name, "act")))
    return sorted(submits, key=lambda e: e.first) + [e for _, e in sorted(acts)]


def archive_name(claim_name: str) -> str:
    """Pure: the spool name of the snapshot a submit's claim brings (`submit-5-2-ab….json` brings
    `archive-5-ab….tar.gz`; a claim of an older jobtpu, `submit-5-2.json`, brings `archive-5.tar.gz`)."""
    m = SUBMIT.fullmatch(claim_name)
    if m is None:
        raise ValueError(claim_name)
    return f"archive-{m[1]}{m[3] or ''}.tar.gz"


def open_spool(home: Home) -> int:
    """A descriptor of the home's spool, which must be the runner's sticky folder."""
    fd = safefs.open_dir(home.root, SPOOL)
    st, top = os.fstat(fd), os.stat(home.root)
    if st.st_uid != top.st_uid or not st.st_mode & stat.S_ISVTX:
        os.close(fd)
        raise safefs.UnsafePath(SPOOL, "is not the home's runner's sticky folder")
    return fd


def names_in(spool_fd: int) -> list[str]:
    with os.scandir(spool_fd) as it:
        return [e.name for e in it]


@contextlib.contextmanager
def claims_locked(spool_fd: int) -> Iterator[None]:
    """The claims lock, the runner's file, taken through a read-only descriptor (a member needs no
    write to it), waited for at most timing's lock_wait."""
    try:
        fd = safefs.open_in(spool_fd, CLAIMS_LOCK, shown=f"{SPOOL}/{CLAIMS_LOCK}")
    except FileNotFoundError:
        if os.fstat(spool_fd).st_uid != os.geteuid():
            raise JobtpuError(f"{SPOOL}/{CLAIMS_LOCK} is missing",
                              hint="the home's runner makes it: its next `jobtpu manage` does") from None
        fd = safefs.open_in(spool_fd, CLAIMS_LOCK, create=True, mode=0o640)
    try:
        if not safefs.lock(fd, safefs.lock_wait()):
            raise BusyError(f"{SPOOL}/{CLAIMS_LOCK} is held by another command",
                            hint="try again; a command that holds it for long is stuck")
        yield
    finally:
        os.close(fd)


def put_file(spool_fd: int, name: str, data: bytes, mode: int = 0o640) -> None:
    """`name` in the spool, whole (safefs.write_in), this account's, `mode`."""
    safefs.write_in(spool_fd, name, data, mode)


def new_act_name() -> str:
    return f"act-{time.time_ns()}-{os.urandom(6).hex()}.json"


def member_cache(home: Home) -> Path:
    """This account's own folder in the spool for its snapshot cache (2700): `.cache-<uid>` when that
    is this account's folder, else one of its own named `.cache-<uid>-<random>`, made when there is
    none. A name another member took first costs nothing (docs/reference/home-files.md §1.6)."""
    spool_fd = open_spool(home)
    try:
        name = own_folder(spool_fd, f".cache-{os.geteuid()}", 0o2700, SPOOL)
    finally:
        os.close(spool_fd)
    return home.root / SPOOL / name


def read_request(spool_fd: int, name: str, limit: int) -> tuple[bytes, int]:
    """A request's bytes and the account that owns it, read as untrusted data (see the module's
    docstring); UnsafePath says what is wrong with it."""
    fd = safefs.open_in(spool_fd, name, shown=f"{SPOOL}/{name}")
    try:
        st = os.fstat(fd)
        why = _why_refused(st, limit)
        if why is not None:
            raise safefs.UnsafePath(f"{SPOOL}/{name}", why)
        return safefs.read_fd(fd, limit + 1), st.st_uid  # grown past the cap since: refused as it decodes
    finally:
        os.close(fd)


def _why_refused(st: os.stat_result, limit: int) -> str | None:
    if st.st_nlink != 1:
        return "has other hard links"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by others than its owner"
    if st.st_size > limit:
        return f"is over {limit} bytes"
    return None


def open_archive(spool_fd: int, name: str, owner: int) -> int:
    """A submit's snapshot in the spool, a regular file of `owner`'s with one link."""
    fd = safefs.open_in(spool_fd, name, shown=f"{SPOOL}/{name}")
    st = os.fstat(fd)
    why = "is another account's" if st.st_uid != owner else _why_refused(st, 1 << 62)
    if why is not None:
        os.close(fd)
        raise safefs.UnsafePath(f"{SPOOL}/{name}", why)
    return fd


def remove(spool_fd: int, name: str) -> None:
    """A request taken in leaves the spool. What is not a file (a member's folder there) cannot be
    removed by the runner: it is renamed to a dot name, which no intake reads again."""
    try:
        os.unlink(name, dir_fd=spool_fd)
    except FileNotFoundError:
        pass
    except OSError:
        with contextlib.suppress(OSError):
            os.rename(name, f".refused-{time.time_ns()}-{name}", src_dir_fd=spool_fd, dst_dir_fd=spool_fd)


# ---- replies: the runner's answer to each request ----------------------------------------------------

def write_reply(home: Home, name: str, data: bytes) -> None:
    """replies/<request name>, the runner's (0640 in its 2750 folder), written whole."""
    fd = safefs.open_dir(home.root, REPLIES, create=True, mode=0o2750)
    try:
        safefs.write_in(fd, name, data, 0o640)
    finally:
        os.close(fd)


def read_reply(home: Home, name: str, limit: int) -> bytes | None:
    try:
        fd = safefs.open_file(home.root, f"{REPLIES}/{name}")
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.stat(home.root).st_uid:
            return None  # only the runner's answer counts
        return safefs.read_fd(fd, limit)
    finally:
        os.close(fd)


def prune_replies(home: Home, older_than: float) -> None:
    """Replies nobody came back for: kept a day, then removed."""
    try:
        fd = safefs.open_dir(home.root, REPLIES)
    except (FileNotFoundError, safefs.UnsafePath):
        return
    try:
        for name in names_in(fd):
            with contextlib.suppress(OSError):
                if os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime < older_than:
                    os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def stamps(paths: list[Path]) -> list[int]:
    """Each folder's modification time (0 when absent): it changes when an entry is added or removed."""
    found = []
    for path in paths:
        try:
            found.append(os.stat(path).st_mtime_ns)
        except OSError:
            found.append(0)
    return found

"""Which job ids a shared home's pending submits hold (docs/reference/home-files.md §1.3, "Job ids").

Every account's submit takes its ids at once, before any pass: a member's by leaving a claim in the
spool (`submit-<first>-<count>-<random>.json`), the runner's by writing state.json. Both take the
spool's claims lock and place their ids with the same rule, so ids are unique across accounts in
every order, with or without a pass between.

What a member leaves in the spool is untrusted: a file counts as a claim only when it is one its
owner could have made honestly (a regular file of one link that only its owner writes, whose content
decodes as a submission of the ids its name says). Among claims, the one the kernel stamped first
(`st_ctime_ns`, which no member can set back) holds overlapping ids; claims stamped alike that overlap
hold nothing. Ids are placed at the lowest free run above the ids given out, so a claim far above the
others, or a file that is no claim, moves nobody's ids. The claims lock is advisory: an account that
skips it can only lose to the honest submits it races, since they check their claim once the file
system's clock has passed it (`settle`)."""

import contextlib
import os
import stat
import time
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, NamedTuple

from jobtpu.home import safefs, spool

if TYPE_CHECKING:
    from pathlib import Path

    from jobtpu.home.layout import Home
    from jobtpu.schema.state import State


class Claim(NamedTuple):
    name: str
    first: int
    n: int
    made: int  # st_ctime_ns: when the file came to be what it is, stamped by the kernel
    owner: int

    @property
    def last(self) -> int:
        return self.first + self.n - 1


def holding(claims: Iterable[Claim], floor: int, taken: Collection[int]) -> list[Claim]:
    """Pure: the claims that hold their ids, above `floor` (the ids given out) and clear of `taken`
    (ids in state.json): earliest stamp first; a claim that overlaps one holding already, or one
    stamped alike, holds nothing."""
    candidates = [c for c in claims if c.first > floor and not any(i in taken for i in _ids_in(c, taken))]
    candidates.sort(key=lambda c: (c.made, c.first))
    held: list[Claim] = []
    for c in candidates:
        if any(_overlap(c, h) for h in held):
            continue
        if any(o is not c and o.made == c.made and _overlap(c, o) for o in candidates):
            continue
        held.append(c)
    return sorted(held, key=lambda c: c.first)


def _ids_in(c: Claim, taken: Collection[int]) -> Iterable[int]:
    """The ids of `c` worth testing against `taken`: whichever of the two is smaller to walk."""
    if c.n <= len(taken):
        return range(c.first, c.last + 1)
    return (i for i in taken if c.first <= i <= c.last)


def _overlap(a: Claim, b: Claim) -> bool:
    return a.first <= b.last and b.first <= a.last


def lowest_fit(floor: int, held: Iterable[Claim], n: int) -> int:
    """Pure: the first id of the lowest run of `n` ids above `floor` that no held claim holds."""
    start = floor + 1
    for c in sorted(held, key=lambda c: c.first):
        if c.last < start:
            continue
        if c.first >= start + n:
            break
        start = c.last + 1
    return start


# The claims of one account that are read (the first stamped): a member who leaves thousands of
# submits in the spool makes every other submit read no more of them than this, so nobody's submit
# is slowed into a busy claims lock by another's files; past it, a file of theirs holds no ids.
CLAIMS_PER_ACCOUNT = 1000


def read_claims(spool_fd: int, names: Iterable[str], known: "dict[tuple[str, int, int], Claim | None] | None" = None
                ) -> list[Claim]:
    """The spool's submits that are claims (see the module's docstring); what is not one is left out,
    and so is what one account left past its first CLAIMS_PER_ACCOUNT. `known` keeps what was read
    by (name, inode, stamp), for a second look."""
    by_owner: dict[int, list[tuple[int, str, int, int]]] = {}
    for name in names:
        if (m := spool.SUBMIT.fullmatch(name)) is None:
            continue
        st = safefs.lstat_in(spool_fd, name)
        if st is not None and stat.S_ISREG(st.st_mode):
            by_owner.setdefault(st.st_uid, []).append((st.st_ctime_ns, name, int(m[1]), int(m[2])))
    found = []
    for files in by_owner.values():
        for _, name, first, n in sorted(files)[:CLAIMS_PER_ACCOUNT]:
            claim = _claim(spool_fd, name, first, n, known)
            if claim is not None:
                found.append(claim)
    return found


def _claim(spool_fd: int, name: str, first: int, n: int,
           known: dict[tuple[str, int, int], Claim | None] | None) -> Claim | None:
    from jobtpu.schema.decode import decode_sent
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import MAX_SUBMISSION_BYTES, Submission

    try:
        fd = safefs.open_in(spool_fd, name, shown=f"{spool.SPOOL}/{name}")
    except (OSError, safefs.UnsafePath):
        return None
    try:
        st = os.fstat(fd)
        key = (name, st.st_ino, st.st_ctime_ns)
        if known is not None and key in known:
            return known[key]
        claim = None
        if (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                and 0 < st.st_size <= MAX_SUBMISSION_BYTES):
            with contextlib.suppress(msgspec.DecodeError, OSError):
                doc = decode_sent(safefs.read_fd(fd, MAX_SUBMISSION_BYTES), Submission)
                if doc.first == first and len(doc.jobs) == n:
                    claim = Claim(name, first, n, st.st_ctime_ns, st.st_uid)
        if known is not None:
            known[key] = claim
        return claim
    finally:
        os.close(fd)


def settle(folder: "Path", made: int) -> None:
    """Wait until the file system stamps a new change later than `made`: from then on any file that
    appears in the spool is stamped after the claim stamped `made` (a few ms where stamps follow the
    kernel's tick; the spool's own clock, whatever the box's). The probe is a file of this account's
    own `folder` in the spool (its snapshot cache): same file system, and nothing left among others'."""
    from jobtpu import timing

    probe = f".probe-{os.getpid()}-{os.urandom(4).hex()}"
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        while os.fstat(fd).st_ctime_ns <= made:
            time.sleep(timing.current().lock_poll / 10)
            os.fchmod(fd, 0o600 if os.fstat(fd).st_mode & 0o777 == 0o400 else 0o400)  # a change: a new stamp
    finally:
        os.close(fd)
        os.unlink(probe, dir_fd=dir_fd)
        os.close(dir_fd)


def placed(spool_fd: int, floor: int, next_free: int, taken: Collection[int], n: int,
           known: dict[tuple[str, int, int], Claim | None] | None = None) -> tuple[int, list[Claim]]:
    """Under the claims lock: the first of `n` ids for a new submit (above `next_free` - 1 and every
    held claim's run), and the claims that hold ids above `floor` (last_id) now."""
    held = holding(read_claims(spool_fd, spool.names_in(spool_fd), known), floor, taken)
    return lowest_fit(max(floor, next_free - 1), held, n), held


def mark_below(last: int, held: Iterable[Claim]) -> int:
    """Pure: how far last_id may go to cover ids up to `last` while claims still wait: never up to a
    waiting claim's first id (the runner takes a claim in only above last_id)."""
    return min([last, *(c.first - 1 for c in held)])


def runner_ids(home: "Home", state: "State", n: int) -> int:
    """Inside a transaction of the runner's: the first of `n` fresh ids for its own submit, placed
    under the claims lock clear of every claim that holds ids, spent at once (state.json's next id,
    and last_id as far as no waiting claim lies below: the pass takes those in above it)."""
    from jobtpu.home.store import highest_used_id, read_id_mark, write_id_mark

    spool_fd = spool.open_spool(home)
    try:
        with spool.claims_locked(spool_fd):
            mark = read_id_mark(home)
            next_free = max(state.next_id, highest_used_id(home) + 1)
            first, held = placed(spool_fd, mark, next_free, {job.id for job in state.jobs}, n)
            state.next_id = first + n
            top = mark_below(first + n - 1, held)
            if top > mark:
                write_id_mark(home, top)
    finally:
        os.close(spool_fd)
    return first

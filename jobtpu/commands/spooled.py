"""A member's submit in a shared home (docs/reference/home-files.md §1.3): the jobs, checked as every
submit checks them, claim their ids and wait in the spool, with their snapshot, for the runner's next
pass to take them in. The ids are the member's at once: the claim is made under the spool's claims
lock, with the rule every submit places its ids by (home/claims.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.commands.common import note
from jobtpu.errors import BusyError
from jobtpu.home import spool
from jobtpu.home.layout import Home
from jobtpu.home.roles import Role, runner_name

CLAIM_TRIES = 5  # placings of one submit's ids before it gives up (each lost only to a file made without the lock)

if TYPE_CHECKING:
    from jobtpu.commands.batch import Extras
    from jobtpu.schema.state import Job


def file_submission(home: Home, role: Role, jobs: list[Job], secret: dict[str, str], extras: Extras,
                    cache: Path) -> list[Job]:
    """The jobs' ids claimed and the submit left in the spool (state.json is read again under the
    claims lock: what was read before it may be old)."""
    from jobtpu.home.sealing import public_of, reply_key, runner_public_key, seal
    from jobtpu.schema.msgspec_lib import msgspec

    # What the group must not read travels sealed (docs/design.md §7): the secret values to the
    # runner's key, checked before any id is claimed; the reply to this member's own key.
    sealed = seal(runner_public_key(home.root, runner_name(role)), msgspec.json.encode(secret)) if secret else b""
    reply_public = public_of(reply_key(cache))
    bring = not home.archive(archive_of(jobs)).is_file()  # the home has it already: the runner reuses its copy
    fd = spool.open_spool(home)
    try:
        with spool.claims_locked(fd):
            _claim_ids(home, fd, jobs, (sealed, reply_public), extras, cache, bring)
    finally:
        os.close(fd)
    note(f"sent to {runner_name(role)}, this home's runner: its next pass takes "
         f"{'it' if len(jobs) == 1 else 'them'} in (`jobtpu requests` shows what waits)")
    return jobs


def _claim_ids(home: Home, fd: int, jobs: list[Job], keys: tuple[bytes, bytes], extras: Extras, cache: Path,
               bring: bool) -> int:
    """Under the claims lock: the jobs' ids placed as every submit places them (home/claims.py), the
    claim left in the spool, then checked once the spool's clock has passed it: a claim that another
    account's file, made without the lock, beat to those ids is taken back and placed again."""
    from jobtpu.commands.batch import check_dependencies, sweep_tag
    from jobtpu.home import claims
    from jobtpu.home.store import Store, read_id_mark
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import Submission

    known: dict[tuple[str, int, int], claims.Claim | None] = {}
    tags = [list(each.tags) for each in jobs]
    for _ in range(CLAIM_TRIES):
        state = Store(home).load()  # read under the lock: the runner's own submits write it holding the lock
        mark, taken = read_id_mark(home), {job.id for job in state.jobs}
        first, _ = claims.placed(fd, mark, state.next_id, taken, len(jobs), known)
        check_dependencies(home, state, first, extras.after, extras.after_any)
        for offset, each in enumerate(jobs):
            each.id = first + offset
            each.uid = os.getuid()
            if extras.combinations is not None:
                each.sweep = first
                each.tags = [*tags[offset], sweep_tag(first)]
        tail = os.urandom(6).hex()
        name = f"submit-{first}-{len(jobs)}-{tail}.json"
        if bring:
            _move_into_spool(cache / archive_of(jobs), fd, f"archive-{first}-{tail}.tar.gz")
        doc = Submission(first=first, jobs=jobs, sealed=keys[0], reply_key=keys[1], archive_included=bring)
        try:
            spool.put_file(fd, name, msgspec.json.encode(doc))
            made = os.stat(name, dir_fd=fd, follow_symlinks=False).st_ctime_ns
            claims.settle(cache, made)
            held = claims.holding(claims.read_claims(fd, spool.names_in(fd), known), mark, taken)
        except BaseException:  # a full disk, Ctrl-C: a submit that said it failed leaves no claim behind
            _take_back(fd, name, tail, first, cache / archive_of(jobs) if bring else None)
            raise
        if any(c.name == name for c in held):
            return first
        _take_back(fd, name, tail, first, cache / archive_of(jobs) if bring else None)  # beaten: placed again
    raise BusyError("other files in the spool kept taking the ids this submit claimed",
                    hint="submit again; if it keeps happening, tell the home's runner (`jobtpu requests` shows the spool)")


def _take_back(fd: int, name: str, tail: str, first: int, archive: Path | None) -> None:
    """The claim out of the spool, and its snapshot (when it brought one) back into the cache."""
    spool.remove(fd, name)
    if archive is not None:
        os.rename(f"archive-{first}-{tail}.tar.gz", archive, src_dir_fd=fd)


def archive_of(jobs: list[Job]) -> str:
    return jobs[0].archive


def _move_into_spool(path: Path, spool_fd: int, name: str) -> None:
    """The snapshot from this account's cache into the spool under the submit's name, readable by the
    group (the runner reads it), writable by nobody else."""
    os.rename(path, name, dst_dir_fd=spool_fd)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=spool_fd)
    try:
        os.fchown(fd, -1, os.fstat(spool_fd).st_gid)
        os.fchmod(fd, 0o640)
    finally:
        os.close(fd)

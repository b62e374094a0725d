"""A member's submit in a shared home (docs/reference/home-files.md §1.3): the jobs, checked as every
submit checks them, claim their ids and wait in the spool, with their snapshot, for the runner's next
pass to take them in. The ids are the member's at once: the claim is made under the spool's claims
lock against `last_id` and every claim already there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.commands.common import note
from jobtpu.home import spool
from jobtpu.home.layout import Home
from jobtpu.home.roles import Role, runner_name

if TYPE_CHECKING:
    from jobtpu.commands.batch import Extras
    from jobtpu.schema.state import Job, State


def file_submission(home: Home, role: Role, jobs: list[Job], secret: dict[str, str], state: State,
                    extras: Extras, cache: Path) -> list[Job]:
    from jobtpu.commands.batch import check_dependencies, sweep_tag
    from jobtpu.home.sealing import public_of, reply_key, runner_public_key, seal
    from jobtpu.home.store import read_id_mark
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import Submission

    # What the group must not read travels sealed (docs/design.md §7): the secret values to the
    # runner's key, checked before any id is claimed; the reply to this member's own key.
    sealed = seal(runner_public_key(home.root, runner_name(role)), msgspec.json.encode(secret)) if secret else b""
    private = reply_key(cache)
    archive = jobs[0].archive
    bring = not home.archive(archive).is_file()  # the home has it already: the runner reuses its copy
    fd = spool.open_spool(home)
    try:
        with spool.claims_locked(fd):
            mark = max(read_id_mark(home), state.next_id - 1)
            first = spool.claimed_up_to(spool.names_in(fd), mark) + 1
            check_dependencies(home, state, first, extras.after, extras.after_any)
            for offset, each in enumerate(jobs):
                each.id = first + offset
                each.uid = os.getuid()
                if extras.combinations is not None:
                    each.sweep = first
                    each.tags.append(sweep_tag(first))
            if bring:
                _move_into_spool(cache / archive, fd, f"archive-{first}.tar.gz")
            doc = Submission(first=first, jobs=jobs, sealed=sealed, reply_key=public_of(private),
                             archive_included=bring)
            spool.put_file(fd, f"submit-{first}-{len(jobs)}.json", msgspec.json.encode(doc))
    finally:
        os.close(fd)
    note(f"sent to {runner_name(role)}, this home's runner: its next pass takes "
         f"{'it' if len(jobs) == 1 else 'them'} in (`jobtpu requests` shows what waits)")
    return jobs


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

"""`jobtpu kill`: stop the selected jobs on every worker and mark them killed, under the pass lock."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.commands.select import (
    Selection,
    add_selection_args,
    announce,
    require_some,
    select_current,
    selection_from,
)
from jobtpu.home.layout import Home
from jobtpu.home.users import check_owners, known_user

if TYPE_CHECKING:
    from jobtpu.passes.session import Session
    from jobtpu.schema.state import Job


def kill(home: Home, sel: Selection, force: bool = False, dry_run: bool = False) -> int:
    from jobtpu.passes.act import kill_jobs
    from jobtpu.passes.session import locked_session

    require_some(sel, "kill")
    me = known_user(home, None)
    with locked_session(home) as session:
        jobs = select_current(home, session.state.jobs, sel, "kill")  # every id known, or nothing is killed
        for job in jobs:
            if job.ended and not sel.filters:
                note(f"job {job.id} already {job.status}")
        live = [j for j in jobs if not j.ended]
        check_owners(home, live, me, force, "kill", record=not dry_run)  # all allowed, or nothing is killed
        announce("kill", live, sel, dry_run)
        if dry_run:
            return 0
        kill_jobs(session, live, time.time(), by=me)
        stopping = [(j, _local_process_owner(session, j)) for j in live if j.status == "killing"]
    for job, owner in stopping:
        if owner is not None:
            # Its wrapper did not obey the stop request in time (or predates them): a pass of the
            # owner's still can, and any pass tries again.
            note(f"job {job.id}: its processes on {job.machine} run as {owner} and have not stopped yet; "
                 f"the next pass tries again (one run by {owner} can stop them itself)")
        else:
            note(f"job {job.id}: still stopping on {job.machine}; the next pass will finish it")
    return 0


def _local_process_owner(session: Session, job: Job) -> str | None:
    """The account a job's processes on the local machine belong to, when it is not this one: a
    process started by another account's pass can only be signalled by that account (or root)."""
    import os
    import pwd

    from jobtpu.fleet.drivers import driver_for

    machine = session.fleet.get(job.machine) if job.machine else None
    if machine is None or driver_for(machine).remote or os.geteuid() == 0:
        return None
    pid_file = Path(machine.root) / "meta" / str(job.id) / f"{job.attempt}.0.pid"
    try:
        owner = pid_file.stat().st_uid
    except OSError:
        return None
    if owner == os.geteuid():
        return None
    try:
        return pwd.getpwuid(owner).pw_name
    except KeyError:
        return f"uid {owner}"


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "kill")
    add_selection_args(p, "the jobs to stop", dry_run=True)
    p.set_defaults(func=lambda home, a: kill(home, selection_from(a), a.force, a.dry_run))

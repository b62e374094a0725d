"""`jobtpu resume` and `jobtpu rerun`: queue ended jobs again, from their checkpoints or from the
start, under the pass lock; prints their ids."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.commands.common import say
from jobtpu.commands.select import (
    Selection,
    add_selection_args,
    announce,
    require_some,
    select_current,
    selection_from,
)
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.users import check_owners, known_user

if TYPE_CHECKING:
    from jobtpu.schema.state import Job


def requeue(home: Home, sel: Selection, machine: str | None, resume: bool, force: bool = False,
            dry_run: bool = False) -> int:
    """`resume` (from the jobs' checkpoints) or `rerun` (from the start) of ended jobs; prints their ids."""
    from jobtpu.decide.core import requeue as requeue_job
    from jobtpu.passes.session import locked_session
    from jobtpu.schema.state import Cause

    verb = "resume" if resume else "rerun"
    require_some(sel, verb)
    me = known_user(home, None)
    with locked_session(home) as session:
        jobs = select_current(home, session.state.jobs, sel, verb)
        if not sel.filters:  # named by id: each must have ended
            for job in jobs:
                if not job.ended:
                    raise JobtpuError(f"job {job.id} is {job.status}; only an ended job can be queued again",
                                      hint=f"`jobtpu kill {job.id}` first")
        jobs = [j for j in jobs if j.ended]
        if machine is not None:
            machine = session.fleet.resolve(machine).name
        check_owners(home, jobs, me, force, verb, record=not dry_run)
        announce(verb, jobs, sel, dry_run, by_id=False)
        if dry_run:
            return 0
        for job in jobs:
            requeue_job(job, resume=resume, reason=None, cause=Cause.REQUEUE, machine=machine)
            job.queued_by_hand()
            _adopt(home, job)
    if not sel.filters:  # named by id: the ids, as ever (with selectors, announce said which)
        for job in jobs:
            say(job.id)
    return 0


def _adopt(home: Home, job: Job) -> None:
    """A job made before homes kept specs gets one from its own account's rerun or resume (a
    teammate's forced rerun keeps the job's spec, or its lack of one: docs/design.md §7)."""
    from jobtpu.home.actor import real_uid
    from jobtpu.home.roles import Layout, role_of
    from jobtpu.home.secrets import MASK
    from jobtpu.home.specs import has_spec, write_spec

    if job.uid not in (None, real_uid()):
        return
    if role_of(home.root).layout is Layout.SHARED:  # the runner's record names the account: no spec needed
        job.uid = real_uid()
        return
    if has_spec(home, job.id):
        return
    job.uid = real_uid()
    write_spec(home, job, [name for name, value in job.env.items() if value == MASK])


def add_parser(subparsers: args.Subparsers) -> None:
    for name, resume in (("resume", True), ("rerun", False)):
        p = args.add_command(subparsers, name)
        add_selection_args(p, "the ended jobs", dry_run=True)
        p.add_argument("--machine", help="run only on this machine from now on (a name or an alias)")
        p.set_defaults(func=lambda home, a, resume=resume: requeue(home, selection_from(a), a.machine, resume,
                                                                   a.force, a.dry_run))

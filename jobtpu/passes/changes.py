"""The events a pass's changes mean. A job's come from the status changes the pass made, as decide
and settle return them (Transition values), each from its move's cause, read against its record as
saved for the details: what was launched, began running, ended or is recovering, and when. A machine's come from comparing its record as the
pass read it with what it saves (its steps are decided in tpu/, whose reports land in the record).
A change a person made between passes is no move of the pass's: the command that made it tells its
own events (kill, update, drain). Pure (passes/tell.py keeps and tells what these find)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobtpu.decide import events as ev
from jobtpu.decide.events import Event
from jobtpu.decide.saving import unsaved_rerun
from jobtpu.schema import state as model
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import SetupStatus
from jobtpu.schema.state import ENDED, Attempt, Cause, Job, MachineRecord, Status, Transition

# Events stamped with the same time happen in this order within a pass: what it observed of the
# jobs, then the machines' steps (recreations it started because of that, setups), then launches.
PHASE = {ev.PREEMPTED: 0, ev.JOB_ENDED: 0, ev.JOB_RECOVERING: 0, ev.JOB_LAUNCHED: 2, ev.JOB_RESUMED: 2,
          ev.JOB_RUNNING: 3}


class Told(msgspec.Struct, frozen=True):
    """An event of a job and the cause of the move it comes from."""

    cause: Cause
    event: Event


LAUNCHES = frozenset({Cause.LAUNCH, Cause.RELAUNCH})
ENDINGS = frozenset({Cause.END, Cause.RECOVER})  # an attempt ended: the job with it, or queued for the next


def job_events(moves: Sequence[Transition], jobs: list[Job], acted: float, now: float) -> list[Event]:
    """What the status changes a pass made (`moves`, in order, as decide and settle returned them)
    mean, read against each job's record as the pass saves it. `acted`: when the pass began to act
    (launches happen then, after the machines' steps); `now`: when it ended."""
    return [told.event for told in job_events_told(moves, jobs, acted, now)]


def job_events_told(moves: Sequence[Transition], jobs: list[Job], acted: float, now: float) -> list[Told]:
    """job_events, each with the cause of the move it was made from."""
    by_job: dict[int, list[Transition]] = {}
    for move in moves:
        by_job.setdefault(move.job, []).append(move)
    found: list[Told] = []
    for job in jobs:  # in the file's order, as the records are
        if job.id in by_job:
            found += _job_changes(by_job[job.id], job, acted, now)
    return found


def _job_changes(moves: list[Transition], new: Job, acted: float, now: float) -> list[Told]:
    """Each event comes from a move's cause: a launch (a relaunch also says the job resumed), workers
    that started, an attempt that ended (the job with it, or queued for its next), a job ended."""
    found: list[Told] = []
    launches = {m.attempt: m.cause for m in moves if m.cause in LAUNCHES}
    endings = {m.attempt: m.cause for m in moves if m.cause in ENDINGS}
    spent = {m.attempt: {"spent": m.spent} for m in moves if m.spent}  # a budget that ran out ended it
    # Workers that started make the job running, unless it ran already when the pass read it.
    started = moves[0].was is not Status.RUNNING and any(m.cause is Cause.STARTED for m in moves)
    detail = {"name": new.name} if new.name else {}

    def event(cause: Cause, when: float, kind: str, attempt: Attempt | None, **more: Any) -> None:
        found.append(Told(cause, Event(when, kind, job=new.id, machine=attempt.machine if attempt else new.machine,
                                       user=new.user, attempt=attempt.n if attempt else None,
                                       detail={**detail, **more})))

    for i, attempt in enumerate(new.attempts):
        launch = launches.get(attempt.n)
        if launch is not None:
            at = max(float(attempt.started or acted), acted)
            event(launch, at, ev.JOB_LAUNCHED, attempt, workers=attempt.workers)
            if i > 0 and launch is Cause.RELAUNCH:
                event(launch, at, ev.JOB_RESUMED, attempt, resume=attempt.resume)
        last = attempt.n == new.attempt
        if last and new.status is Status.RUNNING and started:
            event(Cause.STARTED, now, ev.JOB_RUNNING, attempt)
        ending = endings.get(attempt.n)
        if attempt.ended is not None and ending is not None:
            when = float(attempt.ended)
            if attempt.outcome == model.PREEMPTED:
                event(ending, when, ev.PREEMPTED, attempt,  # by a higher priority class's job: which one
                      **({"evicted_by": new.evicted_by} if new.evicted_by is not None and i == len(new.attempts) - 1 else {}))
            if new.ended and last:
                event(ending, when, ev.JOB_ENDED, attempt, status=str(new.status), reason=new.reason,
                      exit_code=new.exit_code, **spent.get(attempt.n, {}))
            else:
                event(ending, when, ev.JOB_RECOVERING, attempt, reason=attempt.outcome,
                      recover="resume" if new.resume else "rerun", **({"unsaved": True} if unsaved_rerun(new) else {}))
    ended = next((m for m in reversed(moves) if m.to in ENDED), None)  # the move that ended the job, if any
    if new.ended and ended is not None and not any(told.event.kind == ev.JOB_ENDED for told in found):
        event(ended.cause, acted, ev.JOB_ENDED, new.current, status=str(new.status), reason=new.reason,
              exit_code=new.exit_code, **({"spent": ended.spent} if ended.spent else {}))
    return found


def ended_by_hand(jobs: list[Job], now: float, by: str | None) -> list[Event]:
    """`job_ended` for jobs a command (kill) ended itself, naming who ran it."""
    found = []
    for job in jobs:
        attempt = job.current
        detail: dict[str, Any] = {"name": job.name} if job.name else {}
        detail.update(status=str(job.status), reason=job.reason, exit_code=job.exit_code)
        if by is not None:
            detail["by"] = by
        found.append(Event(now, ev.JOB_ENDED, job=job.id, machine=attempt.machine if attempt else job.machine,
                           user=job.user, attempt=attempt.n if attempt else None, detail=detail))
    return found


# ---- machines -------------------------------------------------------------------------------------------

def machine_events(before: dict[str, MachineRecord], after: dict[str, MachineRecord], observed: float,
                   setups_ended: float) -> list[Event]:
    """State changes and TPU steps (delete, create, setup), from each machine's record."""
    found: list[Event] = []
    for name, record in sorted(after.items()):
        was = before.get(name) or MachineRecord()
        if record.state is not None and record.state != was.state:
            found.append(ev.machine_event(observed, name, was.state, record.state, record.detail))
        found += _tpu_steps(name, was, record, observed, setups_ended)
    return found


def _tpu_steps(name: str, was: MachineRecord, now: MachineRecord, observed: float,
               setups_ended: float) -> list[Event]:
    found: list[Event] = []

    def event(when: float, kind: str, **detail: Any) -> None:
        found.append(Event(when, kind, machine=name, detail=detail))

    old_op, op = was.operation, now.operation
    if old_op is not None and (op is None or op.name != old_op.name):
        if old_op.kind == "delete":
            event(observed, ev.TPU_DELETE_DONE)
        elif op is None and now.failures <= was.failures and now.refused is None:
            event(observed, ev.TPU_CREATE_DONE)
    if op is not None and (old_op is None or op.name != old_op.name):
        event(float(op.since or observed), ev.TPU_DELETE_STARTED if op.kind == "delete" else ev.TPU_CREATE_STARTED)
    if now.queue_asked is not None and now.queue_asked != was.queue_asked:
        event(float(now.queue_asked), ev.TPU_CREATE_STARTED, queued=True)
    failed = now.failures > was.failures or (now.refused is not None and now.refused != was.refused)
    if failed:
        event(observed, ev.TPU_CREATE_FAILED, error=now.last_error)
    elif was.want_recreate and not now.want_recreate and not any(e.kind == ev.TPU_CREATE_DONE for e in found):
        event(observed, ev.TPU_CREATE_DONE)  # through a queued resource, or a create whose answer was lost
    found += _setup_steps(name, was, now, observed, setups_ended)
    return found


def _setup_steps(name: str, was: MachineRecord, now: MachineRecord, observed: float,
                 setups_ended: float) -> list[Event]:
    old, new = was.setup, now.setup
    if new is None or new == old:
        return []
    found = []
    going = old is not None and old.status == SetupStatus.RUNNING and old.incarnation == new.incarnation
    if not going:
        found.append(Event(observed, ev.TPU_SETUP_STARTED, machine=name))
    if new.status == SetupStatus.DONE:
        found.append(Event(setups_ended, ev.TPU_SETUP_DONE, machine=name))
    elif new.status == SetupStatus.FAILED:
        found.append(Event(setups_ended, ev.TPU_SETUP_FAILED, machine=name, detail={"error": new.error}))
    return found


"""The events a pass's changes to the records mean: each job and machine record as the pass read it
compared with what it saves, so no decision code has to remember to report anything: whatever changed
a record is seen here. Pure (passes/tell.py keeps and tells what these find)."""

from __future__ import annotations

from typing import Any

import msgspec

from jobtpu.decide import events as ev
from jobtpu.decide.events import Event
from jobtpu.schema import state as model
from jobtpu.schema.records import SetupStatus
from jobtpu.schema.state import Attempt, Job, MachineRecord, Status

_JOB = msgspec.json.Decoder(Job)


# Events stamped with the same time happen in this order within a pass: what it observed of the
# jobs, then the machines' steps (recreations it started because of that, setups), then launches.
PHASE = {ev.PREEMPTED: 0, ev.JOB_ENDED: 0, ev.JOB_RECOVERING: 0, ev.JOB_LAUNCHED: 2, ev.JOB_RESUMED: 2,
          ev.JOB_RUNNING: 3}


def job_events(before: dict[int, bytes], jobs: list[Job], lines: list[bytes], acted: float,
               now: float) -> list[Event]:
    """What happened to each job whose record the pass changed. `acted`: when the pass began to act
    (launches happen then, after the machines' steps); `now`: when it ended."""
    found: list[Event] = []
    for job, line in zip(jobs, lines, strict=True):
        old_line = before.get(job.id)
        if old_line is None or old_line == line:
            continue  # unchanged, or submitted while the pass ran (it did nothing to it)
        found += _job_changes(_JOB.decode(old_line), job, acted, now)
    return found


def _job_changes(old: Job, new: Job, acted: float, now: float) -> list[Event]:
    found: list[Event] = []
    known = {a.n: a for a in old.attempts}
    detail = {"name": new.name} if new.name else {}

    def event(when: float, kind: str, attempt: Attempt | None, **more: Any) -> None:
        found.append(Event(when, kind, job=new.id, machine=attempt.machine if attempt else new.machine,
                           user=new.user, attempt=attempt.n if attempt else None, detail={**detail, **more}))

    for i, attempt in enumerate(new.attempts):
        was = known.get(attempt.n)
        if was is None:
            launched = max(float(attempt.started or acted), acted)
            event(launched, ev.JOB_LAUNCHED, attempt, workers=attempt.workers)
            by_hand = old.status is Status.QUEUED and old.reason is None  # resume/rerun by a person
            if i > 0 and not by_hand:
                event(launched, ev.JOB_RESUMED, attempt, resume=attempt.resume)
        last = attempt.n == new.attempt
        if last and new.status is Status.RUNNING and (was is None or old.status is not Status.RUNNING):
            event(now, ev.JOB_RUNNING, attempt)
        if attempt.ended is not None and (was is None or was.ended is None):
            when = float(attempt.ended)
            if attempt.outcome == model.PREEMPTED:
                event(when, ev.PREEMPTED, attempt)
            if new.ended and last:
                event(when, ev.JOB_ENDED, attempt, status=str(new.status), reason=new.reason,
                      exit_code=new.exit_code)
            else:
                event(when, ev.JOB_RECOVERING, attempt, reason=attempt.outcome,
                      recover="resume" if new.resume else "rerun")
    if new.ended and not old.ended and not any(e.kind == ev.JOB_ENDED for e in found):
        event(acted, ev.JOB_ENDED, new.current, status=str(new.status), reason=new.reason,
              exit_code=new.exit_code)
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


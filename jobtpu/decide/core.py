"""The pure heart of a pass: given the jobs, the fleet and what was observed, say how the jobs change
and which actions to carry out, as values (a Plan: new records, status moves each with its cause,
actions). It changes nothing it is given, so every branch is tested directly and --dry-run is free:
the pass applies the plan (`Plan.apply_to`), a dry run only tells it. The running jobs are judged
here; queued ones are dispatched (dispatch.py); what the acts then report is judged by outcomes.py."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping

from jobtpu.decide import rules, slurm_after
from jobtpu.decide.dispatch import dispatch
from jobtpu.decide.gang import gang_view, kills, machines_of, per_slice, preempted_of
from jobtpu.decide.observation import (
    Kill,
    Launch,
    MachineView,
    Observation,
    Plan,
    Recreate,
    elsewhere,
    elsewhere_line,
    refs_of,
    rule_of,
)
from jobtpu.decide.saving import resumes
from jobtpu.decide.workers import WorkerRef
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Attempt, Cause, Ending, Job, Status, Transition


def decide(jobs: list[Job], fleet: Fleet, seen: Observation) -> Plan:
    """What this pass does to `jobs` and the machines; the jobs, fleet and observation stay as given."""
    plan = Plan()
    by_id = ChainMap(plan.changed, {j.id: j for j in jobs})  # a dependent reads what this pass decided
    for given in sorted(jobs, key=lambda j: j.id):
        if not given.active:
            continue
        job = plan.edit(given)  # an active job is looked at closely: its new record, dropped if unchanged
        machine = fleet.get(job.machine) if job.machine else None
        if any(fleet.get(name) is None for name in job.gang):
            machine = None  # a gang whose slice left machines.json is judged as a job whose machine did
        if job.id in seen.last_lines:
            job.last_line = seen.last_lines[job.id]
        if (box := elsewhere(job, seen.box)) is not None:
            _elsewhere(job, box, seen, plan)
        elif job.status is Status.LAUNCHING:
            _launching(job, machine, seen, plan)
        elif job.status is Status.RUNNING:
            _running(job, machine, fleet, seen, plan, by_id)
        elif job.status is Status.KILLING:
            _killing(job, machine, fleet, seen, plan)
    plan.drop_unchanged({job.id: job for job in jobs if job.active})
    dispatch([plan.latest(job) for job in jobs], fleet, seen, plan)
    return plan


def _elsewhere(job: Job, box: str, seen: Observation, plan: Plan) -> None:
    """A job on another box's local machine (home-files.md §1.7): this runner can neither see its
    processes nor launch or stop them there. Taking it as lost would start it twice (the old box's copy
    runs on), so it waits, saying where; a person's kill ends it here, its processes left to that box."""
    if job.status is Status.KILLING:
        ending = job.ending or Ending(Status.KILLED, model.KILLED)
        job.last_line = (f"its processes on {box}'s local machine were not stopped (this runner cannot reach "
                         f"them): `jobtpu doctor local --fix` on {box} stops them")
        _end(job, ending, seen.now, plan, job.last_line)
        return
    if job.last_line != elsewhere_line(box, seen):
        plan.saw(f"job {job.id}: {elsewhere_line(box, seen)}")
    job.last_line = elsewhere_line(box, seen)
    if job.status is Status.RUNNING:  # a launching job keeps its reason (a relaunch's `recovering`)
        job.reason = model.UNREACHABLE


def _launching(job: Job, machine: Machine | None, seen: Observation, plan: Plan) -> None:
    if machine is None:
        _end(job, Ending(Status.FAILED, model.LAUNCH_FAILED), seen.now, plan, f"machine {job.machine} is gone")
        return
    view = gang_view(job, seen)
    if view.preempted:  # a gang's other slices may have started: they are stopped first
        _ended_attempt(job, machine, model.PREEMPTED, None, seen, plan, stop=_alive(refs_of(job), view))
    elif view.reachable is not False:
        # Launching is idempotent on the machine: it starts what has not started, reports the rest.
        plan.do(Launch(job.id, machine.name, job.attempt, job.current.workers if job.current else 1,
                       gang=tuple(job.gang)))


def _running(job: Job, machine: Machine | None, fleet: Fleet, seen: Observation, plan: Plan,
             by_id: Mapping[int, Job]) -> None:
    if machine is None:
        job.reason = model.UNREACHABLE
        left = next((name for name in machines_of(job) if fleet.get(name) is None), job.machine)  # a gang's slice
        plan.saw(f"job {job.id}: machine {left} is no longer in machines.json")
        return
    view = gang_view(job, seen)
    if view.preempted:  # one slice preempted stops the job on every other, which then resumes as one
        _ended_attempt(job, machine, model.PREEMPTED, None, seen, plan, stop=_alive(refs_of(job), view))
        return
    if not view.reachable:
        if job.reason != model.UNREACHABLE:
            plan.saw(f"job {job.id}: {machine.name} does not answer ({view.error or 'no reply'})")
        job.reason = model.UNREACHABLE
        return
    refs = refs_of(job)
    if job.id in seen.bad_files:  # a link, FIFO or foreign folder at its log: this job alone fails
        _fail(job, machine, Ending(Status.FAILED, model.HOME_FILE), seen.bad_files[job.id], refs, view, seen, plan)
        return
    states = [view.workers.get(ref) for ref in refs]
    if any(s is not None and s.unsubmitted for s in states):
        _submit_again(job, machine, plan)
        return
    if any(s is not None and s.preempted for s in states):  # Slurm requeued or preempted it: never run twice
        _ended_attempt(job, machine, model.PREEMPTED, None, seen, plan, stop=_alive(refs, view))
        return
    # Its worker kept the --timeout. Ended: gone, or its exit recorded (the wrapper writes the exit
    # record before it exits, so a probe between the two sees it alive with an exit code, which is
    # the timeout's all the same).
    if any(s is not None and s.timed_out and (not s.alive or s.exit_code is not None) for s in states):
        _fail(job, machine, Ending(Status.FAILED, model.TIMEOUT), "ran past its --timeout (stopped on its worker)",
              refs, view, seen, plan)
        return
    failed = [s for s in states if s is not None and s.exit_code not in (None, 0)]
    if failed:
        # The worker that failed first on its own (the others often fail because of it); a tie,
        # or a worker whose exit time is unknown, goes by the lowest index.
        first = min(failed, key=lambda s: (s.exited_at if s.exited_at is not None else float("inf"), s.ref.worker))
        reason = rules.classify(first.exit_code or 0, seen.log_tails.get(first.ref, ""), fleet.error_patterns)
        _ended_attempt(job, machine, reason, first.exit_code, seen, plan, stop=_alive(refs, view), worker=first.ref.worker)
        return
    if all(s is not None and s.exit_code == 0 for s in states):
        _end(job, Ending(Status.FINISHED, None, 0), seen.now, plan, "every worker exited 0")
        return
    if any(s is None or (not s.alive and s.exit_code is None) for s in states):
        _ended_attempt(job, machine, model.LOST, None, seen, plan, stop=_alive(refs, view))
        return
    waiting = next((s.waiting for s in states if s is not None and s.waiting), None)
    if (waiting is not None and job.current is not None and job.current.slurm_after
            and _judged_after(job, machine, waiting, by_id, fleet, refs, view, seen, plan)):
        return
    if waiting is not None and job.current is not None:
        # Slurm holds it pending: its --timeout and --stall count from when it runs, not from the handover.
        job.current.started, job.log_grew, job.reason = seen.now, seen.now, None
        job.last_line = f"Slurm holds it pending: {waiting}"[:200]
        if waiting == "Dependency" and (waits := rules.waits_for(job, by_id)) is not None:
            job.last_line = waits  # as jobtpu words a job that waits for its --after jobs itself
        return
    # Still running: track log growth for --stall, the wall clock for --timeout.
    size = sum(s.log_size for s in states if s is not None)
    if size != job.log_size or job.log_grew is None:
        job.log_size, job.log_grew = size, seen.now
    job.reason = None
    started = job.current.started if job.current and job.current.started else seen.now
    # The worker stops it at its --timeout (launch.sh's LIMIT); a pass stops it only when the worker did
    # not within its grace and a margin (a worker that lost its wrapper, one launched before workers did).
    if job.timeout is not None and seen.now - started > job.timeout + (job.grace or 5.0) + TIMEOUT_MARGIN:
        _stop(job, machine, Ending(Status.FAILED, model.TIMEOUT), refs, plan, "ran past its --timeout")
    elif (stall := rules.stall_of(job, machine)) is not None and seen.now - job.log_grew > stall:
        _ended_attempt(job, machine, model.HANG, None, seen, plan, stop=refs)


def _submit_again(job: Job, machine: Machine, plan: Plan) -> None:
    """Slurm's controller crashed after it took the attempt's submit and before it saved it: it no
    longer knows the job, which never ran (sh/slurm.sh took back its id and claim). As a launch that
    certainly never started, the job is queued again with the same attempt, handed over anew."""
    plan.saw(f"job {job.id}: {machine.name}'s Slurm lost its job before it ran (its controller restarted): "
             "submitted again")
    if job.attempts and job.attempts[-1].n == job.attempt and job.attempts[-1].ended is None:
        job.attempts.pop()
    plan.moves.append(job.move(Status.QUEUED, None, cause=Cause.UNLAUNCH))
    job.machine = None


def _judged_after(job: Job, machine: Machine, waiting: str, by_id: Mapping[int, Job], fleet: Fleet,
                  refs: tuple[WorkerRef, ...], view: MachineView, seen: Observation, plan: Plan) -> bool:
    """A job Slurm holds pending after its dependencies (decide/slurm_after.py): jobtpu's rule judges,
    not Slurm's. One whose --after job ended otherwise fails (reason dependency), its Slurm job
    cancelled; one whose dependency now runs as another Slurm job is handed back to wait in jobtpu
    (its attempt ends `dependency`, it never ran, and no recovery budget is spent). True when judged."""
    assert job.current is not None and job.current.slurm_after
    failed = rules.failed_dependency(job, by_id)
    if failed is not None:
        why = f"job {failed.id} it waited for (--after) ended {failed.status}" + (
            f" ({failed.reason})" if failed.reason else "")
        job.last_line = why  # as a queued job's (dispatch.held_back)
        _fail(job, machine, Ending(Status.FAILED, model.DEPENDENCY), why, refs, view, seen, plan)
        return True
    if slurm_after.still_holds(job, job.current.slurm_after, waiting, by_id, fleet):
        return False
    again = rules.RESUME if job.resume else rules.RERUN
    _fail(job, machine, Ending(Status.FAILED, model.DEPENDENCY, recover=again),
          "a job it waits for no longer runs as the Slurm job it was handed after: it waits in jobtpu again",
          refs, view, seen, plan)
    return True


def _fail(job: Job, machine: Machine, ending: Ending, why: str, refs: tuple[WorkerRef, ...], view: MachineView,
          seen: Observation, plan: Plan) -> None:
    """End the attempt with `ending`: stop its workers that still have processes first, if any."""
    alive = _alive(refs, view)
    if alive:
        _stop(job, machine, ending, alive, plan, why)
    else:
        _end(job, ending, seen.now, plan, why)


TIMEOUT_MARGIN = 30.0  # seconds past a worker's own --timeout stop before a pass stops the job itself


def _killing(job: Job, machine: Machine | None, fleet: Fleet, seen: Observation, plan: Plan) -> None:
    ending = job.ending or Ending(Status.KILLED, model.KILLED)
    if job.gang:  # a gang's slices are stopped each on its machine; a preempted one's are gone, as is one
        # taken out of machines.json (the others' workers are still stopped: the next job there must not meet them)
        gone = set(preempted_of(job, seen)) | {name for name in job.gang if fleet.get(name) is None}
        if gone == set(job.gang):
            _end(job, ending, seen.now, plan, "its machines are gone")
        for kill in kills(job, refs_of(job)):
            if kill.machine not in gone and seen.peek(kill.machine).reachable is not False:
                plan.do(kill)
        return
    view = seen.peek(machine.name) if machine else None
    if machine is None or (view is not None and view.preempted):
        _end(job, ending, seen.now, plan, "its machine is gone")
    elif view is not None and view.reachable is not False:
        plan.do(Kill(job.id, machine.name, refs_of(job)))


def _alive(refs: tuple[WorkerRef, ...], view: MachineView) -> tuple[WorkerRef, ...]:
    """The workers with a process to stop: a live leader, or marked processes that outlived it (a
    lost attempt's children must not run on beside the next attempt)."""
    return tuple(r for r in refs if (s := view.workers.get(r)) is not None and (s.alive or s.marked))


def _ended_attempt(job: Job, machine: Machine, reason: str, exit_code: int | None, seen: Observation,
                   plan: Plan, stop: tuple[WorkerRef, ...] = (), worker: int | None = None) -> None:
    """An attempt ended badly: pick the rule's answer, stopping surviving workers first if any. The
    rule's recovery spends the budget of the reason's cause (rules.budget); a job's own failure is
    --retries'. A budget that has run out is said in the ending (`spent`), its one line and event."""
    rule = rule_of(job, machine)
    spend = rules.budget(job, reason)
    recover = rules.recovery(rule, reason, spend.used, spend.limit) if spend else None
    spent = spend.spent if spend and recover is None and rules.recovery(rule, reason, 0, None) else None
    why = reason if recover is None else f"{reason}, rule {rule}: {recover}"
    retry = False
    if recover is None:  # --retries, once the rule has no answer of its own
        recover = rules.retry(rule, reason, job.retried, job.retries, exit_code, job.retry_on_exit)
        retry = recover is not None
        if retry:
            why, spent = f"{reason}, retry {job.retried + 1} of {job.retries}: {recover}", None
        elif job.retries and rules.retriable(reason, exit_code, job.retry_on_exit):
            spent = rules.spent_line(job.retries, "retry", "--retries")
    if spent:
        why += f" ({spent})"
    ending = Ending(Status.FAILED, reason, exit_code, recover, retry, spent)
    if job.gang and worker is not None and wants_recreate(ending):  # the slice that failed first comes back
        ending.lost = min(worker // per_slice(job), len(job.gang) - 1)
    if stop:
        _stop(job, machine, ending, stop, plan, why)
    else:
        _end(job, ending, seen.now, plan, why)


def _stop(job: Job, machine: Machine, ending: Ending, refs: tuple[WorkerRef, ...], plan: Plan, why: str) -> None:
    plan.moves.append(job.stop(ending))
    for kill in kills(job, refs):  # a gang's: one per machine, each with its own slice's workers
        plan.do(kill, why)
    where = machine.name if not job.gang else f"its {len(job.gang)} slices"
    plan.notes.append(f"job {job.id}: stopping on {where}: {why}")


def _end(job: Job, ending: Ending, now: float, plan: Plan, why: str) -> None:
    plan.notes.append(f"job {job.id}: {why}")
    plan.would.append(f"would end job {job.id}: {why}")
    plan.moves.append(apply_ending(job, ending, now))
    back = lost_machine(job.attempts[-1], ending) if job.attempts else None
    if back is not None:
        plan.do(Recreate(back))


def lost_machine(attempt: Attempt, ending: Ending) -> str | None:
    """The machine the ending's rule brings back: the job's TPU; a gang's slice that failed first
    (`lost`), not a preempted one (its dispatch asks those back, decide/gang.py)."""
    if not wants_recreate(ending):
        return None
    if not attempt.gang:
        return attempt.machine
    lost = ending.lost
    return attempt.gang[lost] if lost is not None and 0 <= lost < len(attempt.gang) else None


def wants_recreate(ending: Ending) -> bool:
    """The rule's answer to this ending brings the job's TPU back through the API first."""
    return ending.recovery in (rules.RECREATE_RESUME, rules.RECREATE_RERUN)


def apply_ending(job: Job, ending: Ending, now: float) -> Transition:
    """Close the current attempt with its outcome; then queue the job again or end it."""
    attempt = job.current
    outcome = model.FINISHED if ending.status is Status.FINISHED else ending.reason
    if attempt is not None and attempt.ended is None:
        attempt.outcome, attempt.exit_code, attempt.ended = outcome, ending.exit_code, now
    if ending.recover:  # either way the move resets what only a stopping job holds (ending, alloc)
        if ending.retry:
            job.retried += 1
        elif ending.reason == model.PREEMPTED:  # counted apart: a preemption is nobody's failure
            job.preemptions += 1
        elif ending.reason == model.DEPENDENCY:  # handed back to wait for its dependency: it never ran
            pass
        else:
            job.recoveries += 1
        moved = requeue(job, resume=ending.recovery in (rules.RESUME, rules.RECREATE_RESUME), reason=model.RECOVERING,
                        cause=Cause.RECOVER)
        job.keeps = [] if job.evicted_by is not None else kept_machines(attempt, ending)  # its room is the evictor's
        return moved
    job.exit_code = ending.exit_code
    moved = job.move(ending.status, ending.reason, cause=Cause.END)
    return msgspec.structs.replace(moved, spent=ending.spent) if ending.spent else moved


def kept_machines(attempt: Attempt | None, ending: Ending) -> list[str]:
    """The machines a job queued by this ending keeps while it waits (docs/reference/state-json.md
    §4.3): a gang's, when its recovery resumes or recreates (the slices that survived wait for the
    lost one); a one-slice job's TPU, when its recovery recreates it. None when it may go elsewhere."""
    if attempt is None or ending.retry:
        return []
    if attempt.gang and ending.recovery in (rules.RESUME, rules.RECREATE_RESUME, rules.RECREATE_RERUN):
        return list(attempt.gang)
    return [attempt.machine] if wants_recreate(ending) else []


def requeue(job: Job, resume: bool, reason: str | None, cause: Cause, machine: str | None = None) -> Transition:
    """Queue the job for its next attempt (same snapshot), for `cause` (a recovery, or a person's
    resume or rerun). `machine` pins it when given. A resume of a job that says how a save shows
    resumes only when an attempt saved, else it reruns from scratch (decide/saving.py)."""
    moved = job.move(Status.QUEUED, reason, cause=cause)
    job.attempt = (job.attempts[-1].n + 1) if job.attempts else job.attempt
    job.resume = resumes(job, resume)
    job.machine = None
    job.log_size, job.log_grew = 0, None
    if machine is not None:
        job.pin = machine
    return moved

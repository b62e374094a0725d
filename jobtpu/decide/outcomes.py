"""What the reports of a pass's acts mean for the jobs: the I/O layer asks the workers and hands
back plain reports (launch reports, whether a stop's workers are gone); these functions alone decide
what they mean for each job, called by the settle step (settle.py; an ssh machine's record is
reach.py's, from the contacts). Pure, and as decide is: each reads the job it is given and writes only
its new record in the plan it is handed (`Plan.edit`, a copy), each status move there with its cause;
whoever holds the plan applies it (`Plan.apply_to`)."""

from __future__ import annotations

from collections.abc import Iterable

from jobtpu import timing
from jobtpu.decide.core import apply_ending, lost_machine, wants_recreate
from jobtpu.decide.gang import kills
from jobtpu.decide.observation import Kill, Plan, Recreate, refs_of
from jobtpu.decide.workers import LaunchOutcome, LaunchResult, WorkerRef
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Cause, Ending, Job, Status, Transition


class NoAnswer(msgspec.Struct, frozen=True):
    """A worker whose launch could not be asked or said nothing: why, and whether it was not reached
    at all (then nothing can have started there)."""

    message: str
    unreachable: bool = False


LaunchReport = LaunchResult | NoAnswer


def refused_at_start(job: Job, workers: Iterable[int], kind: str, why: str) -> dict[int, LaunchReport]:
    """Each worker's report of a launch that the job's spec refused as it started (specs.Verdict
    `kind`, docs/design.md §7): another account's to run ("foreign") goes back to the queue, nothing
    having started; a record that differs from its spec fails."""
    if kind == "foreign":
        return {w: NoAnswer(why, unreachable=True) for w in workers}
    return {w: LaunchResult(WorkerRef(job.id, job.attempt, w), LaunchOutcome.FAIL, detail=why) for w in workers}


def launched(job: Job, machine: Machine, reports: dict[int, LaunchReport], now: float, plan: Plan) -> list[Kill]:
    """Move a launching job as its workers' launch reports say; a Kill when some workers started and
    another failed (they must be stopped before the job ends as launch_failed). The job's new record
    and its moves go in `plan`."""
    if plan.latest(job).status is not Status.LAUNCHING:
        return []
    new = plan.edit(job)
    answers = [reports[i] for i in sorted(reports)]
    if answers and all(isinstance(a, NoAnswer) and a.unreachable for a in answers):
        # Nothing ran anywhere: the job is free to go to another machine on a later pass.
        message = answers[0].message if isinstance(answers[0], NoAnswer) else ""
        plan.moves.append(_unlaunch(new))
        new.last_line = f"could not launch: {message[-180:]}"
        return []
    failures = {i: r for i, r in reports.items() if isinstance(r, LaunchResult) and r.outcome == LaunchOutcome.FAIL}
    if failures:
        first = min(failures)
        new.last_line = f"launch failed on worker {first}: {failures[first].detail}"
        ending = Ending(Status.FAILED, model.LAUNCH_FAILED)
        oks = sorted(i for i, r in reports.items() if isinstance(r, LaunchResult) and r.outcome == LaunchOutcome.OK)
        started = tuple(WorkerRef(new.id, new.attempt, i) for i in oks)
        if not started:
            plan.moves.append(apply_ending(new, ending, now))
            return []
        plan.moves.append(new.stop(ending))
        return kills(new, started)  # a gang's: each slice's started workers on its machine
    if all(isinstance(a, LaunchResult) and a.outcome == LaunchOutcome.OK for a in answers):
        plan.moves.append(new.move(Status.RUNNING, None, cause=Cause.STARTED))
        if new.current is not None:
            new.current.started = now
            new.current.slurm_job = next((a.slurm for a in answers if isinstance(a, LaunchResult) and a.slurm), None)
        return []
    errors = [a.message for a in answers if isinstance(a, NoAnswer)]
    if errors:  # said as jobtpu's, so it is never taken for the job's own output
        new.last_line = f"launch: {errors[0][-190:]}"
        began = new.current.started if new.current is not None else None
        give_up = timing.current().launch_give_up  # a launch without a clear answer from every worker
        if began is not None and now - began > give_up:
            # A launch that has not got a clear answer for this long (a snapshot copy that keeps
            # failing, a worker that times out) would hold its resources for ever. Some workers may
            # have started: stop every one, then the job ends launch_failed.
            new.last_line = f"gave up launching after {int(give_up // 60)} min: {errors[0][-150:]}"
            plan.moves.append(new.stop(Ending(Status.FAILED, model.LAUNCH_FAILED)))
            return kills(new, refs_of(new))
    return []


def setup_done(setup: str | None) -> bool:
    """Whether a launch may go ahead on a machine: it ran no setup in this pass (`setup` None), or
    that setup left it up (`setup` is the machine's state after it: "setting up", "setup failed")."""
    return setup is None or setup == "up"


def goes_ahead(job: Job | None, machine: str, setup: str | None, plan: Plan) -> bool:
    """Whether a launch goes ahead (setup_done). Otherwise its job goes back to the queue
    (not_launched, in `plan`), nothing having started."""
    if setup_done(setup):
        return True
    if job is not None:
        not_launched(job, f"{machine} is {setup}", plan)
    return False


def not_launched(job: Job, why: str, plan: Plan) -> None:
    """A launch the pass did not try (its machine's setup did not finish): queued again, as it was."""
    if plan.latest(job).status is Status.LAUNCHING:
        new = plan.edit(job)
        plan.moves.append(_unlaunch(new))
        new.waiting = why


def _unlaunch(new: Job) -> Transition:
    """Undo a dispatch whose launch certainly never started: queued again, same attempt number.
    `new` is the plan's record of the job, changed here."""
    gang = list(new.gang)
    if new.attempts and new.attempts[-1].n == new.attempt and new.attempts[-1].ended is None:
        new.attempts.pop()
    moved = new.move(Status.QUEUED, new.reason if new.reason == model.RECOVERING else None, cause=Cause.UNLAUNCH)
    new.machine = None
    if gang and new.reason == model.RECOVERING:  # a gang resuming keeps its machines until it starts there
        new.keeps = gang
    return moved


def killed(job: Job, machine: str, gone: bool, now: float, plan: Plan) -> Recreate | None:
    """Once every worker of a stopping job is gone, end it as its stop said (in `plan`); a Recreate of
    its machine when that ending's rule brings the TPU back."""
    if not gone or plan.latest(job).status is not Status.KILLING:
        return None
    new = plan.edit(job)
    ending = new.ending or Ending(Status.KILLED, model.KILLED)
    plan.moves.append(apply_ending(new, ending, now))
    # A gang's preempted slices are asked back by its dispatch (gang.py); the one that failed first
    # (`lost`) now that it has stopped everywhere.
    back = lost_machine(new.attempts[-1], ending) if new.attempts else machine if wants_recreate(ending) else None
    return Recreate(back) if back is not None else None


def kill_asked(job: Job, plan: Plan) -> list[Kill]:
    """`jobtpu kill`: a queued job ends at once; an active one stops (a Kill for its workers). One
    already stopping keeps the ending it has (exit N, timeout). The job's new record goes in `plan`."""
    latest = plan.latest(job)
    if latest.status is Status.QUEUED:
        plan.move(job, Status.KILLED, model.KILLED, cause=Cause.KILL)
    elif latest.status is not Status.KILLING and latest.active:
        plan.moves.append(plan.edit(job).stop(Ending(Status.KILLED, model.KILLED)))
    latest = plan.latest(job)
    if latest.status is Status.KILLING and latest.machine:
        return kills(latest, refs_of(latest))  # a gang's: one per machine
    return []

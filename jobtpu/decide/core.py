"""The pure heart of a pass: given the jobs, the fleet and what was observed, change the jobs and
return the actions to carry out. No I/O here, so every branch is tested directly and --dry-run is free."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from jobtpu import timing
from jobtpu.decide import rules
from jobtpu.decide.fit import Request, allocate, parse_request, why_not
from jobtpu.remote.workers import LaunchResult, WorkerRef, WorkerState
from jobtpu.schema import state as model
from jobtpu.schema.machines import Fleet, Machine
from jobtpu.schema.state import Attempt, Ending, Job, Status
from jobtpu.sheet.api import claim_reason


@dataclass
class MachineView:
    """What one pass learnt about one machine."""

    reachable: bool | None = None  # None: not asked this pass
    error: str | None = None
    workers: dict[WorkerRef, WorkerState] = field(default_factory=dict)
    n_workers: int = 1
    ready: bool = True  # may take new jobs now
    preempted: bool = False  # the TPU API says its node is gone or preempted
    recovering: bool = False  # jobtpu is already recreating it
    setting_up: bool = False  # its setup runs in this pass's act, before any launch there


@dataclass
class Observation:
    now: float
    machines: dict[str, MachineView] = field(default_factory=dict)
    log_tails: dict[WorkerRef, str] = field(default_factory=dict)  # for workers that exited non-zero
    last_lines: dict[int, str] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)  # machine -> who claimed it by hand (team sheet)
    # Queued jobs this pass may not run on the local machine: id -> (specs.Verdict kind, why) (design §7).
    local_refusals: dict[int, tuple[str, str]] = field(default_factory=dict)
    bad_files: dict[int, str] = field(default_factory=dict)  # job -> what is wrong with its files in the home

    def view(self, name: str) -> MachineView:
        return self.machines.setdefault(name, MachineView())


@dataclass(frozen=True)
class Launch:
    job: int
    machine: str
    attempt: int
    workers: int


@dataclass(frozen=True)
class Kill:
    job: int
    machine: str
    refs: tuple[WorkerRef, ...]


@dataclass(frozen=True)
class Recreate:
    machine: str


Action = Launch | Kill | Recreate


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # one human line per decision, as a real pass says it
    would: list[str] = field(default_factory=list)  # what --dry-run prints: facts seen, and acts as "would ..."

    def do(self, action: Action, why: str = "") -> None:
        self.actions.append(action)
        self.would.append(f"would {describe(action)}" + (f": {why}" if why else ""))

    def saw(self, line: str) -> None:
        """A fact, said alike by a pass and a dry run (a machine that does not answer)."""
        self.notes.append(line)
        self.would.append(line)


def describe(action: Action) -> str:
    if isinstance(action, Launch):
        return f"launch job {action.job} attempt {action.attempt} on {action.machine} ({action.workers} worker(s))"
    if isinstance(action, Kill):
        return f"stop job {action.job} on {action.machine}"
    return f"recreate {action.machine}"


def refs_of(job: Job) -> tuple[WorkerRef, ...]:
    workers = job.current.workers if job.current else 1
    return tuple(WorkerRef(job.id, job.attempt, w) for w in range(workers))


def rule_of(job: Job, machine: Machine | None) -> str:
    return job.rule or (machine.default_rule() if machine else "pass")


def decide(jobs: list[Job], fleet: Fleet, seen: Observation) -> Plan:
    plan = Plan()
    for job in sorted(jobs, key=lambda j: j.id):
        machine = fleet.get(job.machine) if job.machine else None
        if job.active and job.id in seen.last_lines:
            job.last_line = seen.last_lines[job.id]
        if job.status is Status.LAUNCHING:
            _launching(job, machine, seen, plan)
        elif job.status is Status.RUNNING:
            _running(job, machine, fleet, seen, plan)
        elif job.status is Status.KILLING:
            _killing(job, machine, seen, plan)
    _dispatch(jobs, fleet, seen, plan)
    return plan


def _launching(job: Job, machine: Machine | None, seen: Observation, plan: Plan) -> None:
    if machine is None:
        _end(job, Ending(Status.FAILED, model.LAUNCH_FAILED), seen.now, plan, f"machine {job.machine} is gone")
        return
    view = seen.view(machine.name)
    if view.preempted:
        _ended_attempt(job, machine, model.PREEMPTED, None, seen, plan)
    elif view.reachable is not False:
        # Launching is idempotent on the machine: it starts what has not started, reports the rest.
        plan.do(Launch(job.id, machine.name, job.attempt, job.current.workers if job.current else 1))


def _running(job: Job, machine: Machine | None, fleet: Fleet, seen: Observation, plan: Plan) -> None:
    if machine is None:
        job.reason = model.UNREACHABLE
        plan.saw(f"job {job.id}: machine {job.machine} is no longer in machines.json")
        return
    view = seen.view(machine.name)
    if view.preempted:
        _ended_attempt(job, machine, model.PREEMPTED, None, seen, plan)
        return
    if not view.reachable:
        if job.reason != model.UNREACHABLE:
            plan.saw(f"job {job.id}: {machine.name} does not answer ({view.error or 'no reply'})")
        job.reason = model.UNREACHABLE
        return
    refs = refs_of(job)
    if job.id in seen.bad_files:  # a link, FIFO or foreign folder at its log: this job alone fails
        ending, why = Ending(Status.FAILED, model.HOME_FILE), seen.bad_files[job.id]
        alive = _alive(refs, view)
        if alive:
            _stop(job, machine, ending, alive, plan, why)
        else:
            _end(job, ending, seen.now, plan, why)
        return
    states = [view.workers.get(ref) for ref in refs]
    failed = [s for s in states if s is not None and s.exit_code not in (None, 0)]
    if failed:
        # The worker that failed first on its own (the others often fail because of it); a tie,
        # or a worker whose exit time is unknown, goes by the lowest index.
        first = min(failed, key=lambda s: (s.exited_at if s.exited_at is not None else float("inf"), s.ref.worker))
        reason = rules.classify(first.exit_code or 0, seen.log_tails.get(first.ref, ""), fleet.error_patterns)
        _ended_attempt(job, machine, reason, first.exit_code, seen, plan, stop=_alive(refs, view))
        return
    if all(s is not None and s.exit_code == 0 for s in states):
        _end(job, Ending(Status.FINISHED, None, 0), seen.now, plan, "every worker exited 0")
        return
    if any(s is None or (not s.alive and s.exit_code is None) for s in states):
        _ended_attempt(job, machine, model.LOST, None, seen, plan, stop=_alive(refs, view))
        return
    # Still running: track log growth for --stall, the wall clock for --timeout.
    size = sum(s.log_size for s in states if s is not None)
    if size != job.log_size or job.log_grew is None:
        job.log_size, job.log_grew = size, seen.now
    job.reason = None
    started = job.current.started if job.current and job.current.started else seen.now
    if job.timeout is not None and seen.now - started > job.timeout:
        _stop(job, machine, Ending(Status.FAILED, model.TIMEOUT), refs, plan, "ran past its --timeout")
    elif job.stall is not None and seen.now - job.log_grew > job.stall:
        _ended_attempt(job, machine, model.HANG, None, seen, plan, stop=refs)


def _killing(job: Job, machine: Machine | None, seen: Observation, plan: Plan) -> None:
    ending = job.ending or Ending(Status.KILLED, model.KILLED)
    view = seen.view(machine.name) if machine else None
    if machine is None or (view is not None and view.preempted):
        _end(job, ending, seen.now, plan, "its machine is gone")
    elif view is not None and view.reachable is not False:
        plan.do(Kill(job.id, machine.name, refs_of(job)))


def _alive(refs: tuple[WorkerRef, ...], view: MachineView) -> tuple[WorkerRef, ...]:
    """The workers with a process to stop: a live leader, or marked processes that outlived it (a
    lost attempt's children must not run on beside the next attempt)."""
    return tuple(r for r in refs if (s := view.workers.get(r)) is not None and (s.alive or s.marked))


def _ended_attempt(job: Job, machine: Machine, reason: str, exit_code: int | None, seen: Observation,
                   plan: Plan, stop: tuple[WorkerRef, ...] = ()) -> None:
    """An attempt ended badly: pick the rule's answer, stopping surviving workers first if any."""
    recover = rules.recovery(rule_of(job, machine), reason, job.recoveries, job.max_recoveries)
    why = reason if recover is None else f"{reason}, rule {rule_of(job, machine)}: {recover}"
    if recover is None and reason in rules.RETRIABLE | {model.PREEMPTED} and job.recoveries >= job.max_recoveries:
        why += f" (max recoveries {job.max_recoveries} reached)"
    retry = False
    if recover is None:  # --retries, once the rule has no answer of its own
        recover = rules.retry(rule_of(job, machine), reason, job.retried, job.retries)
        retry = recover is not None
        if retry:
            why = f"{reason}, retry {job.retried + 1} of {job.retries}: {recover}"
    ending = Ending(Status.FAILED, reason, exit_code, recover, retry)
    if stop:
        _stop(job, machine, ending, stop, plan, why)
    else:
        _end(job, ending, seen.now, plan, why)


def _stop(job: Job, machine: Machine, ending: Ending, refs: tuple[WorkerRef, ...], plan: Plan, why: str) -> None:
    job.move(Status.KILLING, ending.reason)  # docs/reference/state-json.md §4.3: a stopping job says why (timeout, hang, exit N)
    job.ending = ending
    plan.do(Kill(job.id, machine.name, refs), why)
    plan.notes.append(f"job {job.id}: stopping on {machine.name}: {why}")


def _end(job: Job, ending: Ending, now: float, plan: Plan, why: str) -> None:
    plan.notes.append(f"job {job.id}: {why}")
    plan.would.append(f"would end job {job.id}: {why}")
    apply_ending(job, ending, now)
    if wants_recreate(ending) and job.attempts:
        plan.do(Recreate(job.attempts[-1].machine))


def wants_recreate(ending: Ending) -> bool:
    """The rule's answer to this ending brings the job's TPU back through the API first."""
    return ending.recover in (rules.RECREATE_RESUME, rules.RECREATE_RERUN)


def apply_ending(job: Job, ending: Ending, now: float) -> None:
    """Close the current attempt with its outcome; then queue the job again or end it."""
    attempt = job.current
    outcome = model.FINISHED if ending.status is Status.FINISHED else ending.reason
    if attempt is not None and attempt.ended is None:
        attempt.outcome, attempt.exit_code, attempt.ended = outcome, ending.exit_code, now
    job.ending = None
    job.alloc = {}
    if ending.recover:
        if ending.retry:
            job.retried += 1
        else:
            job.recoveries += 1
        requeue(job, resume=ending.recover in (rules.RESUME, rules.RECREATE_RESUME), reason=model.RECOVERING)
        return
    job.exit_code = ending.exit_code
    job.move(ending.status, ending.reason)


def requeue(job: Job, resume: bool, reason: str | None, machine: str | None = None) -> None:
    """Queue the job for its next attempt (same snapshot). `machine` pins it when given."""
    job.move(Status.QUEUED, reason)
    job.attempt = (job.attempts[-1].n + 1) if job.attempts else job.attempt
    job.resume = resume
    job.exit_code = None
    job.machine = None
    job.alloc = {}
    job.log_size, job.log_grew = 0, None
    if machine is not None:
        job.pin = machine


def used_resources(jobs: list[Job]) -> dict[str, dict[str, set[int]]]:
    used: dict[str, dict[str, set[int]]] = {}
    for job in jobs:
        if job.active and job.machine:
            for resource, indices in job.alloc.items():
                used.setdefault(job.machine, {}).setdefault(resource, set()).update(indices)
    return used


# ---- what launches and kills reported -------------------------------------------------------------
# The pass's I/O layer asks the workers and hands back plain reports; these functions alone decide
# what the reports mean for the job (an ssh machine's record is reach.py's, from the contacts).

@dataclass(frozen=True)
class NoAnswer:
    """A worker whose launch could not be asked or said nothing: why, and whether it was not reached
    at all (then nothing can have started there)."""

    message: str
    unreachable: bool = False


LaunchReport = LaunchResult | NoAnswer


def launched(job: Job, machine: Machine, reports: dict[int, LaunchReport], now: float) -> Kill | None:
    """Move a launching job as its workers' launch reports say; a Kill when some workers started and
    another failed (they must be stopped before the job ends as launch_failed)."""
    if job.status is not Status.LAUNCHING:
        return None
    answers = [reports[i] for i in sorted(reports)]
    if answers and all(isinstance(a, NoAnswer) and a.unreachable for a in answers):
        # Nothing ran anywhere: the job is free to go to another machine on a later pass.
        message = answers[0].message if isinstance(answers[0], NoAnswer) else ""
        unlaunch(job)
        job.last_line = f"could not launch: {message[-180:]}"
        return None
    failures = {i: r for i, r in reports.items() if isinstance(r, LaunchResult) and r.outcome == "fail"}
    if failures:
        first = min(failures)
        job.last_line = f"launch failed on worker {first}: {failures[first].detail}"
        ending = Ending(Status.FAILED, model.LAUNCH_FAILED)
        oks = sorted(i for i, r in reports.items() if isinstance(r, LaunchResult) and r.outcome == "ok")
        started = tuple(WorkerRef(job.id, job.attempt, i) for i in oks)
        if not started:
            apply_ending(job, ending, now)
            return None
        job.move(Status.KILLING, ending.reason)
        job.ending = ending
        return Kill(job.id, machine.name, started)
    if all(isinstance(a, LaunchResult) and a.outcome == "ok" for a in answers):
        job.move(Status.RUNNING, None)
        if job.current is not None:
            job.current.started = now
        return None
    errors = [a.message for a in answers if isinstance(a, NoAnswer)]
    if errors:  # said as jobtpu's, so it is never taken for the job's own output
        job.last_line = f"launch: {errors[0][-190:]}"
        began = job.current.started if job.current is not None else None
        give_up = timing.current().launch_give_up  # a launch without a clear answer from every worker
        if began is not None and now - began > give_up:
            # A launch that has not got a clear answer for this long (a snapshot copy that keeps
            # failing, a worker that times out) would hold its resources for ever. Some workers may
            # have started: stop every one, then the job ends launch_failed.
            job.last_line = f"gave up launching after {int(give_up // 60)} min: {errors[0][-150:]}"
            job.move(Status.KILLING, model.LAUNCH_FAILED)
            job.ending = Ending(Status.FAILED, model.LAUNCH_FAILED)
            return Kill(job.id, machine.name, refs_of(job))
    return None




def not_launched(job: Job, why: str) -> None:
    """A launch the pass did not try (its machine's setup did not finish): queued again, as it was."""
    if job.status is Status.LAUNCHING:
        unlaunch(job)
        job.waiting = why


def unlaunch(job: Job) -> None:
    """Undo a dispatch whose launch certainly never started: queued again, same attempt number."""
    if job.attempts and job.attempts[-1].n == job.attempt and job.attempts[-1].ended is None:
        job.attempts.pop()
    job.move(Status.QUEUED, job.reason if job.reason == model.RECOVERING else None)
    job.machine, job.alloc = None, {}


def killed(job: Job, machine: str, gone: bool, now: float) -> Recreate | None:
    """Once every worker of a stopping job is gone, end it as its stop said; a Recreate of its machine
    when that ending's rule brings the TPU back."""
    if not gone or job.status is not Status.KILLING:
        return None
    ending = job.ending or Ending(Status.KILLED, model.KILLED)
    apply_ending(job, ending, now)
    return Recreate(machine) if wants_recreate(ending) else None


def kill_asked(job: Job) -> Kill | None:
    """`jobtpu kill`: a queued job ends at once; an active one stops (a Kill for its workers). One
    already stopping keeps the ending it has (exit N, timeout)."""
    if job.status is Status.QUEUED:
        job.move(Status.KILLED, model.KILLED)
    elif job.status is not Status.KILLING and job.active:
        job.move(Status.KILLING, model.KILLED)
        job.ending = Ending(Status.KILLED, model.KILLED)
    if job.status is Status.KILLING and job.machine:
        return Kill(job.id, job.machine, refs_of(job))
    return None


# ---- dispatch -------------------------------------------------------------------------------------
# Each question the dispatch asks is one hook function, so fairness, limits, dependencies, holds and
# sheet claims each change one place, and a queued job's pending reason comes from the same code that
# kept it waiting.

@dataclass
class Dispatch:
    """What one dispatch knows while it places queued jobs: shared by the hooks below."""

    jobs: list[Job]
    fleet: Fleet
    seen: Observation
    plan: Plan
    used: dict[str, dict[str, set[int]]]
    recreating: set[str]  # machines about to be deleted and created again: they take no job now
    by_id: dict[int, Job] = field(default_factory=dict)
    cycles: dict[int, tuple[int, ...]] = field(default_factory=dict)  # rules.dependency_cycles: never start
    started: list[Job] = field(default_factory=list)  # jobs this dispatch launched, in order
    unavailable: dict[str, str | None] = field(default_factory=dict)  # machine -> machine_unavailable's answer
    # For pending reasons: the machines each kind of request could ever run on, and how many jobs
    # have waited so far this dispatch for each such set of machines (the queue ahead of the next).
    fits: dict[tuple[tuple[str, ...], str | None], tuple[str, ...]] = field(default_factory=dict)
    waited: dict[tuple[str, ...], int] = field(default_factory=dict)
    usage: dict[str, UserUse] = field(default_factory=dict)  # per user: what their active jobs hold


@dataclass
class UserUse:
    """What one user's active jobs hold now (and what this dispatch gave them): for per-user limits."""

    jobs: int = 0
    machines: set[str] = field(default_factory=set)
    tpu_machines: set[str] = field(default_factory=set)

    def add(self, machine: Machine | None, name: str) -> None:
        self.jobs += 1
        self.machines.add(name)
        if machine is not None and machine.is_tpu:
            self.tpu_machines.add(name)


def user_usage(jobs: list[Job], fleet: Fleet) -> dict[str, UserUse]:
    usage: dict[str, UserUse] = {}
    for job in jobs:
        if job.active and job.machine:
            usage.setdefault(job.user, UserUse()).add(fleet.get(job.machine), job.machine)
    return usage


def dispatch_order(queued: list[Job], d: Dispatch) -> list[Job]:
    """The order queued jobs are offered machines in: users take turns, one job each per round, so
    one user's long queue delays another's job by at most one turn. The user whose last launch is
    oldest (or who never launched) goes first in each round; ties go to whoever queued first. A
    user's own jobs go by --priority (higher first), then in submission order."""
    mine: dict[str, list[Job]] = {}
    for job in sorted(queued, key=_job_id):
        mine.setdefault(job.user, []).append(job)
    first_queued = {user: jobs[0].id for user, jobs in mine.items()}
    if any(job.priority for job in queued):
        for jobs in mine.values():
            jobs.sort(key=_higher_priority)  # stable: submission order within a priority
    if len(mine) <= 1:
        return next(iter(mine.values()), [])
    last = _last_launch(d.jobs)
    users = sorted(mine, key=lambda u: (last.get(u, float("-inf")), first_queued[u]))
    rounds = itertools.zip_longest(*(mine[u] for u in users))
    return [job for turn in rounds for job in turn if job is not None]


def _job_id(job: Job) -> int:
    return job.id


def _higher_priority(job: Job) -> int:
    return -job.priority


def _last_launch(jobs: list[Job]) -> dict[str, float]:
    """Each user's latest attempt start among the jobs state.json holds: whose turn it is."""
    last: dict[str, float] = {}
    for job in jobs:
        if job.attempts and job.attempts[-1].started is not None:
            started = float(job.attempts[-1].started)
            if started > last.get(job.user, float("-inf")):
                last[job.user] = started
    return last


def _fail_unstarted(job: Job, plan: Plan, why: str) -> None:
    plan.notes.append(f"job {job.id}: {why}")
    plan.would.append(f"would fail job {job.id}: {job.last_line}")


def held_back(job: Job, d: Dispatch) -> str | None:
    """Why a queued job may not start in this pass whatever machine is free; None when it may.
    The text becomes the job's pending reason. A job whose --after dependency failed is failed here
    (reason `dependency`): it can never start."""
    if job.after or job.after_any:
        ring = d.cycles.get(job.id)
        if ring is not None:  # made by hand in state.json: every job of the ring fails, naming it
            job.last_line = f"a dependency cycle: {rules.cycle_text(ring)}"
            job.move(Status.FAILED, model.DEPENDENCY)
            _fail_unstarted(job, d.plan, f"fails: {job.last_line}")
            return "dependency cycle"
        failed = rules.failed_dependency(job, d.by_id)
        if failed is not None:
            job.last_line = f"job {failed.id} it waited for (--after) ended {failed.status}" + (
                f" ({failed.reason})" if failed.reason else "")
            job.move(Status.FAILED, model.DEPENDENCY)
            _fail_unstarted(job, d.plan, f"fails: {job.last_line}")
            return "dependency failed"
        waits = rules.waits_for(job, d.by_id)
        if waits is not None:
            return waits
    if job.held:
        return "held by hold"
    if not d.fleet.has_limits:
        return None
    limit = d.fleet.limit_for(job.user).jobs
    if limit is not None and d.usage.get(job.user, UserUse()).jobs >= limit:
        return f"held by the per-user limit ({_count(limit, 'running job')})"
    return None


def over_limit(job: Job, machine: Machine, d: Dispatch) -> str | None:
    """Why starting `job` on `machine` would take its user past a per-user limit of machines; None
    when it would not (a machine they already hold adds nothing)."""
    if not d.fleet.has_limits:
        return None
    limit = d.fleet.limit_for(job.user)
    if limit.machines is None and limit.tpu_machines is None:
        return None
    use = d.usage.get(job.user, UserUse())
    if machine.name in use.machines:
        return None
    if limit.machines is not None and len(use.machines) >= limit.machines:
        return f"held by the per-user limit ({_count(limit.machines, 'machine')})"
    if machine.is_tpu and limit.tpu_machines is not None and len(use.tpu_machines) >= limit.tpu_machines:
        return f"held by the per-user limit ({_count(limit.tpu_machines, 'TPU machine')})"
    return None


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def machine_unavailable(machine: Machine, d: Dispatch) -> str | None:
    """Why a machine takes no new job in this pass; None when it may take one."""
    if machine.refused is not None:
        return machine.refused
    view = d.seen.view(machine.name)
    if machine.name in d.recreating:
        return f"{machine.name} is being recreated"
    if view.preempted or view.reachable is False or not view.ready:
        # A TPU already on its way back (deleted, being created, set up) says so rather than "preempted".
        return f"{machine.name} is " + ("being recreated" if view.recovering else
                                         "preempted" if view.preempted else "unreachable")
    if machine.name in d.seen.claims:
        return f"{machine.name} is {claim_reason(d.seen.claims[machine.name])}"
    return None


def why_waiting(job: Job, request: Request, d: Dispatch) -> str:
    """The pending reason of a queued job that found no machine in this pass: which machines could
    run it and what keeps each from doing so now, and how many waiting jobs are ahead of it for them.
    Called for every such job in dispatch order (it counts the queue as it goes)."""
    fits = _fitting_machines(job, request, d)
    if not fits:
        return _nothing_offers(job, request, d)
    ahead = sum(n for names, n in d.waited.items() if not set(names).isdisjoint(fits))
    d.waited[fits] = d.waited.get(fits, 0) + 1
    blocked = [why for name in fits if (why := d.unavailable.get(name)) is not None]
    busy = len(fits) - len(blocked)
    if not busy:
        now = "no machine can run it now: " + ", ".join(blocked)
    elif blocked:
        now = f"{len(fits)} machines fit: {busy} busy, " + ", ".join(blocked)
    elif busy == 1:
        now = f"{fits[0]} fits, busy"
    else:
        now = f"{busy} machines fit, {'both' if busy == 2 else 'all'} busy"
    queue = "next in line" if not ahead else f"{ahead} job{'s' if ahead > 1 else ''} ahead of it"
    return f"{now}; {queue}"


def _fitting_machines(job: Job, request: Request, d: Dispatch) -> tuple[str, ...]:
    """The machines that could run the job on an empty day (once per kind of request: a sweep's
    thousands of alike jobs ask the fleet once)."""
    asks = (tuple(job.req), job.pin)
    fits = d.fits.get(asks)
    if fits is None:
        fits = d.fits[asks] = tuple(m.name for m in d.fleet.machines.values() if why_not(m, request, job.pin) is None)
    return fits


def _nothing_offers(job: Job, request: Request, d: Dispatch) -> str:
    """Why no machine of the fleet could ever run the job (machines.json changed since its submit)."""
    if job.pin is not None:
        pinned = d.fleet.machines.get(job.pin)
        if pinned is None:
            return f"it is pinned to {job.pin}, which machines.json no longer has"
        return f"it is pinned to {job.pin}, which cannot run it: {why_not(pinned, request)}"
    asked = " ".join(job.req) or "a slot"
    return f"no machine offers {asked}"


def _dispatch(jobs: list[Job], fleet: Fleet, seen: Observation, plan: Plan) -> None:
    d = Dispatch(jobs, fleet, seen, plan, used_resources(jobs),
                 {a.machine for a in plan.actions if isinstance(a, Recreate)})
    d.by_id = {j.id: j for j in jobs}
    d.cycles = rules.dependency_cycles(jobs)
    d.usage = user_usage(jobs, fleet)
    unavailable = d.unavailable = {m.name: machine_unavailable(m, d) for m in fleet.machines.values()}
    # Resources only get taken during a dispatch: once a request found no room, every later job asking
    # the same (a sweep queues thousands alike) finds none either, and would want back the same TPU.
    no_room: dict[tuple[tuple[str, ...], str | None, str | None], Request] = {}
    limited: dict[tuple[str, tuple[tuple[str, ...], str | None, str | None]], str] = {}  # per user: only grows
    for job in dispatch_order([j for j in jobs if j.status is Status.QUEUED], d):
        held = held_back(job, d)
        if held is not None:
            job.waiting = held if job.status is Status.QUEUED else None
            continue
        asks = (tuple(job.req), job.pin, job.rule)
        if (job.user, asks) in limited:
            job.waiting = limited[(job.user, asks)]
            continue
        if asks in no_room:
            job.waiting = why_waiting(job, no_room[asks], d)
            continue
        request = parse_request(job.req)
        by_limit = local_why = None
        for machine in fleet.machines.values():
            if unavailable[machine.name] is not None:
                continue
            if why_not(machine, request, job.pin) is not None:
                continue
            if machine.kind == "local" and (refusal := seen.local_refusals.get(job.id)) is not None:
                if refusal[0] == "tampered":  # its record was rewritten: never run what its spec does not say
                    job.waiting, job.last_line = None, refusal[1]
                    job.move(Status.FAILED, model.LAUNCH_FAILED)
                    _fail_unstarted(job, plan, refusal[1])
                    break
                local_why = refusal[1]  # another account's: it runs as its submitter, in their pass
                continue
            if (limit := over_limit(job, machine, d)) is not None:
                by_limit = by_limit or limit
                continue
            alloc = allocate(machine.capacity, d.used.get(machine.name, {}), request.needs())
            if alloc is None:
                continue
            _start(job, machine, alloc, d)
            break
        else:
            if by_limit is not None:  # a machine would take it but for its user's limit
                job.waiting = limited[(job.user, asks)] = by_limit
                continue
            if local_why is not None:  # not cached in no_room: the next job of the same kind may be ours
                job.waiting = local_why
                continue
            no_room[asks] = request
            _want_back(job, request, fleet, seen, plan)
            _note_recreations(d)
            job.waiting = why_waiting(job, request, d)


def _note_recreations(d: Dispatch) -> None:
    """A TPU asked back during this dispatch is being recreated from now on (its pending reasons say so)."""
    for action in d.plan.actions:
        if isinstance(action, Recreate) and action.machine not in d.recreating:
            d.recreating.add(action.machine)
            machine = d.fleet.get(action.machine)
            if machine is not None:
                d.unavailable[machine.name] = machine_unavailable(machine, d)


def _start(job: Job, machine: Machine, alloc: dict[str, list[int]], d: Dispatch) -> None:
    view = d.seen.view(machine.name)
    for resource, indices in alloc.items():
        d.used.setdefault(machine.name, {}).setdefault(resource, set()).update(indices)
    job.machine, job.alloc, job.waiting = machine.name, alloc, None
    job.attempts.append(Attempt(n=job.attempt, machine=machine.name, started=d.seen.now,
                                resume=job.resume, workers=view.n_workers))
    job.move(Status.LAUNCHING, job.reason if job.reason == model.RECOVERING else None)
    job.log_size, job.log_grew, job.last_line = 0, d.seen.now, ""
    d.usage.setdefault(job.user, UserUse()).add(machine, machine.name)
    d.plan.do(Launch(job.id, machine.name, job.attempt, view.n_workers))
    d.plan.notes.append(f"job {job.id}: launch attempt {job.attempt} on {machine.name}")
    d.started.append(job)


def _want_back(job: Job, request: Request, fleet: Fleet, seen: Observation, plan: Plan) -> None:
    """A queued job that only a preempted (or not yet created) TPU could run asks for it back, when
    its rule is one that recreates TPUs; without this it would wait for a node nobody recreates."""
    coming = {a.machine for a in plan.actions if isinstance(a, Recreate)}
    fits = [m for m in fleet.machines.values() if m.is_tpu and why_not(m, request, job.pin) is None]
    if any(m.name in coming or seen.view(m.name).recovering for m in fits):
        return  # one is already on its way back
    for machine in fits:
        if seen.view(machine.name).preempted and rules.recovery(rule_of(job, machine), model.PREEMPTED, 0, 1):
            plan.do(Recreate(machine.name), f"job {job.id} waits for it")
            plan.notes.append(f"job {job.id}: waits for {machine.name}, which is preempted: recreate it")
            return

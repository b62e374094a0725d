"""Dispatch: queued jobs offered the machines that are free, in turn, and each one left waiting given
its pending reason. Pure: the jobs it starts, fails or gives a new pending reason get new records in
the plan (Plan.edit), with Launches (and TPU recreations); the records it is given stay as they are."""

from __future__ import annotations

import itertools
from collections import ChainMap
from collections.abc import Mapping

from jobtpu.decide import rules
from jobtpu.decide.fit import Request, allocate, parse_request, why_not
from jobtpu.decide.observation import Launch, Observation, Plan, Recreate, claim_reason, rule_of
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Attempt, Cause, Job, Status


def used_resources(jobs: list[Job]) -> dict[str, dict[str, set[int]]]:
    used: dict[str, dict[str, set[int]]] = {}
    for job in jobs:
        if job.active and job.machine:
            for resource, indices in job.alloc.items():
                used.setdefault(job.machine, {}).setdefault(resource, set()).update(indices)
    return used


# Each question the dispatch asks is one hook function, so fairness, limits, dependencies, holds and
# sheet claims each change one place, and a queued job's pending reason comes from the same code that
# kept it waiting.

class Dispatch(msgspec.Struct):
    """What one dispatch knows while it places queued jobs: shared by the hooks below."""

    jobs: list[Job]
    fleet: Fleet
    seen: Observation
    plan: Plan
    used: dict[str, dict[str, set[int]]]
    recreating: set[str]  # machines about to be deleted and created again: they take no job now
    by_id: Mapping[int, Job] = msgspec.field(default_factory=dict)
    cycles: dict[int, tuple[int, ...]] = msgspec.field(default_factory=dict)  # rules.dependency_cycles: never start
    started: list[Job] = msgspec.field(default_factory=list)  # jobs this dispatch launched, in order
    unavailable: dict[str, str | None] = msgspec.field(default_factory=dict)  # machine -> machine_unavailable's answer
    # For pending reasons: the machines each kind of request could ever run on, and how many jobs
    # have waited so far this dispatch for each such set of machines (the queue ahead of the next).
    fits: dict[tuple[tuple[str, ...], str | None], tuple[str, ...]] = msgspec.field(default_factory=dict)
    waited: dict[tuple[str, ...], int] = msgspec.field(default_factory=dict)
    # What keeps each such set of machines from a job now (the machines' reasons hold for the whole
    # dispatch): worded once, not once per waiting job of a sweep's thousands.
    kept_by: dict[tuple[str, ...], str] = msgspec.field(default_factory=dict)
    usage: dict[str, UserUse] = msgspec.field(default_factory=dict)  # per user: what their active jobs hold
    sweep_active: dict[int, int] = msgspec.field(default_factory=dict)  # per sweep: its jobs active now (--max-running)
    drained_only: set[str] = msgspec.field(default_factory=set)  # machines kept from new jobs by their drain alone


class UserUse(msgspec.Struct):
    """What one user's active jobs hold now (and what this dispatch gave them): for per-user limits."""

    jobs: int = 0
    machines: set[str] = msgspec.field(default_factory=set)
    tpu_machines: set[str] = msgspec.field(default_factory=set)

    def add(self, machine: Machine | None, name: str) -> None:
        self.jobs += 1
        self.machines.add(name)
        if machine is not None and machine.cloud_node:
            self.tpu_machines.add(name)


def sweep_activity(jobs: list[Job]) -> dict[int, int]:
    """How many jobs of each sweep are active (launching, running, stopping): what --max-running caps."""
    active: dict[int, int] = {}
    for job in jobs:
        if job.sweep is not None and job.active:
            active[job.sweep] = active.get(job.sweep, 0) + 1
    return active


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
            job = d.plan.edit(job)
            job.last_line = f"a dependency cycle: {rules.cycle_text(ring)}"
            d.plan.move(job, Status.FAILED, model.DEPENDENCY, Cause.REFUSE)
            _fail_unstarted(job, d.plan, f"fails: {job.last_line}")
            return "dependency cycle"
        failed = rules.failed_dependency(job, d.by_id)
        if failed is not None:
            job = d.plan.edit(job)
            job.last_line = f"job {failed.id} it waited for (--after) ended {failed.status}" + (
                f" ({failed.reason})" if failed.reason else "")
            d.plan.move(job, Status.FAILED, model.DEPENDENCY, Cause.REFUSE)
            _fail_unstarted(job, d.plan, f"fails: {job.last_line}")
            return "dependency failed"
        waits = rules.waits_for(job, d.by_id)
        if waits is not None:
            return waits
    if job.held:
        return "held by hold"
    if job.max_running is not None and job.sweep is not None:
        running = d.sweep_active.get(job.sweep, 0)
        if running >= job.max_running:  # as sbatch --array=…%N: the sweep's others wait their turn
            return f"sweep {job.sweep}: {running} of {job.max_running} running (--max-running)"
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
    if machine.cloud_node and limit.tpu_machines is not None and len(use.tpu_machines) >= limit.tpu_machines:
        return f"held by the per-user limit ({_count(limit.tpu_machines, 'TPU machine')})"
    return None


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def machine_unavailable(machine: Machine, d: Dispatch) -> str | None:
    """Why a machine takes no new job in this pass; None when it may take one. A drain is said first:
    it is a person's choice, and it outlasts whatever else keeps the machine from work."""
    if machine.refused is not None:
        return machine.refused
    if machine.name in d.seen.drained:
        reason = d.seen.drained[machine.name]
        return f"{machine.name} drained" + (f": {reason}" if reason else "")
    return undrained_unavailable(machine, d)


def undrained_unavailable(machine: Machine, d: Dispatch) -> str | None:
    """machine_unavailable but for a drain: whether a job coming back to the machine may go there."""
    if machine.refused is not None:
        return machine.refused
    view = d.seen.peek(machine.name)
    if machine.name in d.recreating:
        return f"{machine.name} is being recreated"
    if view.preempted or view.reachable is False or not view.ready:
        # A TPU already on its way back (deleted, being created, set up) says so rather than "preempted".
        return f"{machine.name} is " + ("being recreated" if view.recovering else
                                         "preempted" if view.preempted else "unreachable")
    if machine.name in d.seen.claims:
        return f"{machine.name} is {claim_reason(d.seen.claims[machine.name])}"
    return None


def own_claim(job: Job, machine: Machine, d: Dispatch) -> bool:
    """Whether only a sheet claim naming the job's own user keeps the machine from it: a person's
    name in the user cell is that person working there, never a bar to their own jobs."""
    holder = d.seen.claims.get(machine.name)
    return (holder is not None and job.user in d.seen.claimants.get(machine.name, ())
            and d.unavailable.get(machine.name) == f"{machine.name} is {claim_reason(holder)}")


def why_waiting(job: Job, request: Request, d: Dispatch) -> str:
    """The pending reason of a queued job that found no machine in this pass: which machines could
    run it and what keeps each from doing so now, and how many waiting jobs are ahead of it for them.
    Called for every such job in dispatch order (it counts the queue as it goes)."""
    fits = _fitting_machines(job, request, d)
    if not fits:
        return _nothing_offers(job, request, d)
    ahead = sum(n for names, n in d.waited.items() if names == fits or not set(names).isdisjoint(fits))
    d.waited[fits] = d.waited.get(fits, 0) + 1
    now = d.kept_by.get(fits)
    if now is None:
        now = d.kept_by[fits] = _kept_by(fits, d)
    queue = "next in line" if not ahead else f"{ahead} job{'s' if ahead > 1 else ''} ahead of it"
    return f"{now}; {queue}"


def _kept_by(fits: tuple[str, ...], d: Dispatch) -> str:
    """What keeps the machines that fit a job from it now: busy, or each one's reason."""
    blocked = [why for name in fits if (why := d.unavailable.get(name)) is not None]
    busy = len(fits) - len(blocked)
    if not busy:
        return "no machine can run it now: " + ", ".join(blocked)
    if blocked:
        return f"{len(fits)} machines fit: {busy} busy, " + ", ".join(blocked)
    if busy == 1:
        return f"{fits[0]} fits, busy"
    return f"{busy} machines fit, {'both' if busy == 2 else 'all'} busy"


def returning(job: Job, machine: str) -> bool:
    """A job the pass took off this machine to recover it (preempted, lost, retried) goes back to it
    though it is drained: a drain keeps new jobs away, and this one was there already."""
    return job.reason == model.RECOVERING and bool(job.attempts) and job.attempts[-1].machine == machine


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


def dispatch(jobs: list[Job], fleet: Fleet, seen: Observation, plan: Plan) -> None:
    d = Dispatch(jobs, fleet, seen, plan, used_resources(jobs),
                 {a.machine for a in plan.actions if isinstance(a, Recreate)})
    d.by_id = ChainMap(plan.changed, {j.id: j for j in jobs})  # --after reads what this dispatch decided
    d.cycles = rules.dependency_cycles(jobs)
    d.usage = user_usage(jobs, fleet)
    d.sweep_active = sweep_activity(jobs)
    unavailable = d.unavailable = {m.name: machine_unavailable(m, d) for m in fleet.machines.values()}
    d.drained_only = {name for name in seen.drained if name in fleet.machines
                      and undrained_unavailable(fleet.machines[name], d) is None}
    # Resources only get taken during a dispatch: once a request found no room, every later job asking
    # the same (a sweep queues thousands alike) finds none either, and would want back the same TPU.
    no_room: dict[tuple[str | None, tuple[tuple[str, ...], str | None, str | None]], Request] = {}
    limited: dict[tuple[str, tuple[tuple[str, ...], str | None, str | None]], str] = {}  # per user: only grows
    for job in dispatch_order([j for j in jobs if j.status is Status.QUEUED], d):
        held = held_back(job, d)
        if held is not None:
            d.plan.wait(job, held)
            continue
        asks = (tuple(job.req), job.pin, job.rule)
        # A machine one user claimed in the sheet takes that user's jobs only: no room for one user's
        # request says nothing of another's then.
        room = (job.user if seen.claimants else None, asks)
        if (job.user, asks) in limited:
            d.plan.wait(job, limited[(job.user, asks)])
            continue
        back = bool(d.drained_only) and job.reason == model.RECOVERING  # may go back to a drained machine
        if room in no_room and not back:
            d.plan.wait(job, why_waiting(job, no_room[room], d))
            continue
        request = parse_request(job.req)
        by_limit = local_why = None
        for machine in fleet.machines.values():
            if unavailable[machine.name] is not None and not own_claim(job, machine, d) and not (
                    back and machine.name in d.drained_only and returning(job, machine.name)):
                continue
            if why_not(machine, request, job.pin) is not None:
                continue
            if machine.runs_here and (refusal := seen.local_refusals.get(job.id)) is not None:
                if refusal[0] == "tampered":  # its record was rewritten: never run what its spec does not say
                    failing = d.plan.edit(job)
                    failing.last_line = refusal[1]
                    plan.move(failing, Status.FAILED, model.LAUNCH_FAILED, Cause.REFUSE)
                    _fail_unstarted(failing, plan, refusal[1])
                    break
                local_why = refusal[1]  # another account's: it runs as its submitter, in their pass
                continue
            if (limit := over_limit(job, machine, d)) is not None:
                by_limit = by_limit or limit
                continue
            # A batch scheduler queues and counts what it is handed: each job is handed over at once,
            # holding none of the machine's resources in jobtpu's books.
            alloc = {} if machine.scheduled else allocate(machine.capacity, d.used.get(machine.name, {}), request.needs())
            if alloc is None:
                continue
            _start(job, machine, alloc, d)
            break
        else:
            if by_limit is not None:  # a machine would take it but for its user's limit
                d.plan.wait(job, by_limit)
                limited[(job.user, asks)] = by_limit
                continue
            if local_why is not None:  # not cached in no_room: the next job of the same kind may be ours
                d.plan.wait(job, local_why)
                continue
            if not back:
                no_room[room] = request
            _want_back(job, request, fleet, seen, plan)
            _note_recreations(d)
            d.plan.wait(job, why_waiting(job, request, d))


def _note_recreations(d: Dispatch) -> None:
    """A TPU asked back during this dispatch is being recreated from now on (its pending reasons say so)."""
    for action in d.plan.actions:
        if isinstance(action, Recreate) and action.machine not in d.recreating:
            d.recreating.add(action.machine)
            d.drained_only.discard(action.machine)  # drained or not, it takes no job while being recreated
            machine = d.fleet.get(action.machine)
            if machine is not None:
                d.unavailable[machine.name] = machine_unavailable(machine, d)
                d.kept_by.clear()  # worded again with the machine's new reason


def _start(given: Job, machine: Machine, alloc: dict[str, list[int]], d: Dispatch) -> None:
    job = d.plan.edit(given)
    view = d.seen.peek(machine.name)
    for resource, indices in alloc.items():
        d.used.setdefault(machine.name, {}).setdefault(resource, set()).update(indices)
    job.machine, job.alloc = machine.name, alloc  # its move to launching clears why it waited
    job.attempts.append(Attempt(n=job.attempt, machine=machine.name, started=d.seen.now,
                                resume=job.resume, workers=view.n_workers))
    recovering = job.reason == model.RECOVERING  # the attempt a recovery queued: the job resumes
    d.plan.move(job, Status.LAUNCHING, model.RECOVERING if recovering else None,
                Cause.RELAUNCH if recovering else Cause.LAUNCH)
    job.log_size, job.log_grew, job.last_line = 0, d.seen.now, ""
    d.usage.setdefault(job.user, UserUse()).add(machine, machine.name)
    if job.sweep is not None:
        d.sweep_active[job.sweep] = d.sweep_active.get(job.sweep, 0) + 1
    d.plan.do(Launch(job.id, machine.name, job.attempt, view.n_workers))
    d.plan.notes.append(f"job {job.id}: launch attempt {job.attempt} on {machine.name}")
    d.started.append(job)


def _want_back(job: Job, request: Request, fleet: Fleet, seen: Observation, plan: Plan) -> None:
    """A queued job that only a preempted (or not yet created) TPU could run asks for it back, when
    its rule is one that recreates TPUs; without this it would wait for a node nobody recreates."""
    coming = {a.machine for a in plan.actions if isinstance(a, Recreate)}
    fits = [m for m in fleet.machines.values() if m.cloud_node and why_not(m, request, job.pin) is None]
    if any(m.name in coming or seen.peek(m.name).recovering for m in fits):
        return  # one is already on its way back
    for machine in fits:
        if machine.name in seen.drained and not returning(job, machine.name):
            continue  # a drained TPU is not brought back for new work
        if seen.peek(machine.name).preempted and rules.recovery(rule_of(job, machine), model.PREEMPTED, 0, 1):
            plan.do(Recreate(machine.name), f"job {job.id} waits for it")
            plan.notes.append(f"job {job.id}: waits for {machine.name}, which is preempted: recreate it")
            return

"""Dispatch: queued jobs offered the machines that are free, in turn, and each one left waiting given
its pending reason. Pure: the jobs it starts, fails or gives a new pending reason get new records in
the plan (Plan.edit), with Launches (and TPU recreations); the records it is given stay as they are."""

from __future__ import annotations

import itertools
from collections import ChainMap

from jobtpu.decide import locality, rules, slurm_after
from jobtpu.decide.dispatch_state import (
    Dispatch,
    UserUse,
    count_text,
    keepers,
    keeps_whole,
    kept_for,
    machine_unavailable,
    over_limit,
    own_claim,
    returning,
    sweep_activity,
    undrained_unavailable,
    used_resources,
    user_usage,
)
from jobtpu.decide.evict import class_buckets, evict_for, note_evicted, still_evicting
from jobtpu.decide.fit import Request, allocate, parse_request, why_not
from jobtpu.decide.gang import place_gang, start_on
from jobtpu.decide.observation import Observation, Plan, Recreate, rule_of
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.state import Cause, Job, Status

# Each question the dispatch asks is one hook function, so fairness, limits, dependencies, holds and
# sheet claims each change one place, and a queued job's pending reason comes from the same code that
# kept it waiting.

def dispatch_order(queued: list[Job], d: Dispatch) -> list[Job]:
    """The order queued jobs are offered machines in: users take turns, one job each per round, so
    one user's long queue delays another's job by at most one turn. The user whose last launch is
    oldest (or who never launched) goes first in each round; ties go to whoever queued first. A
    user's own jobs go by --priority (higher first), then in submission order. With priority classes
    (machines.json's priority_classes), a higher class's jobs all go before a lower one's turns."""
    if d.fleet.classes is not None and len(buckets := class_buckets(queued, d.fleet.classes)) > 1:
        return [job for bucket in buckets for job in _fair_order(bucket, d)]
    return _fair_order(queued, d)


def _fair_order(queued: list[Job], d: Dispatch) -> list[Job]:
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
            handed = slurm_after.handover(job, d.by_id, d.fleet)
            if handed is None:
                return waits
            d.slurm_after[job.id] = handed  # handed at once to its dependencies' Slurm cluster, after them
    if job.held:
        return "held by hold"
    if job.max_running is not None and job.sweep is not None and not _throttled_by_slurm(job, d):
        running = d.sweep_active.get(job.sweep, 0)
        if running >= job.max_running:  # as sbatch --array=…%N: the sweep's others wait their turn
            return f"sweep {job.sweep}: {running} of {job.max_running} running (--max-running)"
    if not d.fleet.has_limits:
        return None
    limit = d.fleet.limit_for(job.user).jobs
    if limit is not None and d.usage.get(job.user, UserUse()).jobs >= limit:
        return f"held by the per-user limit ({count_text(limit, 'running job')})"
    return None


def _throttled_by_slurm(job: Job, d: Dispatch) -> bool:
    """Whether only Slurm clusters could run the sweep's job: then every member is handed over at
    once, as one job array whose `%M` is the --max-running Slurm keeps (passes/arrays.py)."""
    fits = _fitting_machines(job, parse_request(job.req), d)
    return bool(fits) and all(d.fleet.machines[name].scheduled for name in fits)


def why_waiting(job: Job, request: Request, d: Dispatch, nearby: list[Machine] | None = None) -> str:
    """The pending reason of a queued job that found no machine in this pass: which machines could
    run it and what keeps each from doing so now, and how many waiting jobs are ahead of it for them.
    Called for every such job in dispatch order (it counts the queue as it goes). `nearby`: the
    machines a resuming job may go to (locality.resume_candidates), when not every one."""
    fits = _fitting_machines(job, request, d)
    only = ""
    if nearby is not None and len(near := tuple(m.name for m in nearby if m.name in fits)) < len(fits):
        fits, only = near, f"{locality.where_text(job, d.fleet)} (machines.json resume): "
        if not fits:
            return f"{only}no machine there fits"
    if not fits:
        return _nothing_offers(job, request, d)
    ahead = sum(n for names, n in d.waited.items() if names == fits or not set(names).isdisjoint(fits))
    d.waited[fits] = d.waited.get(fits, 0) + 1
    now = d.kept_by.get(fits) if not job.keeps else _kept_by(fits, d, job)
    if now is None:
        now = d.kept_by[fits] = _kept_by(fits, d)
    queue = "next in line" if not ahead else f"{ahead} job{'s' if ahead > 1 else ''} ahead of it"
    return f"{only}{now}; {queue}"


def _kept_by(fits: tuple[str, ...], d: Dispatch, keeper: Job | None = None) -> str:
    """What keeps the machines that fit a job from it now: busy, or each one's reason (a machine
    another job's resume keeps says so; the `keeper`'s own do not)."""
    blocked = [why for name in fits if (why := d.unavailable.get(name) or (
        kept_for(keeper, name, d) if keeper is not None else _kept_reason(name, d))) is not None]
    busy = len(fits) - len(blocked)
    if not busy:
        return "no machine can run it now: " + ", ".join(blocked)
    if blocked:
        return f"{len(fits)} machines fit: {busy} busy, " + ", ".join(blocked)
    if busy == 1:
        return f"{fits[0]} fits, busy"
    return f"{busy} machines fit, {'both' if busy == 2 else 'all'} busy"


def _kept_reason(name: str, d: Dispatch) -> str | None:
    keeper = d.kept.get(name)
    return None if keeper is None else f"{name} kept for job {keeper}'s resume"


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
    d.kept = keepers(jobs, fleet)
    # Resources only get taken during a dispatch: once a request found no room, every later job asking
    # the same (a sweep queues thousands alike) finds none either, and would want back the same TPU.
    no_room: dict[tuple[str | None, tuple[tuple[str, ...], str | None, str | None]], Request] = {}
    limited: dict[tuple[str, tuple[tuple[str, ...], str | None, str | None]], str] = {}  # per user: only grows
    no_victims: set[tuple[object, int]] = set()  # (room, class rank) whose eviction found nothing to stop
    for job in dispatch_order([j for j in jobs if j.status is Status.QUEUED], d):
        held = held_back(job, d)
        if held is not None:
            d.plan.wait(job, held)
            continue
        if job.keeps and not keeps_whole(job, fleet):
            job = d.plan.edit(job)  # a kept machine left machines.json (or a hand edit broke the claim)
            job.keeps = []
        if job.slices > 1:
            gang_waits = place_gang(job, parse_request(job.req), d)
            if gang_waits is not None:
                d.plan.wait(job, gang_waits)
            continue
        asks = (tuple(job.req), job.pin, job.rule)
        # A machine one user claimed in the sheet takes that user's jobs only: no room for one user's
        # request says nothing of another's then.
        room = (job.user if seen.claimants else None, asks)
        if (job.user, asks) in limited:
            d.plan.wait(job, limited[(job.user, asks)])
            continue
        back = bool(d.drained_only) and job.reason == model.RECOVERING  # may go back to a drained machine
        nearby = locality.resume_candidates(job, fleet)  # a resuming job: the machines near its data
        # A class above the lowest may evict where an alike job found no room (it looks for itself),
        # until an alike job of its class found nothing to evict either (candidates only go).
        rank = d.fleet.classes.of(job.priority_class).rank if d.fleet.classes is not None else 0
        evicts = rank > 0 and (room, rank) not in no_victims
        after = d.slurm_after.get(job.id)
        if room in no_room and not back and not job.keeps and nearby is None and after is None:
            evicting = evict_for(job, no_room[room], d) if evicts else None
            if evicts and evicting is None:
                no_victims.add((room, rank))
            d.plan.wait(job, evicting or (still_evicting(job, d) if rank > 0 else None)
                        or why_waiting(job, no_room[room], d))
            continue
        request = parse_request(job.req)
        by_limit = local_why = None
        for machine in fleet.machines.values() if nearby is None else nearby:
            if unavailable[machine.name] is not None and not own_claim(job, machine, d) and not (
                    back and machine.name in d.drained_only and returning(job, machine.name)):
                continue
            if kept_for(job, machine.name, d) is not None or (
                    job.keeps and nearby is None and machine.name not in job.keeps):
                continue  # another job's resume keeps it; a job that waits for its own TPU goes back there
            if why_not(machine, request, job.pin) is not None or (after is not None and machine.name != after[0]):
                continue
            if machine.runs_as_this_account and (refusal := seen.local_refusals.get(job.id)) is not None:
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
            start_on(job, [machine], alloc, d)
            if after is not None:
                d.started[-1].attempts[-1].slurm_after = after[1]
            for name in job.keeps:  # resumed elsewhere at once: what it kept is free for others
                if d.kept.get(name) == job.id:
                    del d.kept[name]
            break
        else:
            if by_limit is not None:  # a machine would take it but for its user's limit
                d.plan.wait(job, by_limit)
                limited[(job.user, asks)] = by_limit
                continue
            if local_why is not None:  # not cached in no_room: the next job of the same kind may be ours
                d.plan.wait(job, local_why)
                continue
            if not back and not job.keeps and nearby is None and after is None:
                no_room[room] = request
            if evicts and (evicting := evict_for(job, request, d)) is not None:
                d.plan.wait(job, evicting)
                continue
            if evicts and not back and not job.keeps and nearby is None:
                no_victims.add((room, rank))
            _want_back(job, request, fleet, seen, plan, nearby)
            _note_recreations(d)
            d.plan.wait(job, why_waiting(job, request, d, nearby))
    if d.fleet.classes is not None:
        note_evicted([j for j in jobs if j.status is Status.QUEUED], d)


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


def _want_back(job: Job, request: Request, fleet: Fleet, seen: Observation, plan: Plan,
               nearby: list[Machine] | None = None) -> None:
    """A queued job that only a preempted (or not yet created) TPU could run asks for it back, when
    its rule is one that recreates TPUs; without this it would wait for a node nobody recreates.
    A resuming job asks back only a TPU near its data (`nearby`, when given)."""
    coming = {a.machine for a in plan.actions if isinstance(a, Recreate)}
    fits = [m for m in (fleet.machines.values() if nearby is None else nearby)
            if m.cloud_node and why_not(m, request, job.pin) is None
            and (not job.keeps or m.name in job.keeps)]  # a job that keeps its TPU waits for that one
    if any(m.name in coming or seen.peek(m.name).recovering for m in fits):
        return  # one is already on its way back
    for machine in fits:
        if machine.name in seen.drained and not returning(job, machine.name):
            continue  # a drained TPU is not brought back for new work
        if seen.peek(machine.name).preempted and rules.recovery(rule_of(job, machine), model.PREEMPTED, 0, 1):
            plan.do(Recreate(machine.name), f"job {job.id} waits for it")
            plan.notes.append(f"job {job.id}: waits for {machine.name}, which is preempted: recreate it")
            return

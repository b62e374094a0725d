"""Multislice gangs (`submit --slices N`, docs/reference/commands.md §2.2): one job on N machines of
one kind, started together or not at all, stopped and recovered as one. Pure: which machines a gang's
workers are on, how a global worker index maps to its slice, the one view of all its machines a pass
judges the job by, and the dispatch of a gang (all N machines in one pass, or none, with a pending
reason that says how far it is). A one-slice job goes through `start_on` too, with its one machine."""

from __future__ import annotations

from jobtpu.decide import rules
from jobtpu.decide.dispatch_state import Dispatch, UserUse, count_text, kept_for, own_claim, returning
from jobtpu.decide.fit import Request, allocate, why_not
from jobtpu.decide.observation import Kill, Launch, MachineView, Observation, Recreate, rule_of
from jobtpu.decide.workers import WorkerRef
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Machine
from jobtpu.schema.state import Attempt, Cause, Job, Status


def machines_of(job: Job) -> tuple[str, ...]:
    """The machines the job's workers are on, in slice order: its gang, else its one machine."""
    if job.gang:
        return tuple(job.gang)
    return (job.machine,) if job.machine else ()


def per_slice(job: Job) -> int:
    """Workers per slice of the current attempt (every slice of a gang has as many)."""
    workers = job.current.workers if job.current else 1
    return max(1, workers // (len(job.gang) or 1))


def slice_refs(job: Job, s: int) -> tuple[WorkerRef, ...]:
    """The workers of slice `s`: worker indices are global, slice s worker i is s * per_slice + i."""
    per = per_slice(job)
    return tuple(WorkerRef(job.id, job.attempt, s * per + i) for i in range(per))


def machine_of(job: Job, worker: int) -> str | None:
    """The machine a worker of the job's current attempt is on."""
    names = machines_of(job)
    return names[min(worker // per_slice(job), len(names) - 1)] if names else None


def kills(job: Job, refs: tuple[WorkerRef, ...], first: str | None = None) -> list[Kill]:
    """A stop of these workers: one Kill per machine, each with its own slice's workers (`first`:
    the signal an eviction sends before the TERM, Kill.first)."""
    by_machine: dict[str, list[WorkerRef]] = {}
    for ref in refs:
        name = machine_of(job, ref.worker)
        if name is not None:
            by_machine.setdefault(name, []).append(ref)
    return [Kill(job.id, name, tuple(mine), first) for name, mine in by_machine.items()]


def gang_view(job: Job, seen: Observation) -> MachineView:
    """What the pass saw of all the job's machines as one: preempted when any slice is, unreachable
    when any is, every slice's workers. A one-slice job's is its machine's own view."""
    names = machines_of(job)
    if len(names) == 1:
        return seen.peek(names[0])
    views = [seen.peek(name) for name in names]
    reach = [v.reachable for v in views]
    merged = MachineView(reachable=False if False in reach else True if all(reach) else None,
                         error=next((f"{n}: {v.error}" for n, v in zip(names, views, strict=True) if v.error), None),
                         n_workers=sum(v.n_workers for v in views), preempted=any(v.preempted for v in views))
    for view in views:
        merged.workers.update(view.workers)
    return merged


def preempted_of(job: Job, seen: Observation) -> list[str]:
    """The job's machines the TPU API says are preempted or gone."""
    return [name for name in machines_of(job) if seen.peek(name).preempted]


# ---- dispatch of a gang ----------------------------------------------------------------------------

def kind_of(machine: Machine) -> tuple[str, int | None]:
    """What the machines of one gang share: the accelerator type (a TPU's says its workers too) and
    the listed hosts of an ssh box."""
    return machine.accelerator or "", machine.known_workers


def kinds(machines: list[Machine]) -> dict[tuple[str, int | None], list[Machine]]:
    """The machines that may be a gang's by kind, in machines.json order within each. The local
    machine never is: its launches are checked against the job's spec as its own account's
    (docs/design.md §7), which a gang's launch on remote machines does not do."""
    found: dict[tuple[str, int | None], list[Machine]] = {}
    for machine in machines:
        if not machine.runs_here:
            found.setdefault(kind_of(machine), []).append(machine)
    return found


def largest_gang(machines: list[Machine]) -> int:
    """The most slices any gang of these machines could have: the machines of the commonest kind."""
    return max((len(group) for group in kinds(machines).values()), default=0)


def choose(ready: list[Machine], n: int) -> list[Machine]:
    """N of the ready machines: all of one slice group when one has N ready (in slice order), else
    the first N in machines.json order."""
    groups: dict[str, list[Machine]] = {}
    for machine in ready:
        if machine.slice_group is not None:
            groups.setdefault(machine.slice_group, []).append(machine)
    for group in groups.values():
        if len(group) >= n:
            return sorted(group, key=lambda m: m.slice_index or 0)[:n]
    return ready[:n]


def _state(job: Job, machine: Machine, request: Request, d: Dispatch) -> str:
    """One word for where the machine stands for this gang now: ready, busy, or what keeps it."""
    if kept_for(job, machine.name, d) is not None:
        return "kept"
    why = d.unavailable.get(machine.name)
    back = machine.name in d.drained_only and returning(job, machine.name)
    if why is not None and not own_claim(job, machine, d) and not back:
        view = d.seen.peek(machine.name)
        if machine.name in d.recreating or view.recovering:
            return "recreating"
        if view.preempted:
            return "preempted"
        if machine.name in d.seen.drained:
            return "drained"
        if machine.name in d.seen.claims:
            return "claimed"
        return "unreachable" if machine.refused is None else "refused"
    return "ready" if allocate(machine.capacity, d.used.get(machine.name, {}), request.needs()) is not None else "busy"


def place_gang(job: Job, request: Request, d: Dispatch) -> str | None:
    """Start the job on N machines of one kind when N are ready now (None), else say how far the
    gang is (its pending reason); a TPU of the gang's kind that is preempted is asked back meanwhile."""
    n = job.slices
    fits = [m for m in d.fleet.machines.values() if why_not(m, request, job.pin) is None]
    if job.keeps:  # it resumes on the machines it kept, in their slice order
        fits = [d.fleet.machines[name] for name in job.keeps if name in d.fleet.machines]
    reasons = []
    for (accel, _), group in kinds(fits).items():
        if len(group) < n:
            continue
        states = {m.name: _state(job, m, request, d) for m in group}
        ready = [m for m in group if states[m.name] == "ready"]
        if len(ready) >= n:
            chosen = ready[:n] if job.keeps else choose(ready, n)  # a resume keeps its slices' order
            limit = _over_limit(job, chosen, d)
            if limit is not None:
                return limit
            alloc = _common_alloc(chosen, request, d)
            if alloc is not None:
                start_on(job, chosen, alloc, d)
                return None
        _want_back(job, group, states, n, d)
        counts: dict[str, int] = {}
        for m in group:
            word = "recreating" if m.name in d.recreating else states[m.name]
            counts[word] = counts.get(word, 0) + 1
        said = ", ".join(f"{k} {w}" for w, k in sorted(counts.items(), key=lambda wk: (wk[0] != "ready", -wk[1])))
        reasons.append(f"needs {n} slices of {accel or 'its kind'}: {said}")
    if not reasons:
        return f"needs {n} slices of one kind: {largest_gang(fits)} machines of one kind fit it"
    return "; ".join(reasons)


def _over_limit(job: Job, chosen: list[Machine], d: Dispatch) -> str | None:
    """Why a gang on these machines would take its user past a per-user limit: every machine counts."""
    if not d.fleet.has_limits:
        return None
    limit = d.fleet.limit_for(job.user)
    use = d.usage.get(job.user, UserUse())
    names = use.machines | {m.name for m in chosen}
    if limit.machines is not None and len(names) > limit.machines:
        return f"held by the per-user limit ({count_text(limit.machines, 'machine')})"
    tpus = use.tpu_machines | {m.name for m in chosen if m.cloud_node}
    if limit.tpu_machines is not None and len(tpus) > limit.tpu_machines:
        return f"held by the per-user limit ({count_text(limit.tpu_machines, 'TPU machine')})"
    return None


def _common_alloc(chosen: list[Machine], request: Request, d: Dispatch) -> dict[str, list[int]] | None:
    """The same indices of each resource, free on every machine of the gang (its JOBTPU_<RESOURCE>
    is one value for every worker); None when they share too few."""
    alloc: dict[str, list[int]] = {}
    for resource, count in request.needs().items():
        free = set(range(min(m.capacity.get(resource, 0) for m in chosen)))
        for m in chosen:
            free -= d.used.get(m.name, {}).get(resource, set())
        if len(free) < count:
            return None
        alloc[resource] = sorted(free)[:count]
    return alloc


def _want_back(job: Job, group: list[Machine], states: dict[str, str], n: int, d: Dispatch) -> None:
    """Ask back as many of the group's preempted TPUs as the gang lacks, when its rule recreates them."""
    lacking = n - sum(1 for s in states.values() if s in ("ready", "busy", "recreating"))
    for machine in group:
        if lacking <= 0:
            return
        if (states[machine.name] == "preempted" and machine.cloud_node and machine.name not in d.recreating
                and rules.recovery(rule_of(job, machine), model.PREEMPTED, 0, 1)):
            d.plan.do(Recreate(machine.name), f"job {job.id} waits for it")
            d.plan.notes.append(f"job {job.id}: waits for {machine.name}, which is preempted: recreate it")
            d.recreating.add(machine.name)
            lacking -= 1


def start_on(given: Job, machines: list[Machine], alloc: dict[str, list[int]], d: Dispatch) -> None:
    """Launch the job's next attempt on these machines (slice order; one for a one-slice job)."""
    job = d.plan.edit(given)
    names = [m.name for m in machines]
    per = d.seen.peek(names[0]).n_workers
    gang = names if len(names) > 1 else []
    for name in names:
        for resource, indices in alloc.items():
            d.used.setdefault(name, {}).setdefault(resource, set()).update(indices)
    job.machine, job.alloc = names[0], alloc  # its move to launching clears why it waited, and what it kept
    job.attempts.append(Attempt(n=job.attempt, machine=names[0], started=d.seen.now, resume=job.resume,
                                workers=per * len(names), gang=list(gang),
                                box=d.seen.box if d.seen.boxes and machines[0].runs_here else None))
    recovering = job.reason == model.RECOVERING  # the attempt a recovery queued: the job resumes
    d.plan.move(job, Status.LAUNCHING, model.RECOVERING if recovering else None,
                Cause.RELAUNCH if recovering else Cause.LAUNCH)
    job.gang = list(gang)
    job.log_size, job.log_grew, job.last_line = 0, d.seen.now, ""
    d.usage.setdefault(job.user, UserUse()).add_gang([(m, m.name) for m in machines])
    if job.sweep is not None:
        d.sweep_active[job.sweep] = d.sweep_active.get(job.sweep, 0) + 1
    d.plan.do(Launch(job.id, names[0], job.attempt, per * len(names), gang=tuple(gang)))
    where = names[0] if not gang else f"{len(gang)} slices ({', '.join(gang)})"
    d.plan.notes.append(f"job {job.id}: launch attempt {job.attempt} on {where}")
    d.started.append(job)

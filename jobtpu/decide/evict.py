"""Priority classes across users (docs/reference/requests-and-rules.md §8): the order classes give the
queue, and which running jobs a queued job of a higher class evicts when it fits nowhere. Pure: the
choice is a function of values (table-tested); the dispatch's hook below writes its answer into the
plan (the victims stopping, as `kill` stops a job, and queued to resume once their workers are gone).

An eviction is Slurm's PreemptMode=REQUEUE: the evicted attempt ends `preempted` (counted in
`preemptions`, never a failure, never against --retries or --max-recoveries, whatever
--max-preemptions says) and resumes (JOBTPU_RESUME=1)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from jobtpu.decide.dispatch_state import Dispatch, kept_for
from jobtpu.decide.evict_index import Evictable, EvictIndex, by_machine
from jobtpu.decide.fit import Request, allocate, why_not
from jobtpu.decide.gang import kills
from jobtpu.decide.observation import refs_of
from jobtpu.schema import state as model
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.priority import Classes
from jobtpu.schema.state import Ending, Job, Recovery, Status

MAX_VICTIMS = 8  # jobs one machine's eviction may stop at once: beyond it the search is not worth its cost


class EvictChoice(msgspec.Struct, frozen=True):
    machine: str
    victims: tuple[int, ...]  # job ids, in the order the choice preferred them


def choose(needs: dict[str, int], rank: int, machines: Sequence[tuple[str, dict[str, int]]],
           used: dict[str, dict[str, set[int]]], holders: Sequence[Evictable]) -> EvictChoice | None:
    """The fewest running jobs of classes below `rank` whose stop frees room for `needs` on one of
    `machines` (name, capacity; in machines.json's order); None when no such set exists. Among sets
    of as many jobs, the lowest classes go first, then on a machine earlier in machines.json; within
    one machine, of jobs of one class the one started last goes first, then the lower id (stable)."""
    return choose_on(needs, rank, machines, used, by_machine(holders))


def choose_on(needs: dict[str, int], rank: int, machines: Sequence[tuple[str, dict[str, int]]],
              used: dict[str, dict[str, set[int]]], on: dict[str, list[Evictable]]) -> EvictChoice | None:
    """choose, the holders given by machine in the order it prefers them (evict_index.by_machine):
    each machine's candidates are the first of its list below `rank`, never a scan of every job."""
    best: tuple[int, tuple[int, ...], int, EvictChoice] | None = None
    for order, (name, capacity) in enumerate(machines):
        if best is not None and best[:2] == (1, (0,)):
            break  # one job of the lowest class: no later machine does better
        on_it = list(itertools.islice(itertools.takewhile(lambda h: h.rank < rank, on.get(name, ())), MAX_VICTIMS))
        if best is not None and best[0] == 1 and (not on_it or on_it[0].rank >= best[1][0]):
            continue  # one victim found already: only a single one of a lower class here does better
        mine = used.get(name, {})
        for k in range(1, len(on_it) + 1):
            if best is not None and k > best[0]:
                break
            found = next((combo for combo in itertools.combinations(on_it, k)
                          if allocate(capacity, _freed(mine, combo), needs) is not None), None)
            if found is not None:
                key = (k, tuple(sorted(h.rank for h in found)), order)
                if best is None or key < best[:3]:
                    best = (*key, EvictChoice(name, tuple(h.job for h in found)))
                break
    return best[3] if best is not None else None


def _freed(used: dict[str, set[int]], stopped: Sequence[Evictable]) -> dict[str, set[int]]:
    """A machine's used indices once `stopped` are gone."""
    gone: dict[str, set[int]] = {}
    for holder in stopped:
        for resource, indices in holder.alloc.items():
            gone.setdefault(resource, set()).update(indices)
    return {resource: indices - gone.get(resource, set()) for resource, indices in used.items()}


def class_buckets(queued: list[Job], classes: Classes) -> list[list[Job]]:
    """The queued jobs by class, highest first (each bucket in the order given): dispatch offers
    machines to a higher class before any fair-share turn of a lower one."""
    buckets: dict[int, list[Job]] = {}
    for job in queued:
        buckets.setdefault(classes.of(job.priority_class).rank, []).append(job)
    return [buckets[rank] for rank in sorted(buckets, reverse=True)]


# ---- the dispatch's hook ------------------------------------------------------------------------

def evict_for(job: Job, request: Request, d: Dispatch) -> str | None:
    """A queued job that found no machine: when its class is above others', the pending reason of
    the eviction it makes (or already made, waiting for the victims' workers to stop); None when it
    evicts nothing. A gang evicts nothing (docs/reference/requests-and-rules.md §8)."""
    classes = d.fleet.classes
    if classes is None or job.slices > 1:
        return None
    mine = classes.of(job.priority_class)
    if mine.rank == 0:
        return None
    index = d.evictions = d.evictions or _index(d, classes)
    if (pending := still_evicting(job, d)) is not None:
        return pending
    fit = (tuple(job.req), job.pin)  # the machines a request could run on now: worked out once per dispatch
    if fit not in index.fits:
        index.fits[fit] = [(m.name, m.capacity) for m in d.fleet.machines.values()
                           if d.unavailable.get(m.name) is None and why_not(m, request, job.pin) is None]
    machines = [(name, cap) for name, cap in index.fits[fit] if name not in d.kept or kept_for(job, name, d) is None]
    needs = request.needs()
    # Within a dispatch candidates only go and room is only taken: a request that found nothing to
    # evict on these machines finds nothing later either (one look for a sweep's thousands of jobs).
    key = (tuple(sorted(needs.items())), mine.rank, tuple(name for name, _ in machines))
    if key in index.dead_ends:
        return None
    choice = choose_on(needs, mine.rank, machines, d.used, index.on)
    if choice is None:
        index.dead_ends.add(key)
        return None
    index.drop(choice.victims)
    victims = [d.plan.edit(index.records[vid]) for vid in choice.victims]
    for victim in victims:
        why = f"evicted by job {job.id} ({mine.name}), a higher priority class"
        d.plan.moves.append(victim.stop(Ending(Status.FAILED, model.PREEMPTED, None, Recovery.RESUME)))
        victim.evicted_by = job.id
        for kill in kills(victim, refs_of(victim), first=victim.signal):  # its --signal first: it may checkpoint
            d.plan.do(kill, why)
        d.plan.notes.append(f"job {victim.id}: stopping on {', '.join(victim.holds)}: {why}")
    return _evicting(victims, classes, choice.machine)


def still_evicting(job: Job, d: Dispatch) -> str | None:
    """The pending reason of a job whose victims (of an earlier pass) are still stopping; None else."""
    if d.fleet.classes is None:
        return None
    d.evictions = d.evictions or _index(d, d.fleet.classes)
    pending = d.evictions.evicting.get(job.id)
    return _evicting(pending, d.fleet.classes) if pending else None


def _index(d: Dispatch, classes: Classes) -> EvictIndex:
    """The one scan of the jobs a dispatch's evictions need (evict_index.py)."""
    evicting: dict[int, list[Job]] = {}
    records: dict[int, Job] = {}
    for latest in (d.plan.latest(j) for j in d.jobs):
        if latest.status is Status.KILLING and latest.evicted_by is not None:
            evicting.setdefault(latest.evicted_by, []).append(latest)
        elif latest.status is Status.RUNNING and latest.holds:
            records[latest.id] = latest
    holders = by_machine(_holder(j, classes, d.seen.now) for j in records.values())
    return EvictIndex(holders, evicting, records)


def _holder(job: Job, classes: Classes, now: float) -> Evictable:
    started = float(job.current.started) if job.current and job.current.started is not None else now
    cls = classes.of(job.priority_class)
    return Evictable(job.id, cls.rank, tuple(job.holds), job.alloc, now - started >= cls.min_runtime, started)


def _evicting(victims: list[Job], classes: Classes, machine: str | None = None) -> str:
    """`evicting job 7 (low) on tpu-a`: the evictor's pending reason while its victims stop."""
    shown = ", ".join(f"{v.id} ({classes.of(v.priority_class).name})" for v in victims)
    where = machine or ", ".join(dict.fromkeys(name for v in victims for name in v.holds))
    return f"evicting job{'s' if len(victims) > 1 else ''} {shown} on {where}"


def note_evicted(queued: list[Job], d: Dispatch) -> None:
    """An evicted job's pending reason says who evicted it, before why it waits now."""
    classes = d.fleet.classes
    for job in queued:
        latest = d.plan.latest(job)
        if latest.evicted_by is None or latest.status is not Status.QUEUED or classes is None:
            continue
        by = d.by_id.get(latest.evicted_by)
        prefix = f"evicted by job {latest.evicted_by}" + (f" ({classes.of(by.priority_class).name})" if by else "")
        if latest.waiting is not None and not latest.waiting.startswith(prefix):
            d.plan.wait(job, f"{prefix}; {latest.waiting}")

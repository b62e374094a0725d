"""What one dispatch knows while it places queued jobs (the Dispatch value its hooks share), and the
questions about one machine it asks again and again: whether the machine takes a new job now, whether
a user's limits let it go there, what the active jobs hold. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from jobtpu.decide.evict_index import EvictIndex
from jobtpu.decide.fit import parse_request, why_not
from jobtpu.decide.observation import Observation, Plan, claim_reason
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job


def used_resources(jobs: list[Job]) -> dict[str, dict[str, set[int]]]:
    used: dict[str, dict[str, set[int]]] = {}
    for job in jobs:
        if job.active and job.machine:
            for name in job.gang or [job.machine]:  # a gang holds its resources on every slice's machine
                for resource, indices in job.alloc.items():
                    used.setdefault(name, {}).setdefault(resource, set()).update(indices)
    return used


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
    slurm_after: dict[int, tuple[str, str]] = msgspec.field(default_factory=dict)  # slurm_after.handover's
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
    kept: dict[str, int] = msgspec.field(default_factory=dict)  # machine -> the queued job that keeps it to resume
    evictions: EvictIndex | None = None  # decide/evict.py's one scan of the jobs, made when first needed


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

    def add_gang(self, machines: list[tuple[Machine | None, str]]) -> None:
        """One job on several machines (a gang): one job, every machine counted."""
        for machine, name in machines:
            self.add(machine, name)
        self.jobs -= len(machines) - 1


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
            usage.setdefault(job.user, UserUse()).add_gang([(fleet.get(n), n) for n in job.gang or [job.machine]])
    return usage


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
        return f"held by the per-user limit ({count_text(limit.machines, 'machine')})"
    if machine.cloud_node and limit.tpu_machines is not None and len(use.tpu_machines) >= limit.tpu_machines:
        return f"held by the per-user limit ({count_text(limit.tpu_machines, 'TPU machine')})"
    return None


def count_text(n: int, thing: str) -> str:
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


def returning(job: Job, machine: str) -> bool:
    """A job the pass took off this machine to recover it (preempted, lost, retried) goes back to it
    though it is drained: a drain keeps new jobs away, and this one was there already."""
    return job.reason == model.RECOVERING and bool(job.attempts) and job.attempts[-1].machine == machine


def kept_for(job: Job, name: str, d: Dispatch) -> str | None:
    """Why another job's resume keeps the machine from `job` (its claim while the gang, or its TPU,
    comes back: the `keeps` field); None when none does or the keeper is `job` itself."""
    keeper = d.kept.get(name)
    return None if keeper is None or keeper == job.id else f"{name} kept for job {keeper}'s resume"


def keeps_whole(job: Job, fleet: Fleet) -> bool:
    """Whether the machines the job keeps could take it back: each in machines.json once, one per
    slice, all of one kind, each fitting its request. A claim that breaks this (a hand edit of
    state.json, or a machines.json changed since) could only keep machines from everyone for good,
    or start a gang twice on one machine: it ends, and the job waits as any other."""
    names = job.keeps
    machines = [fleet.machines.get(name) for name in names]
    if len(set(names)) != len(names) or len(names) != job.slices or None in machines:
        return False
    request = parse_request(job.req)
    kinds = {(m.accelerator or "", m.known_workers) for m in machines if m is not None}  # as decide/gang.py's kind_of
    return len(kinds) == 1 and all(m is not None and why_not(m, request, job.pin) is None for m in machines)


def keepers(jobs: list[Job], fleet: Fleet) -> dict[str, int]:
    """Machine -> the queued job that keeps it (the first by id, should a hand edit name one twice)."""
    kept: dict[str, int] = {}
    for job in sorted(jobs, key=lambda j: j.id):
        if job.status is model.Status.QUEUED and not job.held and job.keeps and keeps_whole(job, fleet):
            for name in job.keeps:
                if name in fleet.machines:
                    kept.setdefault(name, job.id)
    return kept

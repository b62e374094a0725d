"""The slices of one machines.json entry (`"slices": N`), planned together. Pure: no I/O.

The N slices are N machines, each with its own record (workers, setup, incarnation), made by ONE
multislice queued resource. Slice 0's record drives the queued resource: its create (with its
back-off, refusal and zone moves) and its delete are steps of slice 0 only; the other slices follow
it and show what it shows. Cloud TPU restarts every slice of a multislice queued resource, so when any
slice's node is preempted or gone, the whole queued resource is deleted and asked for again, and
every slice is being recreated until the queued resource is ACTIVE with every node READY; then each
slice is planned as one machine (its setup on its new incarnation, docs/reference/machines-json.md).
A group that nothing holds up is brought back by every pass, unless `jobtpu tpu delete` put it down."""

from __future__ import annotations

from jobtpu.decide.tpu_outcomes import BACKOFF_FIRST, MachinePlan, Step, created, spec_key
from jobtpu.decide.tpu_plan import (
    MachineWork,
    Sighting,
    finish_machine,
    plan_machine,
    prepare,
    refused_or_waiting,
)
from jobtpu.schema.records import MachineRecord, MachineState, StepKind
from jobtpu.schema.tpu_answers import PREEMPTED, UP, NodeInfo, OpInfo, QueuedInfo, health_of


def decide_group(sightings: list[Sighting], records: list[MachineRecord], now: float,
                 first_backoff: float = BACKOFF_FIRST, busy: tuple[int, ...] = ()) -> list[MachineWork]:
    """Each slice's work for this pass; `sightings` and `records` in slice order (slice 0 first);
    `busy`: the jobs still active on a slice."""
    leftovers = [prepare(s, r) for s, r in zip(sightings, records, strict=True)]
    lead = sightings[0].machine
    queued = sightings[0].queued if sightings[0].queued is not False else None
    plans = plan_group(records, [s.node for s in sightings], [s.op for s in sightings], queued, now,
                       first_backoff, spec_key(lead), lead.zones, busy)
    return [finish_machine(s, r, p, left) for s, r, p, left in zip(sightings, records, plans, leftovers, strict=True)]


def lost_slice(nodes: list[NodeInfo | None], queued: QueuedInfo | None) -> str | None:
    """Why the group must be asked for again, or None: it is whole (or on its way)."""
    if queued is None:
        return "there is no queued resource"
    if queued.state in ("FAILED", "SUSPENDED"):
        return queued.error or f"the queued resource is {queued.state}"
    if queued.state == "ACTIVE":
        for i, node in enumerate(nodes):
            health, why = health_of(node.state if node else None)
            if health == PREEMPTED:
                return f"slice {i}: {why}"
    return None


def plan_group(records: list[MachineRecord], nodes: list[NodeInfo | None], ops: list[OpInfo | None],
               queued: QueuedInfo | None, now: float, first_backoff: float = BACKOFF_FIRST, key: str = "",
               zones: tuple[str, ...] = (), busy: tuple[int, ...] = ()) -> list[MachinePlan]:
    """Every slice's plan. Changes the records: a want for the group (a job's, `tpu apply`'s, or a
    lost slice's) becomes every slice's, and is over for all of them at once. Nothing is deleted
    while a job is active on a slice (`busy`): its stop comes first, with its signal and grace, as
    `tpu reapply` waits for `kill`."""
    lead = records[0]
    for record, node in zip(records, nodes, strict=True):
        record.queued_state = queued.state if queued else None
        # Each slice's own node state, also while the group is recreated (no plan_machine then): a
        # gang judges its job by it, so one preempted slice stops the job on the others at once.
        record.tpu_state = node.state if node else None
    lost = lost_slice(nodes, queued)
    whole = queued is not None and queued.state == "ACTIVE" and all(_up(n) for n in nodes)
    if any(r.want_recreate for r in records) or (not whole and not lead.kept_down):
        for record in records:
            record.want_recreate, record.kept_down = True, False
    plans = [MachinePlan() for _ in records]
    if lead.want_recreate and (_follow_operations(records, ops, plans)
                               or _plan_queued_group(records, nodes, queued, lost, now, key, plans, busy)):
        return plans
    for i, record in enumerate(records):  # whole (or put down by hand): each slice is a machine of its own
        plans[i] = plan_machine(record, nodes[i], ops[i], now, first_backoff, key, zones)
        if lead.kept_down and nodes[i] is None:
            plans[i].detail = "deleted by `jobtpu tpu delete`: `jobtpu tpu apply` brings every slice back"
    return plans


def _follow_operations(records: list[MachineRecord], ops: list[OpInfo | None], plans: list[MachinePlan]) -> bool:
    """The deletes of stray nodes in flight (a queued resource's calls are not followed: its listing
    says how it goes). True while one is still running."""
    running = []
    for i, record in enumerate(records):
        op = ops[i]
        if record.operation is None or op is None:
            continue
        if op.done:
            record.operation = None
        else:
            running.append(i)
            plans[i].state, plans[i].detail = MachineState.RECREATING, f"{record.operation.kind} in progress"
    if running:
        _follow(plans, plans[running[0]], keep=running)
    return bool(running)


def _plan_queued_group(records: list[MachineRecord], nodes: list[NodeInfo | None], queued: QueuedInfo | None,
                       lost: str | None, now: float, key: str, plans: list[MachinePlan],
                       busy: tuple[int, ...] = ()) -> bool:
    """The group's queued resource while it is being recreated. False once it is ACTIVE with every
    node ready: the recreation is over for every slice."""
    lead, lead_plan = records[0], plans[0]
    state = queued.state if queued else None
    if state is None:
        strays = [i for i, node in enumerate(nodes) if node is not None]
        for i in strays:  # nodes made without the queued resource, or left over: they hold the names
            node = nodes[i]
            assert node is not None
            if busy:
                _hold(plans[i], busy, "deleting the old nodes")
            elif node.state != "DELETING" and not lead.queue_asked:
                plans[i].steps.append(Step(StepKind.DELETE))
                plans[i].state, plans[i].detail = MachineState.RECREATING, "deleting the old node"
            else:
                plans[i].state, plans[i].detail = MachineState.RECREATING, f"waiting: the node is {node.state}"
        if strays:
            _follow(plans, plans[strays[0]], keep=strays)
            return True
        lead.queue_asked = None
        if refused_or_waiting(lead, now, key, lead_plan) is None:
            lead_plan.steps.append(Step(StepKind.CREATE_QUEUED))
            lead_plan.state = MachineState.QUEUED
            lead_plan.detail = f"asking for a queued resource of {len(records)} slices"
        _follow(plans, lead_plan)
        return True
    if state in ("FAILED", "SUSPENDED") or (state == "ACTIVE" and lost):
        why = queued.error if queued and queued.error else lost or f"the queued resource is {state}"
        if busy:
            _hold(lead_plan, busy, f"deleting the {state} queued resource of every slice ({why})")
            _follow(plans, lead_plan)
            return True
        lead_plan.steps.append(Step(StepKind.DELETE_QUEUED, why if state == "FAILED" else ""))
        lead_plan.state = MachineState.RECREATING
        lead_plan.detail = f"deleting the {state} queued resource of every slice ({why})"
        _follow(plans, lead_plan)
        return True
    if state == "ACTIVE" and all(_up(n) for n in nodes):
        for record in records:
            created(record)
            record.queue_asked = None
        return False
    lead_plan.state = MachineState.RECREATING if state == "DELETING" else MachineState.QUEUED
    lead_plan.detail = f"queued resource {state}"
    if state == "ACTIVE":
        waiting = [str(i) for i, n in enumerate(nodes) if not _up(n)]
        lead_plan.detail += f": waiting for slice(s) {', '.join(waiting)} to be READY"
    _follow(plans, lead_plan)
    return True


def _follow(plans: list[MachinePlan], shown: MachinePlan, keep: list[int] | None = None) -> None:
    """Every slice without a plan of its own shows the group's."""
    for i, plan in enumerate(plans):
        if plan is not shown and i not in (keep or []):
            plan.state, plan.detail = shown.state, shown.detail


def _hold(plan: MachinePlan, busy: tuple[int, ...], what: str) -> None:
    plan.state = MachineState.RECREATING
    plan.detail = f"waiting for job(s) {', '.join(map(str, busy))} to stop before {what}"


def _up(node: NodeInfo | None) -> bool:
    return health_of(node.state if node else None)[0] == UP

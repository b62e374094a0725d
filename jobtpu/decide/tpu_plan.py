"""Each TPU machine's steps for a pass, decided from what the API said of it (a `Sighting`) and its
record in state.json. Pure: no I/O; the functions change only the record, plan and view they are given.

Recreation is a delete-then-create that spans passes (recorded in state.json, never waited on);
setup runs on every worker of each new incarnation before anything is launched there. The steps are
recorded as intents in the machine's record (`intend`) and saved before they are carried out: a
pass that dies in between leaves intents the next pass plans again from what the API lists. A
create is marked sent before it is sent, so the node it may have made is never taken for a stray
one and deleted."""

from __future__ import annotations

import copy
from typing import Any, Literal

from jobtpu.decide.tpu_outcomes import (
    BACKOFF_FIRST,
    SETUP_RETRIES,
    MachinePlan,
    Step,
    create_finished,
    created,
    spec_key,
)
from jobtpu.errors import RemoteError
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import MachineRecord, MachineState, SetupStatus, StepKind, Transient
from jobtpu.schema.tpu_answers import (
    DOWN,
    PREEMPTED,
    TRANSIENT,
    TRANSIENT_LIMIT,
    UP,
    CredentialsFailed,
    NodeInfo,
    OpInfo,
    QueuedInfo,
    health_of,
)


class Sighting(msgspec.Struct, frozen=True):
    """What one pass learned of a TPU machine through the API; nothing decided yet."""

    machine: Machine  # in the zone it was looked for (the one its record says it is in now)
    listing_error: RemoteError | None = None  # its zone could not be listed: nothing else is known
    node: NodeInfo | None = None
    op: OpInfo | None = None  # the operation the record follows, when the API could say
    # False for a machine without a queued resource, else its queued resource (None: there is none)
    queued: QueuedInfo | None | Literal[False] = False
    host_keys: list[list[str]] | None = None  # strict host keys, read when deciding needs them
    host_keys_error: str | None = None
    host_keys_read: bool = False  # whether they were asked for (`wants_host_keys`)


class MachineWork(msgspec.Struct):
    """One TPU machine's plan for this pass: decided after observing, saved as intents, carried out in act."""

    machine: Machine  # in the zone it is in now
    record: MachineRecord
    plan: MachinePlan
    addresses: list[str] = msgspec.field(default_factory=list)

    def has(self, kind: StepKind) -> bool:
        return any(step.kind == kind for step in self.plan.steps)


def plan_machine(record: MachineRecord, node: NodeInfo | None, op: OpInfo | None, now: float,
                 first_backoff: float = BACKOFF_FIRST, spec_key: str = "", zones: tuple[str, ...] = (),
                 queued: QueuedInfo | None | Literal[False] = False) -> MachinePlan:
    """What to do for one TPU machine this pass. Changes `record` (its state.json entry).
    `spec_key` names what machines.json asks of the node: a refused create is not asked again
    until it changes (or `jobtpu tpu apply`). `zones`: the machine's zones, in order of preference.
    `queued`: False for a machine without a queued resource, else its queued resource (None: none)."""
    plan = MachinePlan()
    health, why = health_of(node.state if node else None)
    record.tpu_state = node.state if node else None
    record.health = node.health if node else None
    record.health_description = node.health_description if node else None
    if node is not None and node.spec:
        # Recorded whenever the node is seen (so the first sight, and the pass that deletes it):
        # a recreation brings back exactly this, metadata, service account and network included.
        record.spec = node.spec
    pending = record.operation
    if pending and op is not None:
        if not op.done:
            plan.state, plan.detail = MachineState.RECREATING, f"{pending.kind} in progress"
            return plan
        record.operation = None
        if pending.kind == "create":
            create_finished(record, op, now, first_backoff, spec_key, zones)
    if queued is not False:
        record.queued_state = queued.state if queued else None
    if record.want_recreate and not record.operation and queued is not False:
        waiting = _plan_queued(record, node, queued, now, spec_key, plan)
        if waiting is not None:
            return waiting
    elif record.want_recreate and not record.operation:
        if node is not None and record.create_sent:
            # A create whose answer was lost (timeout, 503) but that Google carried out: this is
            # the node we asked for, never one to delete.
            created(record)
        else:
            return _plan_recreate(record, node, now, spec_key, plan)
    if health != UP:
        return _not_up(record, node, health, why, now, plan)
    record.transient = None
    incarnation = node.create_time if node else ""
    if record.incarnation != incarnation:
        if record.incarnation is not None:
            plan.steps.append(Step(StepKind.FORGET_KEYS))
        record.incarnation = incarnation
        record.setup = None
    setup = record.setup
    if setup is not None and setup.status == SetupStatus.DONE:
        plan.state, plan.detail = MachineState.UP, why
    elif setup is not None and setup.status == SetupStatus.FAILED and setup.tries >= SETUP_RETRIES:
        plan.state, plan.detail = MachineState.SETUP_FAILED, setup.error or ""
    else:
        plan.steps.append(Step(StepKind.SETUP))
        plan.state, plan.detail = MachineState.SETTING_UP, "running setup commands"
    return plan


def _plan_queued(record: MachineRecord, node: NodeInfo | None, queued: QueuedInfo | None, now: float,
                 spec_key: str, plan: MachinePlan) -> MachinePlan | None:
    """Recreation through a queued resource; None once it is ACTIVE with a ready node. A failed or
    suspended queued resource still holds quota: it is deleted before asking again."""
    state = queued.state if queued else None
    health = health_of(node.state if node else None)[0]
    if state is None:
        if node is not None and node.state != "DELETING" and not record.queue_asked:
            plan.steps.append(Step(StepKind.DELETE))  # a node made without a queued resource, or left over
            plan.state, plan.detail = MachineState.RECREATING, "deleting the old node"
        elif node is not None:
            plan.state, plan.detail = MachineState.RECREATING, f"waiting: the node is {node.state}"
        else:
            record.queue_asked = None
            blocked = refused_or_waiting(record, now, spec_key, plan)
            if blocked is None:
                plan.steps.append(Step(StepKind.CREATE_QUEUED))
                plan.state, plan.detail = MachineState.QUEUED, "asking for a queued resource"
        return plan
    if state in ("FAILED", "SUSPENDED") or (state == "ACTIVE" and health == PREEMPTED):
        why = queued.error if queued and queued.error else f"the queued resource is {state}"
        plan.steps.append(Step(StepKind.DELETE_QUEUED, why if state == "FAILED" else ""))
        plan.state, plan.detail = MachineState.RECREATING, f"deleting the {state} queued resource (it holds quota)"
        return plan
    if state == "ACTIVE" and health == UP:
        created(record)
        record.queue_asked = None
        return None
    plan.state, plan.detail = MachineState.QUEUED, f"queued resource {state}"
    return plan


def refused_or_waiting(record: MachineRecord, now: float, spec_key: str, plan: MachinePlan) -> MachinePlan | None:
    """The plan that holds a create back (refused for this spec, or backing off); None: go ahead."""
    refused = record.refused
    if refused and refused.spec_key == spec_key:
        plan.state = MachineState.REFUSED
        plan.detail = (f"create refused: {refused.message}; fix machines.json, or run "
                       "`jobtpu tpu apply` to ask again")
        return plan
    record.refused = None
    if record.next_try is not None and record.next_try > now:
        wait = int(record.next_try - now)
        plan.state = MachineState.BACKOFF
        plan.detail = f"create failed ({record.last_error or 'error'}); retry in {wait}s"
        return plan
    return None


def _plan_recreate(record: MachineRecord, node: NodeInfo | None, now: float, spec_key: str,
                   plan: MachinePlan) -> MachinePlan:
    blocked = refused_or_waiting(record, now, spec_key, plan)
    if blocked is not None:
        return blocked
    if node is not None and node.state not in ("CREATING", "DELETING"):
        plan.steps.append(Step(StepKind.DELETE))
        plan.state, plan.detail = MachineState.RECREATING, "deleting the old node"
    elif node is None:
        plan.steps.append(Step(StepKind.CREATE))
        plan.state, plan.detail = MachineState.RECREATING, "creating the node"
    else:
        plan.state, plan.detail = MachineState.RECREATING, f"waiting: the node is {node.state}"
    return plan


def _not_up(record: MachineRecord, node: NodeInfo | None, health: str, why: str, now: float,
            plan: MachinePlan) -> MachinePlan:
    """A node that is not ready. A transient state is waited on, and `machines` says for how long;
    past TRANSIENT_LIMIT it says the node looks stuck and how to recreate it (jobtpu does not
    delete a node on its own for being slow)."""
    plan.state = {PREEMPTED: MachineState.PREEMPTED, DOWN: MachineState.DOWN}.get(health, MachineState.TRANSIENT)
    plan.detail = why
    if health != TRANSIENT or node is None:
        record.transient = None
        return plan
    seen = record.transient
    if seen is None or seen.state != node.state:
        seen = record.transient = Transient(node.state, now)
    waited = now - float(seen.since or now)
    plan.detail = f"{why} (for {int(waited // 60)} min)"
    if waited > TRANSIENT_LIMIT:
        plan.state = MachineState.STUCK
        plan.detail += "; it looks stuck: `jobtpu tpu reapply` recreates it"
    return plan


# ---- a machine's work from its sighting ------------------------------------------------------------

def decide_machine(sighting: Sighting, record: MachineRecord, now: float,
                   first_backoff: float = BACKOFF_FIRST) -> MachineWork:
    """The machine's plan for this pass from what its zone's listing said (the zone listed)."""
    machine = sighting.machine
    leftover = prepare(sighting, record)
    plan = plan_machine(record, sighting.node, sighting.op, now, first_backoff, spec_key(machine), machine.zones,
                        sighting.queued)
    return finish_machine(sighting, record, plan, leftover)


def prepare(sighting: Sighting, record: MachineRecord) -> list[StepKind]:
    """Before planning: the record in the zone it was looked for; the steps a pass that died before
    carrying them out left behind."""
    record.api_error = None
    record.zone = sighting.machine.zone
    return list(record.steps or [])


def finish_machine(sighting: Sighting, record: MachineRecord, plan: MachinePlan, leftover: list[StepKind]) -> MachineWork:
    """The machine's work from its plan: leftover steps put back, its workers' addresses, its host keys."""
    machine, node = sighting.machine, sighting.node
    resume_leftovers(leftover, record, node, plan)
    if node is not None and node.spec:
        record.spec_zone = machine.zone
    machine = machine.in_zone(record.zone)  # a capacity error may have moved it just now
    if node is None and plan.state == MachineState.PREEMPTED and not machine.preemptible and sighting.queued is False:
        # Nothing preempted an on-demand node that is not there: say so, and how to make it.
        plan.state = MachineState.NO_NODE
        plan.detail = (f"no node {machine.node} in {machine.zone}: `jobtpu tpu apply {machine.name}` creates it "
                       "(a job whose rule is pre, reapply or rerun asks for it too)")
    addresses = node.addresses(machine.use_external_ip) if node else []
    record.addresses, record.workers = addresses, len(addresses)
    if node is not None and node.state == "READY" and plan.state in (MachineState.UP, MachineState.SETTING_UP):
        if not addresses:
            hold(plan, MachineState.NO_ADDRESS, no_address_reason(machine, node))
        elif machine.host_key_policy == "strict" and record.host_keys_for != node.create_time:
            take_host_keys(sighting, record, node, plan, len(addresses))
    return MachineWork(machine, record, plan, addresses)


# Steps the listing cannot tell were done: their cause (a new incarnation) was recorded with the
# intent, so planning again would not ask for them. Harmless to do twice, so a leftover one is done.
REDONE_FROM_LEFTOVERS = (StepKind.FORGET_KEYS,)
BY_HAND = "deleted by `jobtpu tpu delete`"


def resume_leftovers(leftover: list[StepKind], record: MachineRecord, node: NodeInfo | None, plan: MachinePlan) -> None:
    """Put back the leftover steps planning cannot find again (delete, create and setup it finds
    again from what the API lists and the record says, or sees they were done). A delete left by
    `jobtpu tpu delete` (no recreation wanted) is done if the node is still there."""
    for kind in REDONE_FROM_LEFTOVERS:
        if kind in leftover and all(step.kind != kind for step in plan.steps):
            plan.steps.insert(0, Step(kind))
    if StepKind.DELETE in leftover and not record.want_recreate and node is not None and node.state != "DELETING":
        plan.steps = [Step(kind) for kind in leftover if kind in (StepKind.DELETE_QUEUED, StepKind.DELETE)]
        plan.state, plan.detail = MachineState.DELETING, BY_HAND


def delete_by_hand(record: MachineRecord, queued_resource: bool) -> list[StepKind]:
    """`jobtpu tpu delete`'s intent, saved before it calls the API: a crash in between leaves the
    record saying deleting, and the next pass carries the delete out. Its queued resource goes too:
    left behind, it holds quota."""
    record.want_recreate = False
    record.steps = [StepKind.DELETE_QUEUED, StepKind.DELETE] if queued_resource else [StepKind.DELETE]
    record.state, record.detail = MachineState.DELETING, BY_HAND
    return list(record.steps)


def take_host_keys(sighting: Sighting, record: MachineRecord, node: NodeInfo, plan: MachinePlan,
                   workers: int) -> None:
    """strict: trust exactly the host keys the node publishes through the TPU API, recorded only
    once every worker has published one (a slow guest agent must not lock jobtpu out for good)."""
    if not sighting.host_keys_read:
        hold(plan, MachineState.WAITING_FOR_HOST_KEYS, "the node's host keys are read in the next pass")
        return
    if sighting.host_keys_error is not None or sighting.host_keys is None:
        hold(plan, MachineState.UNKNOWN, f"cannot read the node's host keys: {sighting.host_keys_error or 'none'}")
        return
    keys = sighting.host_keys
    missing = [i for i in range(workers) if i >= len(keys) or not keys[i]]
    if missing:
        hold(plan, MachineState.WAITING_FOR_HOST_KEYS,
             f"worker(s) {', '.join(map(str, missing))} have not published an SSH host key yet")
        return
    record.host_keys, record.host_keys_for = keys, node.create_time


def wants_host_keys(sighting: Sighting, record: MachineRecord, now: float, first_backoff: float) -> bool:
    """Whether deciding will use the node's published host keys (strict, a usable node whose
    incarnation's keys are not recorded yet): decided on a copy of the record, so observing asks the
    API for them exactly when they are needed."""
    if sighting.machine.host_key_policy != "strict" or sighting.node is None or sighting.node.state != "READY":
        return False
    trial = decide_machine(msgspec.structs.replace(sighting, host_keys_read=False), copy.deepcopy(record), now, first_backoff)
    return trial.plan.state == MachineState.WAITING_FOR_HOST_KEYS


def hold(plan: MachinePlan, state: MachineState, detail: str) -> None:
    """Nothing is launched or set up on the node this pass: it is not usable yet."""
    plan.steps = [s for s in plan.steps if s.kind != StepKind.SETUP]
    plan.state, plan.detail = state, detail


def no_address_reason(machine: Machine, node: NodeInfo) -> str:
    if machine.use_external_ip and node.external:
        return (f"{len(node.internal) - len(node.external)} of the {len(node.internal)} workers have no external "
                "IP and use_external_ip is true: wait for the node to list them all, or set it false")
    if machine.use_external_ip and node.internal:
        return ("the workers have no external IP (networkConfig.enableExternalIps is false) and "
                "use_external_ip is true: set it false to connect inside the VPC")
    return "the TPU API lists no worker address for the node"


def credentials_line(errors: list[RemoteError]) -> str | None:
    """A credentials failure costs the pass one line, however many zones and machines it stops;
    every other machine is still served."""
    failure = next((e for e in errors if isinstance(e, CredentialsFailed)), None)
    if failure is None:
        return None
    hint = f" (hint: {failure.hint})" if failure.hint else ""  # a credentials file's line says what to do itself
    return f"jobtpu: {failure.message}; TPU machines wait{hint}"


def not_listed(record: MachineRecord, view: Any, error: RemoteError) -> list[str]:
    """The zone could not be listed: nothing is known of the node this pass, nothing runs there.
    The workers' last known addresses."""
    view.ready, view.reachable, view.error = False, False, error.message
    if isinstance(error, CredentialsFailed):
        record.api_error = error.message  # `machines` shows it; the pass said it once already
    else:
        record.state, record.detail = MachineState.UNKNOWN, error.message
    view.n_workers = len(record.addresses or [])
    return list(record.addresses or [])


def show(work: MachineWork, view: Any, setting_up: bool) -> None:
    """What the pass's decisions see of the machine. One whose setup runs in this pass may be given
    jobs: their launches wait for the setup, and go back to the queue if it does not finish."""
    record, plan = work.record, work.plan
    record.state, record.detail = plan.state, plan.detail
    view.n_workers = len(work.addresses)
    view.preempted = health_of(record.tpu_state)[0] == PREEMPTED  # no node at all is preempted too
    view.ready = plan.state == MachineState.UP or setting_up
    view.setting_up = setting_up
    view.recovering = bool(record.want_recreate or record.operation)
    if not view.ready:
        view.reachable = False if not view.preempted else None
        view.error = plan.detail


def intend(work: MachineWork, now: float) -> None:
    """Record the machine's steps before any is carried out (the pass saves them first). A create is
    marked sent now: if the pass dies after sending it, the node the next listing shows is the one
    asked for, never one to delete."""
    record = work.record
    record.steps = [step.kind for step in work.plan.steps] or None
    if work.has(StepKind.CREATE) or work.has(StepKind.CREATE_QUEUED):
        record.create_sent = now
    if work.has(StepKind.CREATE_QUEUED):
        record.queue_asked = now

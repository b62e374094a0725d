"""Bringing TPU machines up and back: node state from one listing per zone, recreation as a
delete-then-create that spans passes (recorded in state.json, never waited on), and the machine's
setup commands on every worker of each new incarnation before anything is launched there.

A pass plans each machine's steps while it observes (`observe_tpus`, pure planning over one
listing), records them as intents in the machine's record (`intend`), saves, and only then carries
them out (`carry_out`). A pass that dies in between leaves intents the next pass plans again from
what the API lists: a create is marked sent before it is sent, so the node it may have made is
never taken for a stray one and deleted."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jobtpu import timing
from jobtpu.errors import RemoteError
from jobtpu.passes.session import Session, parallel
from jobtpu.remote import scripts
from jobtpu.schema.machines import Machine
from jobtpu.schema.state import MachineRecord, Operation, Refused, Setup, Transient
from jobtpu.tpu.nodespec import for_zone

if TYPE_CHECKING:
    from jobtpu.decide.core import Observation
    from jobtpu.tpu.api import NodeInfo, OpInfo, QueuedInfo, TpuApi

BACKOFF_FIRST, BACKOFF_MAX = 30.0, 900.0
SETUP_RETRIES = 3
ZONE_TRIES = 2  # capacity errors in a row in one zone before asking in the machine's next zone
# A queued resource fails only after waiting its whole valid_for: one is enough to move on.
QUEUED_ZONE_TRIES = 1


def backoff(failures: int, first: float = BACKOFF_FIRST) -> float:
    """Seconds to wait before the next create after `failures` failed ones: doubling, capped."""
    return min(BACKOFF_MAX, first * 2 ** max(0, failures - 1))


@dataclass
class Step:
    """One thing to do for a machine, decided from its record and what the API said."""

    kind: str  # delete | create | setup | forget-keys
    detail: str = ""


@dataclass
class MachinePlan:
    steps: list[Step] = field(default_factory=list)
    state: str = "unknown"  # what `machines` shows
    detail: str = ""


@dataclass
class MachineWork:
    """One TPU machine's plan for this pass: made while observing, saved as intents, carried out in act."""

    machine: Machine  # in the zone it is in now
    record: MachineRecord
    plan: MachinePlan

    def has(self, kind: str) -> bool:
        return any(step.kind == kind for step in self.plan.steps)


def plan_machine(record: MachineRecord, node: NodeInfo | None, op: OpInfo | None, now: float,
                 first_backoff: float = BACKOFF_FIRST, spec_key: str = "", zones: tuple[str, ...] = (),
                 queued: QueuedInfo | None | Literal[False] = False) -> MachinePlan:
    """Pure: what to do for one TPU machine this pass. Mutates `record` (its state.json entry).
    `spec_key` names what machines.json asks of the node: a refused create is not asked again
    until it changes (or `jobtpu tpu apply`). `zones`: the machine's zones, in order of preference.
    `queued`: False for a machine without a queued resource, else its queued resource (None: none)."""
    from jobtpu.tpu.api import UP, health_of

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
            plan.state, plan.detail = "recreating", f"{pending.kind} in progress"
            return plan
        record.operation = None
        if pending.kind == "create":
            _create_finished(record, op, now, first_backoff, spec_key, zones)
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
            _created(record)
        else:
            return _plan_recreate(record, node, now, spec_key, plan)
    if health != UP:
        return _not_up(record, node, health, why, now, plan)
    record.transient = None
    incarnation = node.create_time if node else ""
    if record.incarnation != incarnation:
        if record.incarnation is not None:
            plan.steps.append(Step("forget-keys"))
        record.incarnation = incarnation
        record.setup = None
    setup = record.setup
    if setup is not None and setup.status == "done":
        plan.state, plan.detail = "up", why
    elif setup is not None and setup.status == "failed" and setup.tries >= SETUP_RETRIES:
        plan.state, plan.detail = "setup failed", setup.error or ""
    else:
        plan.steps.append(Step("setup"))
        plan.state, plan.detail = "setting up", "running setup commands"
    return plan


def _plan_queued(record: MachineRecord, node: NodeInfo | None, queued: QueuedInfo | None, now: float,
                 spec_key: str, plan: MachinePlan) -> MachinePlan | None:
    """Recreation through a queued resource; None once it is ACTIVE with a ready node. A failed or
    suspended queued resource still holds quota: it is deleted before asking again."""
    from jobtpu.tpu.api import PREEMPTED, UP, health_of

    state = queued.state if queued else None
    health = health_of(node.state if node else None)[0]
    if state is None:
        if node is not None and node.state != "DELETING" and not record.queue_asked:
            plan.steps.append(Step("delete"))  # a node made without a queued resource, or left over
            plan.state, plan.detail = "recreating", "deleting the old node"
        elif node is not None:
            plan.state, plan.detail = "recreating", f"waiting: the node is {node.state}"
        else:
            record.queue_asked = None
            blocked = _refused_or_waiting(record, now, spec_key, plan)
            if blocked is None:
                plan.steps.append(Step("create-queued"))
                plan.state, plan.detail = "queued", "asking for a queued resource"
        return plan
    if state in ("FAILED", "SUSPENDED") or (state == "ACTIVE" and health == PREEMPTED):
        why = queued.error if queued and queued.error else f"the queued resource is {state}"
        plan.steps.append(Step("delete-queued", why if state == "FAILED" else ""))
        plan.state, plan.detail = "recreating", f"deleting the {state} queued resource (it holds quota)"
        return plan
    if state == "ACTIVE" and health == UP:
        _created(record)
        record.queue_asked = None
        return None
    plan.state, plan.detail = "queued", f"queued resource {state}"
    return plan


def _refused_or_waiting(record: MachineRecord, now: float, spec_key: str, plan: MachinePlan) -> MachinePlan | None:
    """The plan that holds a create back (refused for this spec, or backing off); None: go ahead."""
    refused = record.refused
    if refused and refused.spec_key == spec_key:
        plan.state = "refused"
        plan.detail = (f"create refused: {refused.message}; fix machines.json, or run "
                       "`jobtpu tpu apply` to ask again")
        return plan
    record.refused = None
    if record.next_try is not None and record.next_try > now:
        wait = int(record.next_try - now)
        plan.state = "backoff"
        plan.detail = f"create failed ({record.last_error or 'error'}); retry in {wait}s"
        return plan
    return None


def _plan_recreate(record: MachineRecord, node: NodeInfo | None, now: float, spec_key: str,
                   plan: MachinePlan) -> MachinePlan:
    blocked = _refused_or_waiting(record, now, spec_key, plan)
    if blocked is not None:
        return blocked
    if node is not None and node.state not in ("CREATING", "DELETING"):
        plan.steps.append(Step("delete"))
        plan.state, plan.detail = "recreating", "deleting the old node"
    elif node is None:
        plan.steps.append(Step("create"))
        plan.state, plan.detail = "recreating", "creating the node"
    else:
        plan.state, plan.detail = "recreating", f"waiting: the node is {node.state}"
    return plan


def _not_up(record: MachineRecord, node: NodeInfo | None, health: str, why: str, now: float,
            plan: MachinePlan) -> MachinePlan:
    """A node that is not ready. A transient state is waited on, and `machines` says for how long;
    past TRANSIENT_LIMIT it says the node looks stuck and how to recreate it (jobtpu does not
    delete a node on its own for being slow)."""
    from jobtpu.tpu.api import DOWN, PREEMPTED, TRANSIENT, TRANSIENT_LIMIT

    plan.state = {PREEMPTED: "preempted", DOWN: "down"}.get(health, "transient")
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
        plan.state = "stuck"
        plan.detail += "; it looks stuck: `jobtpu tpu reapply` recreates it"
    return plan


def _create_finished(record: MachineRecord, op: OpInfo, now: float, first_backoff: float, spec_key: str,
                     zones: tuple[str, ...]) -> None:
    record.create_sent = None
    if not op.error_code:
        _created(record)
    elif op.refused:
        refuse(record, op.error_message, spec_key)
    else:  # capacity (code 8, or 5 for a spot reservation) and anything else: back off and ask again
        create_failed(record, op.error_message, now, first_backoff)
        if op.capacity:
            capacity_failed(record, zones, now)


def _created(record: MachineRecord) -> None:
    record.failures, record.next_try, record.last_error = 0, None, None
    record.want_recreate, record.zone_capacity_failures = False, 0
    record.create_sent = None
    record.refused = None


def refuse(record: MachineRecord, message: str, spec_key: str) -> None:
    """A create the API refused as wrong (400, 403, 404): not asked again for the same spec."""
    record.refused = Refused(short(message), spec_key)
    record.last_error = short(message)


def short(message: str, limit: int = 200) -> str:
    line = " ".join(message.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def capacity_failed(record: MachineRecord, zones: tuple[str, ...], now: float, tries: int = ZONE_TRIES,
                    what: str = "capacity errors") -> None:
    """After `tries` capacity errors in a row in one zone, ask in the machine's next zone at once."""
    record.zone_capacity_failures += 1
    here = record.zone
    if len(zones) < 2 or record.zone_capacity_failures < tries:
        return
    following = zones[(zones.index(here) + 1) % len(zones)] if here in zones else zones[1]
    record.zone, record.zone_capacity_failures, record.failures, record.next_try = following, 0, 0, now
    record.moved = f"moved from {here} to {following} after {tries} {what}"


def spec_key(machine: Machine) -> str:
    """What machines.json asks of this node; a change to it lifts a refusal."""
    text = json.dumps([machine.zones, machine.node, machine.node_overrides], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---- the I/O around it ---------------------------------------------------------------------------

def observe_tpus(p: Session, seen: Observation) -> list[MachineWork]:
    """One listing per zone, one call per operation in flight, then each machine's plan: its steps
    recorded as intents (a dry run only says them), carried out later by `carry_out`. Fills the
    machines' views and worker addresses."""
    from jobtpu.tpu.api import PREEMPTED, health_of

    # Each machine in the zone it is in now (capacity errors may have moved it from its first).
    tpus = [m.in_zone(p.state.machine(m.name).zone) for m in p.fleet.machines.values() if m.is_tpu]
    if not tpus:
        return []
    api = p.tpu_api()
    zones = sorted({str(m.zone) for m in tpus})

    queue_zones = {str(m.zone) for m in tpus if m.queued_resource}

    def listing(zone: str) -> tuple[str, Any]:
        """The zone's nodes, and its queued resources when a machine there uses one."""
        try:
            nodes = api.list_nodes(zone)
            return zone, (nodes, api.list_queued(zone) if zone in queue_zones else {})
        except RemoteError as e:
            return zone, e

    nodes_by_zone = dict(parallel(listing, zones))
    _say_credentials(p, nodes_by_zone)
    planned: list[MachineWork] = []
    for machine in tpus:
        view = seen.view(machine.name)
        record = p.state.machine(machine.name)
        listed = nodes_by_zone[str(machine.zone)]
        if isinstance(listed, RemoteError):
            _not_listed(p, machine, record, view, listed)
            continue
        record.api_error = None
        record.zone = machine.zone
        node = listed[0].get(str(machine.node))
        queued: QueuedInfo | None | Literal[False] = (
            listed[1].get(str(machine.node)) if machine.queued_resource else False)
        p.nodes[machine.name] = node
        op = None
        if record.operation:
            try:
                op = api.operation(record.operation.name)
            except RemoteError:
                op = None
        leftover = list(record.steps or [])  # saved by a pass that died before carrying them out
        plan = plan_machine(record, node, op, seen.now, p.fleet.gcp.get("recreate_backoff", BACKOFF_FIRST),
                            spec_key(machine), machine.zones, queued)
        _resume_leftovers(leftover, plan)
        if node is not None and node.spec:
            record.spec_zone = machine.zone
        machine = machine.in_zone(record.zone)  # a capacity error may have moved it just now
        addresses = node.addresses(machine.use_external_ip) if node else []
        record.addresses, record.workers = addresses, len(addresses)
        p.addresses[machine.name] = addresses
        view.n_workers = len(addresses)
        view.preempted = health_of(node.state if node else None)[0] == PREEMPTED
        if node is not None and node.state == "READY" and plan.state in ("up", "setting up"):
            if not addresses:
                _hold(plan, "no address", no_address_reason(machine, node))
            elif machine.host_key_policy == "strict" and record.host_keys_for != node.create_time:
                _read_host_keys(api, machine, record, node, plan, len(addresses))
        planned.append(MachineWork(machine, record, plan))
    for work in planned:
        if p.dry_run:
            p.notes.extend(f"would {step.kind} {work.machine.name}" for step in work.plan.steps)
        else:
            intend(work, seen.now)
        _show(work, seen.view(work.machine.name), setting_up=not p.dry_run and work.has("setup"))
    return planned


# Steps the listing cannot tell were done: their cause (a new incarnation) was recorded with the
# intent, so planning again would not ask for them. Harmless to do twice, so a leftover one is done.
REDONE_FROM_LEFTOVERS = ("forget-keys",)


def _resume_leftovers(leftover: list[str], plan: MachinePlan) -> None:
    """Put back the leftover steps planning cannot find again (delete, create and setup it finds
    again from what the API lists and the record says, or sees they were done)."""
    for kind in REDONE_FROM_LEFTOVERS:
        if kind in leftover and all(step.kind != kind for step in plan.steps):
            plan.steps.insert(0, Step(kind))


def _show(work: MachineWork, view: Any, setting_up: bool) -> None:
    """What the pass's decisions see of the machine. One whose setup runs in this pass may be given
    jobs: their launches wait for the setup, and go back to the queue if it does not finish."""
    record, plan = work.record, work.plan
    record.state, record.detail = plan.state, plan.detail
    view.ready = plan.state == "up" or setting_up
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
    if work.has("create") or work.has("create-queued"):
        record.create_sent = now
    if work.has("create-queued"):
        record.queue_asked = now


def carry_out_all(p: Session, works: list[MachineWork], now: float) -> None:
    """Every machine's saved steps; machines side by side (a setup may wait up to timing's setup_wait)."""
    if works:
        api = p.tpu_api()
        parallel(lambda work: carry_out(p, api, work, now), works)


def _say_credentials(p: Session, nodes_by_zone: dict[str, Any]) -> None:
    """A credentials failure costs the pass one line, however many zones and machines it stops;
    every other machine is still served."""
    from jobtpu.tpu.api import CredentialsFailed

    failure = next((e for e in nodes_by_zone.values() if isinstance(e, CredentialsFailed)), None)
    if failure is not None:
        hint = f" (hint: {failure.hint})" if failure.hint else ""  # a credentials file's line says what to do itself
        p.notes.append(f"jobtpu: {failure.message}; TPU machines wait{hint}")


def _not_listed(p: Session, machine: Machine, record: MachineRecord, view: Any, error: RemoteError) -> None:
    """The zone could not be listed: nothing is known of the node this pass, nothing runs there."""
    from jobtpu.tpu.api import CredentialsFailed

    view.ready, view.reachable, view.error = False, False, error.message
    if isinstance(error, CredentialsFailed):
        record.api_error = error.message  # `machines` shows it; the pass said it once already
    else:
        record.state, record.detail = "unknown", error.message
    view.n_workers = len(record.addresses or [])
    p.addresses[machine.name] = list(record.addresses or [])


def _hold(plan: MachinePlan, state: str, detail: str) -> None:
    """Nothing is launched or set up on the node this pass: it is not usable yet."""
    plan.steps = [s for s in plan.steps if s.kind != "setup"]
    plan.state, plan.detail = state, detail


def no_address_reason(machine: Machine, node: NodeInfo) -> str:
    if machine.use_external_ip and node.internal:
        return ("the workers have no external IP (networkConfig.enableExternalIps is false) and "
                "use_external_ip is true: set it false to connect inside the VPC")
    return "the TPU API lists no worker address for the node"


def _read_host_keys(api: TpuApi, machine: Machine, record: MachineRecord, node: NodeInfo, plan: MachinePlan,
                    workers: int) -> None:
    """strict: trust exactly the host keys the node publishes through the TPU API, recorded only
    once every worker has published one (a slow guest agent must not lock jobtpu out for good)."""
    try:
        keys = api.host_keys(machine)
    except RemoteError as e:
        _hold(plan, "unknown", f"cannot read the node's host keys: {e.message}")
        return
    missing = [i for i in range(workers) if i >= len(keys) or not keys[i]]
    if missing:
        _hold(plan, "waiting for host keys",
              f"worker(s) {', '.join(map(str, missing))} have not published an SSH host key yet")
        return
    record.host_keys, record.host_keys_for = keys, node.create_time


def carry_out(p: Session, api: TpuApi, work: MachineWork, now: float) -> None:
    """Carry out the machine's saved steps, then record what they came to."""
    machine, record, plan = work.machine, work.record, work.plan
    for step in plan.steps:
        try:
            if step.kind == "delete":
                name = api.delete_node(machine)
                if name is not None:
                    record.operation = Operation("delete", name, now)
                else:  # gone meanwhile: the next pass plans (and saves) the create
                    plan.state, plan.detail = "recreating", "the old node is gone"
            elif step.kind == "create":
                spec = for_zone(record.spec or {}, record.spec_zone, str(machine.zone))
                record.operation = Operation("create", api.create_node(machine, spec), now)
                record.recreations += 1
            elif step.kind == "create-queued":
                spec = for_zone(record.spec or {}, record.spec_zone, str(machine.zone))
                api.create_queued(machine, spec)
                record.recreations += 1
            elif step.kind == "delete-queued":
                api.delete_queued(machine)
                if step.detail:  # it failed (its valid_for ran out, or Google gave up): back off, next zone
                    create_failed(record, step.detail, now, p.fleet.gcp.get("recreate_backoff", BACKOFF_FIRST))
                    capacity_failed(record, machine.zones, now, QUEUED_ZONE_TRIES, "failed queued resource")
            elif step.kind == "forget-keys":
                forget_keys(p, machine, record.addresses or [])
            elif step.kind == "setup":
                run_setup(p, machine, record, plan)
        except RemoteError as e:
            record.last_error = short(e.message, 300)
            if step.kind in ("create", "create-queued"):
                _create_refused(p, machine, record, plan, e, now)
            else:
                plan.detail = e.message
    record.steps = None
    record.state, record.detail = plan.state, plan.detail


def _create_refused(p: Session, machine: Machine, record: MachineRecord, plan: MachinePlan, error: RemoteError,
                    now: float) -> None:
    """What a failed create call means: wrong (not asked again), capacity (back off), no
    credentials (nothing was sent), or unsure (timeout, 5xx: Google may have created it)."""
    from jobtpu.tpu.api import ApiCapacity, ApiRefused, CredentialsFailed

    if isinstance(error, ApiRefused | ApiCapacity | CredentialsFailed):
        record.create_sent = record.queue_asked = None  # a definite answer: no node was made
    if isinstance(error, ApiRefused):
        refuse(record, error.message, spec_key(machine))
        plan.state, plan.detail = "refused", f"create refused: {short(error.message)}"
    elif isinstance(error, CredentialsFailed):
        plan.state, plan.detail = "unknown", error.message
    else:
        create_failed(record, error.message, now, p.fleet.gcp.get("recreate_backoff", BACKOFF_FIRST))
        plan.state, plan.detail = "backoff", f"create failed: {short(error.message)}"
        if isinstance(error, ApiCapacity):
            capacity_failed(record, machine.zones, now)


def create_failed(record: MachineRecord, message: str, now: float, first_backoff: float) -> None:
    """A create was refused (at once, or by its operation): count it and wait before the next one."""
    record.failures += 1
    record.next_try = now + backoff(record.failures, first_backoff)
    record.last_error = short(message, 300)


def forget_keys(p: Session, machine: Machine, addresses: list[str]) -> None:
    """A recreated node has new host keys: forget the old ones rather than trust or refuse them."""
    if machine.host_key_policy == "off" or not p.home.known_hosts.exists():
        return
    from jobtpu.transport.ssh import forget_host

    for addr in addresses:
        forget_host(p.home, addr, machine.port)


def run_setup(p: Session, machine: Machine, record: MachineRecord, plan: MachinePlan) -> None:
    """Start the setup commands detached on every worker (once per incarnation), wait a little."""

    incarnation = str(record.incarnation or "")
    setup = record.setup or Setup("running")
    if not machine.setup:
        record.setup = Setup("done", incarnation=incarnation)
        plan.state, plan.detail = "up", "ready (no setup commands)"
        return
    retry = setup.status == "failed"
    if retry:
        setup = Setup("running", tries=setup.tries)
    tag = scripts.setup_tag(incarnation)
    eps = p.endpoints(machine)
    # A pass waits a while for a setup, so a quick one launches in that pass.
    deadline = time.monotonic() + timing.current().setup_wait

    def one(ep: Any) -> str:
        try:
            out = p.run_on(machine, ep, scripts.setup_script(machine.root, tag, ep.index, machine.setup, retry))
            while scripts.setup_outcome(out) == "running" and time.monotonic() < deadline:
                time.sleep(timing.current().setup_poll)
                out = p.run_on(machine, ep, scripts.setup_script(machine.root, tag, ep.index, machine.setup))
            return out
        except RemoteError as e:
            return f"SETUP error {e.message}"

    results = parallel(one, eps)
    words = [scripts.setup_outcome(r) for r in results]
    if all(w == "done" for w in words):
        record.setup = Setup("done", incarnation=incarnation)
        plan.state, plan.detail = "up", "ready"
    elif any(w in ("failed", "error") for w in words):
        bad = next(i for i, w in enumerate(words) if w in ("failed", "error"))
        setup.status, setup.tries, setup.error = "failed", setup.tries + 1, results[bad].strip()[-300:]
        record.setup = setup
        plan.state, plan.detail = "setup failed", f"worker {bad}: {results[bad].strip()[-200:]}"
    else:
        record.setup = setup
        plan.state, plan.detail = "setting up", "setup commands running"


def request_recreate(p: Session, machine: Machine, now: float) -> MachineWork | None:
    """A job (or `jobtpu tpu apply`) wants this TPU back: plan the first step (delete, or create) and
    record it as an intent; the caller saves, then carries it out. Later passes go on from there.
    None when it is already on its way back."""
    record = p.state.machine(machine.name)
    if record.want_recreate or record.operation:
        return None
    machine = machine.in_zone(record.zone)
    record.want_recreate = True
    queued: Any = False
    if machine.queued_resource:  # as the last listing saw it
        from jobtpu.tpu.api import QueuedInfo

        queued = QueuedInfo(str(machine.node), record.queued_state) if record.queued_state else None
    plan = plan_machine(record, p.nodes.get(machine.name), None, now, spec_key=spec_key(machine), zones=machine.zones,
                        queued=queued)
    work = MachineWork(machine, record, plan)
    intend(work, now)
    record.state, record.detail = plan.state, plan.detail
    return work


def want_back(record: MachineRecord) -> None:
    """After a stop whose rule recreates the TPU: the next pass plans (and saves) the first step."""
    if not (record.want_recreate or record.operation):
        record.want_recreate = True

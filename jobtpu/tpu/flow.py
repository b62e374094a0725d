"""Bringing TPU machines up and back, the I/O side: what the TPU API says of each machine (one
listing per zone), and carrying out the steps decide/tpu_plan.py decided, each returning a plain report
whose meaning decide/tpu_outcomes.py decides.

A pass observes (`observe_tpu_nodes`: gathers, writes no record), plans each machine's steps and
records them as intents (`plan_tpus`), saves, and only then carries them out (`carry_out_all`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from jobtpu import timing
from jobtpu.decide.tpu_group import decide_group
from jobtpu.decide.tpu_outcomes import BACKOFF_FIRST, Step, StepReport, settle, spec_key
from jobtpu.decide.tpu_plan import (
    MachineWork,
    Sighting,
    credentials_line,
    decide_machine,
    intend,
    not_listed,
    plan_machine,
    show,
    wants_host_keys,
)
from jobtpu.errors import RemoteError
from jobtpu.remote import scripts
from jobtpu.schema import worker_protocol as protocol
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.nodespec import for_zone
from jobtpu.schema.records import SetupStatus, StepKind
from jobtpu.schema.tpu_answers import QueuedInfo
from jobtpu.tpu.api import TpuApi
from jobtpu.tpu.runtime import tpu_runtime

if TYPE_CHECKING:
    from jobtpu.decide.core import Observation
    from jobtpu.transport.base import WorkerAccess


def first_backoff(p: WorkerAccess) -> float:
    return float(p.fleet.gcp.get("recreate_backoff", BACKOFF_FIRST))


# ---- observe ----------------------------------------------------------------------------------------

def observe_tpu_nodes(p: WorkerAccess, now: float) -> list[Sighting]:
    """One listing per zone (its queued resources too when a machine there uses one), then for each
    machine the operation its record follows and, for strict host keys, the keys its node publishes.
    Each machine is looked for in the zone it is in now (capacity errors may have moved it)."""
    tpus = [m.in_zone(p.state.machine(_driver_name(p, m)).zone) for m in p.fleet.machines.values() if m.cloud_node]
    if not tpus:
        return []
    api = tpu_runtime(p).api()
    queue_zones = {str(m.zone) for m in tpus if m.queued_resource}

    def listing(zone: str) -> tuple[str, Any]:
        try:
            nodes = api.list_nodes(zone)
            return zone, (nodes, api.list_queued(zone) if zone in queue_zones else {})
        except RemoteError as e:
            return zone, e

    listed = dict(p.parallel(listing, sorted({str(m.zone) for m in tpus})))

    def sighting(machine: Machine) -> Sighting:
        return _sighting(p, api, machine, listed[str(machine.zone)], now)

    # Machines that ask the API more (an operation, host keys) side by side; a quiet pass starts no threads.
    asking = [m for m in tpus if p.state.machine(m.name).operation or m.host_key_policy == "strict"]
    asked = dict(zip([m.name for m in asking], p.parallel(sighting, asking), strict=True))
    return [asked[m.name] if m.name in asked else sighting(m) for m in tpus]


def _sighting(p: WorkerAccess, api: TpuApi, machine: Machine, listed: Any, now: float) -> Sighting:
    if isinstance(listed, RemoteError):
        return Sighting(machine, listing_error=listed)
    record = p.state.machine(machine.name)
    node = listed[0].get(str(machine.node))
    queued: QueuedInfo | None | Literal[False] = (listed[1].get(machine.queued_resource_id) if machine.queued_resource
                                                  else False)
    op = None
    if record.operation:
        try:
            op = api.operation(record.operation.name)
        except RemoteError:
            op = None
    seen = Sighting(machine, None, node, op, queued)
    if not wants_host_keys(seen, record, now, first_backoff(p)):
        return seen
    try:
        return msgspec.structs.replace(seen, host_keys=api.host_keys(machine), host_keys_read=True)
    except RemoteError as e:
        return msgspec.structs.replace(seen, host_keys_error=e.message, host_keys_read=True)


# ---- decide and record the intents ------------------------------------------------------------------

def plan_tpus(p: WorkerAccess, seen: Observation, sightings: list[Sighting]) -> list[MachineWork]:
    """Each machine's plan: its steps recorded as intents (a dry run only says them), carried out
    later by `carry_out`. Fills the machines' views and worker addresses."""
    line = credentials_line([s.listing_error for s in sightings if s.listing_error is not None])
    if line is not None:
        p.notes.append(line)
    tpus = tpu_runtime(p)
    planned: list[MachineWork] = []
    groups = group_works(p, [s for s in sightings if s.listing_error is None], seen.now)
    for sighting in sightings:
        name = sighting.machine.name
        record = p.state.machine(name)
        if sighting.listing_error is not None:
            tpus.addresses[name] = not_listed(record, seen.view(name), sighting.listing_error)
            continue
        work = groups[name] if name in groups else decide_machine(sighting, record, seen.now, first_backoff(p))
        tpus.saw(name, sighting.node, work.addresses)
        if p.dry_run:
            p.notes.extend(f"would {step.kind} {name}" for step in work.plan.steps)
        else:
            intend(work, seen.now)
        show(work, seen.view(name), setting_up=not p.dry_run and work.has(StepKind.SETUP))
        planned.append(work)
    return planned


def _driver_name(p: WorkerAccess, machine: Machine) -> str:
    """The machine whose record says which zone it is in: a slice's is its group's slice 0 (whose
    record drives the queued resource of every slice, decide/tpu_group.py)."""
    return p.fleet.slices_of(machine.slice_group)[0].name if machine.slice_group else machine.name


def group_works(p: WorkerAccess, sightings: list[Sighting], now: float) -> dict[str, MachineWork]:
    """The work of every slice of a group all of whose zone was listed, planned together."""
    by_group: dict[str, list[Sighting]] = {}
    for sighting in sightings:
        if sighting.machine.slice_group:
            by_group.setdefault(sighting.machine.slice_group, []).append(sighting)
    works: dict[str, MachineWork] = {}
    for group, seen in by_group.items():
        if len(seen) != len(p.fleet.slices_of(group)):
            continue  # cannot happen: the slices are looked for in one zone
        seen.sort(key=lambda s: s.machine.slice_index or 0)
        records = [p.state.machine(s.machine.name) for s in seen]
        names = {s.machine.name for s in seen}
        busy = tuple(j.id for j in p.state.jobs if j.active and not names.isdisjoint(j.holds))  # a gang on any slice
        works.update((w.machine.name, w) for w in decide_group(seen, records, now, first_backoff(p), busy))
    return works


def observe_tpus(p: WorkerAccess, seen: Observation) -> list[MachineWork]:
    """The TPU part of a pass's observing: node states gathered, then each machine's steps planned
    and recorded as intents, to be saved before `carry_out_all`."""
    return plan_tpus(p, seen, observe_tpu_nodes(p, seen.now))


def request_recreate(p: WorkerAccess, machine: Machine, now: float) -> MachineWork | None:
    """A job (or `jobtpu tpu apply`) wants this TPU back: plan the first step (delete, or create) and
    record it as an intent; the caller saves, then carries it out. Later passes go on from there.
    None when it is already on its way back."""
    record = p.state.machine(machine.name)
    if machine.slice_group:  # the group comes back as one: the next pass plans it (decide/tpu_group.py)
        for member in p.fleet.slices_of(machine.slice_group):
            wanted = p.state.machine(member.name)
            wanted.want_recreate, wanted.kept_down = True, False
        return None
    if record.want_recreate or record.operation:
        return None
    machine = machine.in_zone(record.zone)
    record.want_recreate = True
    queued: Any = False
    if machine.queued_resource:  # as the last listing saw it
        queued = QueuedInfo(str(machine.node), record.queued_state) if record.queued_state else None
    plan = plan_machine(record, tpu_runtime(p).nodes.get(machine.name), None, now, spec_key=spec_key(machine), zones=machine.zones,
                        queued=queued)
    work = MachineWork(machine, record, plan)
    intend(work, now)
    record.state, record.detail = plan.state, plan.detail
    return work


# ---- act --------------------------------------------------------------------------------------------

def carry_out_all(p: WorkerAccess, works: list[MachineWork], now: float) -> None:
    """Every machine's saved steps; machines side by side (a setup may wait up to timing's setup_wait)."""
    if works:
        api = tpu_runtime(p).api()
        p.parallel(lambda work: carry_out(p, api, work, now), works)


def carry_out(p: WorkerAccess, api: TpuApi, work: MachineWork, now: float) -> None:
    """Carry out the machine's saved steps, then record what they came to."""
    reports = [carry_out_step(p, api, work, step) for step in work.plan.steps]
    settle(work.machine, work.record, work.plan, reports, now, first_backoff(p))


def carry_out_step(p: WorkerAccess, api: TpuApi, work: MachineWork, step: Step) -> StepReport:
    """One step's call; what came back, undecided."""
    machine, record = work.machine, work.record
    calls: dict[StepKind, Callable[[], StepReport]] = {
        StepKind.DELETE: lambda: StepReport(step, operation=api.delete_node(machine)),
        StepKind.CREATE: lambda: StepReport(step, operation=api.create_node(
            machine, for_zone(record.spec or {}, record.spec_zone, str(machine.zone)))),
        StepKind.CREATE_QUEUED: lambda: StepReport(step, operation=api.create_queued(
            machine, for_zone(record.spec or {}, record.spec_zone, str(machine.zone)))),
        StepKind.DELETE_QUEUED: lambda: StepReport(step, operation=api.delete_queued(machine)),
        StepKind.FORGET_KEYS: lambda: forget_keys(p, machine, record.addresses or [], step),
        StepKind.SETUP: lambda: run_setup(p, work, step),
    }
    try:
        return calls[step.kind]()
    except RemoteError as e:
        return StepReport(step, error=e)


def forget_keys(p: WorkerAccess, machine: Machine, addresses: list[str], step: Step) -> StepReport:
    """A recreated node has new host keys: forget the old ones rather than trust or refuse them."""
    if machine.host_key_policy != "off" and p.home.known_hosts.exists():
        from jobtpu.transport.hostkeys import forget_host

        for addr in addresses:
            forget_host(p.home, addr, machine.port)
    return StepReport(step)


def run_setup(p: WorkerAccess, work: MachineWork, step: Step) -> StepReport:
    """Start the setup commands detached on every worker (once per incarnation), wait a little;
    each worker's last output (None: there are no setup commands)."""
    machine, record = work.machine, work.record
    if not machine.setup:
        return StepReport(step, setup_outputs=None)
    retry = record.setup is not None and record.setup.status == SetupStatus.FAILED
    tag = scripts.setup_tag(str(record.incarnation or ""))
    # A pass waits a while for a setup, so a quick one launches in that pass.
    deadline = time.monotonic() + timing.current().setup_wait

    def one(ep: Any) -> str:
        try:
            out = p.run_on(machine, ep, scripts.setup_script(machine.root, tag, ep.index, machine.setup, retry))
            while protocol.setup_outcome(out) == "running" and time.monotonic() < deadline:
                time.sleep(timing.current().setup_poll)
                out = p.run_on(machine, ep, scripts.setup_script(machine.root, tag, ep.index, machine.setup))
            return out
        except RemoteError as e:
            return f"SETUP error {e.message}"

    return StepReport(step, setup_outputs=p.parallel(one, p.endpoints(machine)))

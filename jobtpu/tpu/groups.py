"""`jobtpu tpu describe|status|apply|reapply|delete NAME` for a machines.json entry of several slices
(named as the entry or as one of its slices): every slice at once, through their one queued resource
(docs/reference/commands.md §2.11). As a pass does, the intent is saved (`commit`) before the API is
called, and later passes carry the recreation on (decide/tpu_group.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobtpu.decide.tpu_group import decide_group
from jobtpu.decide.tpu_plan import BY_HAND, Sighting, intend
from jobtpu.errors import JobtpuError
from jobtpu.schema.records import MachineState, StepKind
from jobtpu.tpu.flow import carry_out, first_backoff
from jobtpu.tpu.runtime import tpu_runtime

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Machine
    from jobtpu.transport.base import WorkerAccess


def group_operation(p: WorkerAccess, op: str, group: str, commit: Callable[[], None]) -> dict[str, Any]:
    """One operation on every slice of `group`; what to show (also the --json document)."""
    lead = p.fleet.slices_of(group)[0]
    slices = [m.in_zone(p.state.machine(lead.name).zone) for m in p.fleet.slices_of(group)]
    lead = slices[0]
    records = [p.state.machine(m.name) for m in slices]
    api = tpu_runtime(p).api()
    zone = str(lead.zone)
    queued = api.list_queued(zone).get(lead.queued_resource_id)
    listed = api.list_nodes(zone)
    nodes = [listed.get(str(m.node)) for m in slices]
    for machine, node in zip(slices, nodes, strict=True):
        tpu_runtime(p).saw(machine.name, node)
    busy = [j.id for j in p.state.jobs if j.machine in {m.name for m in slices} and j.active]
    if op in ("reapply", "delete") and busy:
        raise JobtpuError(f"{group} runs job(s) {', '.join(map(str, busy))}",
                          hint=f"`jobtpu kill {' '.join(map(str, busy))}` first")
    exists = queued is not None or any(nodes)
    now = time.time()
    if op == "apply" and exists:
        raise JobtpuError(f"{group}: queued resource {lead.queued_resource_id} already exists "
                          f"({queued.state if queued else 'nodes without it'})",
                          hint=f"`jobtpu tpu reapply {group}` deletes and recreates every slice")
    if op == "delete" and not exists:
        raise JobtpuError(f"{group}: queued resource {lead.queued_resource_id} does not exist")
    if op in ("apply", "reapply"):
        for record in records:
            record.refused, record.next_try = None, None  # the user asks again: a refused create is tried again
            record.want_recreate, record.kept_down = True, False
        if op == "reapply" and queued is not None:
            _delete(p, slices, [None] * len(slices), commit)  # the next passes ask for it again
        else:
            _recreate(p, slices, [Sighting(m, None, n, None, queued) for m, n in zip(slices, nodes, strict=True)], now,
                      commit)
    elif op == "delete":
        for record in records:
            record.want_recreate, record.kept_down = False, True
            record.state, record.detail = MachineState.DELETING, BY_HAND
        _delete(p, slices, nodes if queued is None else [None] * len(slices), commit)
    return {
        "machine": group, "slices": [m.name for m in slices], "nodes": [m.node for m in slices],
        "queued_resource": lead.queued_resource_id, "zone": zone, "accelerator": lead.accelerator,
        "exists": exists, "tpu_state": queued.state if queued else None,
        "node_states": [n.state if n else None for n in nodes],
        "jobtpu_state": records[0].state, "detail": records[0].detail,
        "acts_on": f"every slice of {group} ({len(slices)} slices, one queued resource)",
        "running_jobs": busy,
    }


def _recreate(p: WorkerAccess, slices: list[Machine], sightings: list[Sighting], now: float,
              commit: Callable[[], None]) -> None:
    """Plan the group's first step as a pass would, save it, then carry it out."""
    records = [p.state.machine(m.name) for m in slices]
    works = decide_group(sightings, records, now, first_backoff(p))
    for work in works:
        intend(work, now)
        work.record.state, work.record.detail = work.plan.state, work.plan.detail
    commit()
    api = tpu_runtime(p).api()
    for work in works:
        carry_out(p, api, work, now)


def _delete(p: WorkerAccess, slices: list[Machine], strays: list[Any], commit: Callable[[], None]) -> None:
    """The group's queued resource deleted (force: its nodes go with it); a node left without one
    deleted on its own. The intent is on disk before the API is called."""
    records = [p.state.machine(m.name) for m in slices]
    records[0].steps = [StepKind.DELETE_QUEUED, StepKind.DELETE]  # as delete_by_hand: a crash leaves it to do
    for record, node in zip(records[1:], strays[1:], strict=True):
        if node is not None:
            record.steps = [StepKind.DELETE]
    commit()
    api = tpu_runtime(p).api()
    api.delete_queued(slices[0])
    for machine, record, node in zip(slices, records, strays, strict=True):
        if node is not None:
            api.delete_node(machine)  # a node made without the queued resource
        record.steps = None

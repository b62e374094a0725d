"""`jobtpu tpu describe|status|apply|reapply|delete NAME` on a session that holds the pass lock: the
node as the TPU API describes it, and the operations that bring it back or delete it, started and
recorded in state.json as a pass records its steps (the intent saved by `commit` before the API is
called), then followed by later passes (docs/reference/commands.md §2.11)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobtpu.errors import JobtpuError
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.nodespec import provisioning
from jobtpu.schema.records import Operation, StepKind
from jobtpu.tpu.flow import carry_out, request_recreate
from jobtpu.tpu.runtime import tpu_runtime

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Machine
    from jobtpu.transport.base import WorkerAccess


def require_tpu(machine: Machine) -> None:
    """The one line for a TPU's act on a machine that is no TPU (also the fleet page's preview)."""
    if not machine.cloud_node:
        raise JobtpuError(f"{machine.name} is a {machine.kind} machine, not a TPU")


def node_operation(p: WorkerAccess, op: str, name: str, commit: Callable[[], None]) -> dict[str, Any]:
    """Run one operation; what to show (also the --json document)."""
    group = p.fleet.slices_of(name)
    machine = group[0] if group else p.fleet.resolve(name)
    if machine.slice_group and (group or op in ("apply", "reapply", "delete")):
        from jobtpu.tpu.groups import group_operation  # a slice is made and deleted with every other

        return group_operation(p, op, machine.slice_group, commit)
    name = machine.name  # an alias or the node's name, as machines.json names the machine
    require_tpu(machine)
    record = p.state.machine(name)
    machine = machine.in_zone(record.zone)  # the zone it is in now
    tpus = tpu_runtime(p)
    api = tpus.api()
    node = api.get_node(str(machine.zone), str(machine.node))
    tpus.saw(name, node)
    busy = [j.id for j in p.state.jobs if name in j.holds and j.active]
    if op in ("reapply", "delete") and busy:
        raise JobtpuError(f"{name} runs job(s) {', '.join(map(str, busy))}",
                          hint=f"`jobtpu kill {' '.join(map(str, busy))}` first")
    now = time.time()
    if op in ("apply", "reapply"):
        record.refused = None  # the user asks again: a refused create is tried once more
    if op == "apply":
        if node is not None:
            raise JobtpuError(f"{name}: node {machine.node} already exists ({node.state})",
                              hint=f"`jobtpu tpu reapply {name}` deletes and recreates it")
        _recreate(p, machine, now, commit)
    elif op == "reapply":
        record.next_try = None
        _recreate(p, machine, now, commit)
    elif op == "delete":
        if node is None:
            raise JobtpuError(f"{name}: node {machine.node} does not exist")
        from jobtpu.decide.tpu_plan import delete_by_hand

        steps = delete_by_hand(record, bool(machine.queued_resource))
        commit()  # the intent is on disk before the API is called, as a pass saves its steps
        if StepKind.DELETE_QUEUED in steps:
            api.delete_queued(machine)
        operation = api.delete_node(machine)
        if operation is not None:  # None: the node went away by itself meanwhile
            record.operation = Operation("delete", operation, now)
        record.steps = None
    # describe / status only read: the next pass records what the API says.
    return {
        "machine": name, "node": machine.node, "zone": machine.zone, "accelerator": machine.accelerator,
        "preemptible": machine.preemptible, "provisioning": provisioning(machine, record), "exists": node is not None,
        "tpu_state": node.state if node else None, "health": node.health if node else None,
        "health_description": node.health_description if node else None,
        "addresses": node.addresses(machine.use_external_ip) if node else [],
        "runtime_version": machine.runtime_version, "created": node.create_time if node else None,
        "jobtpu_state": record.state, "detail": record.detail,
        "operation": msgspec.to_builtins(record.operation), "recreations": record.recreations,
        "failures": record.failures, "running_jobs": busy,
        "refused": record.refused.message if record.refused else None, "zones": list(machine.zones),
        "queued_resource": record.queued_state if machine.queued_resource else None,
        "recorded_spec": record.spec,
    }


def _recreate(p: WorkerAccess, machine: Machine, now: float, commit: Callable[[], None]) -> None:
    """Plan the first step of bringing the node back, save it, then carry it out (as a pass does)."""
    work = request_recreate(p, machine, now)
    if work is not None:
        commit()
        carry_out(p, tpu_runtime(p).api(), work, now)



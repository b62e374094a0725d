"""`jobtpu doctor NAME` on a TPU machine, its driver's part (fleet/doctor.py asks it through
fleet/drivers.py): the node as the TPU API describes it, whether setup completed on it, and on every
worker the TPU device free of stale holders."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobtpu.errors import RemoteError
from jobtpu.remote.scripts import parse_tpu_doctor, tpu_doctor_script
from jobtpu.schema.fleet import Machine
from jobtpu.schema.records import SetupStatus
from jobtpu.schema.tpu_answers import health_of
from jobtpu.tpu.runtime import tpu_runtime
from jobtpu.transport.base import Endpoint

if TYPE_CHECKING:
    from jobtpu.transport.base import WorkerAccess

Line = tuple[str, bool]  # (text, is a problem), as fleet/doctor.py reports it


def node_check(p: WorkerAccess, machine: Machine) -> list[Line]:
    """The node's state from the TPU API and whether setup completed on it. Its workers' addresses,
    when the API gave them, are where this session reaches them."""
    lines, live = _node_check(p, machine)
    if live is not None:
        tpu_runtime(p).addresses[machine.name] = live
    return lines


def _node_check(p: WorkerAccess, machine: Machine) -> tuple[list[Line], list[str] | None]:
    record = p.state.machine(machine.name)
    machine = machine.in_zone(record.zone)  # capacity errors may have moved it to a later zone
    try:
        node = tpu_runtime(p).api().get_node(str(machine.zone), str(machine.node))
    except RemoteError as e:
        return [(f"{machine.name}: problem: {e.message}; check gcp settings and credentials", True)], None
    group = _group_lines(p, machine)
    if node is None:
        return [*group, (f"{machine.name}: problem: node {machine.node} does not exist in {machine.zone}; "
                         f"`jobtpu tpu apply {machine.slice_group or machine.name}` creates it"
                         + (" with every other slice" if machine.slice_group else ""), True)], []
    health, why = health_of(node.state)
    out = [*group, (f"{machine.name}: ok: node {node.state}" + (f", {node.health}" if node.health else ""), False)
           if health == "up" else (f"{machine.name}: problem: {why} ({node.state})", True)]
    setup = record.setup
    if machine.setup and (setup is None or setup.status != SetupStatus.DONE or record.incarnation != node.create_time):
        what = (setup.error or setup.status) if setup is not None else "not run"
        out.append((f"{machine.name}: problem: setup has not completed on this node "
                    f"({what}); `jobtpu manage` runs it", True))
    return out, node.addresses(machine.use_external_ip)


def _group_lines(p: WorkerAccess, machine: Machine) -> list[Line]:
    """A slice of an entry of several slices: which, and the state of the queued resource of them all
    (as the last pass saw it)."""
    if not machine.slice_group:
        return []
    state = p.state.machine(machine.name).queued_state
    said = (f"slice {machine.slice_index} of {machine.slices} of {machine.slice_group}: "
            f"queued resource {machine.queued_resource_id} {state or 'not there'}")
    return [(f"{machine.name}: ok: {said}", False) if state == "ACTIVE" else (f"{machine.name}: problem: {said}", True)]


def device_checks(session: WorkerAccess, machine: Machine, eps: list[Endpoint], fix: bool,
                  label_of: Callable[[Machine, Endpoint], str]) -> list[Line]:
    """On every worker: the TPU device free of stale holders and no stale /tmp/libtpu_lockfile
    (--fix stops the holders and removes the file)."""
    return [line for worker in session.parallel(lambda ep: _tpu_worker(session, machine, ep, fix, label_of(machine, ep)), eps)
            for line in worker]


def _tpu_worker(session: WorkerAccess, machine: Machine, ep: Endpoint, fix: bool, label: str) -> list[Line]:
    try:
        with session.connected(machine, ep) as t:
            result = t.run(tpu_doctor_script(machine.root, fix), timeout=machine.connect_timeout + 30)
    except RemoteError as e:
        return [(f"{label}: problem: TPU checks could not run: {e.message}", True)]
    holders, lock = parse_tpu_doctor(result.stdout)
    out: list[Line] = [(f"{label}: problem: process {h.pid} ({h.command}) holds the TPU device and is no job "
                        f"of jobtpu's; `jobtpu doctor {machine.name} --fix` stops it", True)
                       for h in holders if not h.ours]
    if lock and any(h.ours for h in holders):
        out.append((f"{label}: ok: /tmp/libtpu_lockfile belongs to a running job", False))
    elif lock:
        out.append((f"{label}: problem: /tmp/libtpu_lockfile is left over; "
                    f"`jobtpu doctor {machine.name} --fix` removes it", True))
    if not out:
        out.append((f"{label}: ok: TPU device free, no stale lock file", False))
    return out

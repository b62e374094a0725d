"""`jobtpu doctor NAME --accelerator`: does the TPU answer on every worker, and which worker is wrong
(docs/reference/commands.md §2.12). With JAX on the worker: the devices JAX sees against what the accelerator
type has; without it: the device files and the processes holding them."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobtpu.errors import RemoteError
from jobtpu.remote.scripts import AcceleratorFacts, parse_tpu_accelerator, tpu_accelerator_script
from jobtpu.schema.accelerator import accelerator
from jobtpu.schema.fleet import Machine
from jobtpu.tpu.repairs import why_no_restart
from jobtpu.transport.base import Endpoint

if TYPE_CHECKING:
    from jobtpu.transport.base import WorkerAccess

Line = tuple[str, bool]  # (text, is a problem), as doctor.py's

# Where the device files are; tests point it at a folder of stand-ins.
DEVICE_DIR = os.environ.get("JOBTPU_DEVICE_DIR", "/dev")


def expected_devices(name: str | None) -> int | None:
    """The devices JAX sees on the whole node (schema/accelerator.py); None for a type this does not know."""
    found = accelerator(name)
    return found.devices if found is not None else None


def worker_lines(machine: Machine, label: str, facts: AcceleratorFacts, workers: int = 1) -> list[Line]:
    """What one worker's answers say. Pure."""
    name = machine.name
    again = (f"`jobtpu tpu restart {name}` stops and starts the node"
             if why_no_restart(machine.accelerator, workers) is None else
             f"`jobtpu tpu reapply {name}` recreates the node")
    holders = ", ".join(f"{h.pid} ({h.command}{', a job of jobtpu' if h.ours else ''})" for h in facts.holders)
    if facts.holders:  # JAX was not run: it would find the device busy
        stale = [h for h in facts.holders if not h.ours]
        if stale:
            return [(f"{label}: problem: the TPU device is held by process {holders}, no job of jobtpu's; "
                     f"`jobtpu doctor {name} --fix` stops it", True)]
        return [(f"{label}: ok: the TPU device is in use by process {holders}", False)]
    if facts.jax is not None:
        expected = expected_devices(machine.accelerator)
        if facts.jax.startswith("error"):
            return [(f"{label}: problem: JAX cannot use the TPU ({facts.jax.removeprefix('error').strip()}); "
                     f"{again}", True)]
        seen = int(facts.jax) if facts.jax.isdigit() else -1
        if seen <= 0 or (expected is not None and seen != expected):
            want = f"{machine.accelerator} has {expected}" if expected is not None else "it should see some"
            return [(f"{label}: problem: JAX sees {facts.jax} TPU devices where {want}; {again}", True)]
        return [(f"{label}: ok: JAX sees {seen} TPU devices" + (f" ({machine.accelerator})" if expected else ""), False)]
    if not facts.devices:
        return [(f"{label}: problem: no TPU device file ({DEVICE_DIR}/accel*, {DEVICE_DIR}/vfio/N); "
                 f"the TPU is not attached to this worker; {again}", True)]
    shown = ", ".join(facts.devices[:8]) + (" …" if len(facts.devices) > 8 else "")
    return [(f"{label}: ok: {len(facts.devices)} TPU device file{'s' if len(facts.devices) > 1 else ''} "
             f"({shown}), held by no process (no jax on python3 to ask further)", False)]


def accelerator_checks(session: WorkerAccess, machine: Machine, eps: list[Endpoint],
                       label: Callable[[Machine, Endpoint], str]) -> list[Line]:
    def one(ep: Endpoint) -> list[Line]:
        try:
            out = session.run_on(machine, ep, tpu_accelerator_script(machine.root, DEVICE_DIR), timeout=360)
        except RemoteError as e:
            return [(f"{label(machine, ep)}: problem: the accelerator check could not run: {e.message}", True)]
        return worker_lines(machine, label(machine, ep), parse_tpu_accelerator(out), len(eps))

    return [line for lines in session.parallel(one, eps) for line in lines]

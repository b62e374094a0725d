"""machines.json's TPU entries of N slices (docs/reference/machines-json.md §3.3, `slices`): what such
an entry may say, and the N machines it becomes. home/machines.py asks here; pure, no I/O.

An entry `"g": {"kind": "tpu", "node": "n", "slices": 2, ...}` is the machines `g-0` and `g-1`,
whose nodes are `n-0` and `n-1`: the names Cloud TPU gives the nodes of a multislice queued resource
whose `multisliceParams.nodeIdPrefix` is `n`. Each slice is a machine of its own (its workers, its
setup, its record); they come and go together through one queued resource (decide/tpu_group.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobtpu.schema.decode import FileRefused
from jobtpu.schema.fleet import Machine
from jobtpu.schema.machines_file import MachineEntry
from jobtpu.schema.msgspec_lib import UNSET, msgspec


def check_slices(entry: MachineEntry) -> None:
    """The keys an entry of several slices cannot have (its `slices` value is checked by its type, its
    kind by the loader's _check_kind)."""
    if entry.slices is UNSET:
        return
    if entry.queued_resource is False:
        raise FileRefused("'slices' needs a queued resource (Cloud TPU makes the slices together through one): "
                          "drop \"queued_resource\": false")
    if entry.aliases:
        raise FileRefused(f"'aliases' cannot name an entry of {entry.slices} slices: each slice is a machine "
                          "named <name>-0, <name>-1, ...")
    if entry.peer_addresses is not UNSET:
        raise FileRefused("'peer_addresses' cannot be given for an entry of several slices (each slice's "
                          "workers come from the TPU API)")


def queued_of(entry: MachineEntry, queued: dict[str, Any] | None) -> dict[str, Any] | None:
    """The queued resource a machine is provisioned through: the entry's own; for slices without one,
    spot for a spot or preemptible entry, else on demand (a queued resource without a tier)."""
    if entry.slices is UNSET or queued is not None:
        return queued
    return {"tier": "spot" if entry.spot is True or entry.preemptible is True else "best-effort"}


def expand(machine: Machine) -> dict[str, Machine]:
    """The entry's machines, by name: itself, or one per slice, named and noded `-<index>`."""
    count = machine.slices
    if count is UNSET:
        return {machine.name: machine}
    return {f"{machine.name}-{i}": msgspec.structs.replace(
        machine, name=f"{machine.name}-{i}", node=f"{machine.node}-{i}", slice_group=machine.name, slice_index=i)
        for i in range(count)}


def check_names(entry_name: str, new: Mapping[str, Machine], machines: Mapping[str, Machine]) -> None:
    """Each name names one machine or one entry of slices: `tpu apply NAME` takes both."""
    groups = {m.slice_group for m in machines.values() if m.slice_group}
    clash = next((name for name in new if name in machines or name in groups), None)
    if clash is None and entry_name not in new and entry_name in machines:
        clash = entry_name
    if clash is not None:
        raise FileRefused(f"machine {entry_name!r}: the name {clash!r} is taken twice (an entry of N slices "
                          "is the machines <name>-0 … <name>-(N-1)): rename one of them")

"""What each kind of machine does differently, in one place: how a pass finds its workers and
whether it probes them, how a launch and a stop go there, and who judges whether it is reachable.
`driver_for(machine)` is the one dispatch on a machine's kind outside the loader and the core's
pure checks (docs/design.md §5.1)."""

from __future__ import annotations

from typing import ClassVar

from jobtpu.decide import reach
from jobtpu.home.machines import split_host
from jobtpu.schema.fleet import Machine, MachineKind
from jobtpu.schema.records import MachineRecord
from jobtpu.schema.state import State
from jobtpu.transport.base import Endpoint


class Driver:
    """The local machine's, an ssh box's or a TPU VM's way: one instance per kind, no state."""

    kind: ClassVar[MachineKind]
    # Its workers are reached over SSH: their logs are pulled home, rsync copies to them.
    remote: ClassVar[bool] = True
    # A launch runs the job as this process's account here: it needs the job's spec to say so when
    # state.json is not this account's alone (docs/design.md §7).
    runs_as_this_account: ClassVar[bool] = False
    # A stop asks the job's wrapper to stop it (the runner's pass may not own the process) rather
    # than signalling the process itself.
    stops_by_request: ClassVar[bool] = False
    # A launch first frees the accelerator a killed attempt may still hold (a TPU's /dev/accel*).
    frees_accelerator: ClassVar[bool] = False
    # Its record's state comes from the TPU API: a pass's contacts with the workers never judge it.
    state_from_api: ClassVar[bool] = False

    def endpoints(self, machine: Machine, tpu_addresses: list[str] | None) -> list[Endpoint]:
        """One endpoint per worker, in worker order."""
        raise NotImplementedError

    def probes(self, reachable: bool | None) -> bool:
        """Whether a pass probes the workers of its running jobs, given what it already knows of the
        machine's reach this pass."""
        return True

    def judge_reach(self, state: State, machine: Machine, contacts: list[reach.Contact], now: float) -> bool:
        """Apply this pass's contacts with the workers to the machine's record; whether it takes new
        jobs. A TPU's state is the API's (tpu/flow.py); the local machine is always up."""
        return True

    def zone_and_node(self, machine: Machine, record: MachineRecord) -> tuple[str, str]:
        """Where an attempt runs, as its job's environment says (JOBTPU_ZONE, JOBTPU_NODE)."""
        return machine.zone or "", ""

    def state_word(self, record: MachineRecord) -> str:
        """The word a table shows for a machine no pass has said anything of yet."""
        return record.state or "unknown"


class LocalDriver(Driver):
    kind = MachineKind.LOCAL
    remote = False
    runs_as_this_account = True
    stops_by_request = True

    def endpoints(self, machine: Machine, tpu_addresses: list[str] | None) -> list[Endpoint]:
        return [Endpoint(machine.name, 0, None)]

    def state_word(self, record: MachineRecord) -> str:
        return record.state or "up"  # this computer is up whenever a pass runs on it


class SshDriver(Driver):
    kind = MachineKind.SSH

    def endpoints(self, machine: Machine, tpu_addresses: list[str] | None) -> list[Endpoint]:
        out = []
        for i, host in enumerate(machine.hosts):
            addr, port = split_host(host, machine.port)
            out.append(Endpoint(machine.name, i, addr, port))
        return out

    def judge_reach(self, state: State, machine: Machine, contacts: list[reach.Contact], now: float) -> bool:
        record = state.machine(machine.name)
        reach.apply(record, contacts, now)
        return reach.takes_jobs(record, now)


class TpuDriver(Driver):
    kind = MachineKind.TPU
    frees_accelerator = True
    state_from_api = True

    def endpoints(self, machine: Machine, tpu_addresses: list[str] | None) -> list[Endpoint]:
        return [Endpoint(machine.name, i, addr, machine.port) for i, addr in enumerate(tpu_addresses or [])]

    def probes(self, reachable: bool | None) -> bool:
        return reachable is not False  # the API said its workers are gone: nothing to ask them

    def zone_and_node(self, machine: Machine, record: MachineRecord) -> tuple[str, str]:
        return record.zone or machine.zone or "", machine.node or ""  # capacity may have moved its zone


DRIVERS: dict[MachineKind, Driver] = {d.kind: d for d in (LocalDriver(), SshDriver(), TpuDriver())}


def driver_for(machine: Machine) -> Driver:
    """The driver of a machine's kind (a Machine built by hand may carry the kind as its word)."""
    return DRIVERS[MachineKind(machine.kind)]

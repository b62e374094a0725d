"""What each kind of machine does differently, in one place: the state it keeps for a session, how a
pass finds its workers, which transport reaches them and whether it probes them, how a launch and a
stop go there, and who judges whether it is reachable. `driver_for(machine)` is the one dispatch on a
machine's kind outside the loader and the core's pure checks (docs/design.md §5.1)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from jobtpu.decide import reach
from jobtpu.home.layout import Home
from jobtpu.home.machines import split_host
from jobtpu.schema.fleet import Fleet, Machine, MachineKind
from jobtpu.schema.records import MachineRecord
from jobtpu.schema.state import Job, State
from jobtpu.transport.base import Endpoint, Transport

if TYPE_CHECKING:
    from jobtpu.decide.observation import Observation
    from jobtpu.decide.tpu_plan import MachineWork
    from jobtpu.decide.workers import WorkerRef


class Driver:
    """The local machine's, an ssh box's or a TPU VM's way: one instance per kind, no state."""

    kind: ClassVar[MachineKind]
    # Its workers are reached over SSH: their logs are pulled home, rsync copies to them.
    remote: ClassVar[bool] = True
    # A stop asks the job's wrapper to stop it (the runner's pass may not own the process) rather
    # than signalling the process itself.
    stops_by_request: ClassVar[bool] = False
    # A launch first frees the accelerator a killed attempt may still hold (a TPU's /dev/accel*).
    frees_accelerator: ClassVar[bool] = False
    # Its record's state comes from the TPU API: a pass's contacts with the workers never judge it.
    state_from_api: ClassVar[bool] = False

    def reached_over_ssh(self, machine: Machine) -> bool:
        """Whether its scripts and copies go over SSH (rsync copies to it), as its transport says."""
        return self.remote

    def new_runtime(self, fleet: Fleet, state: State) -> Any:
        """What this kind keeps for one session (a pass, a command) while it runs, made when the
        session starts (fleet/reach.py `Reach.runtime`); None: nothing."""
        return None

    def endpoints(self, machine: Machine, runtime: Any) -> list[Endpoint]:
        """One endpoint per worker, in worker order; `runtime`: this kind's state in the session."""
        raise NotImplementedError

    def internal_addresses(self, machine: Machine, runtime: Any) -> tuple[str, ...]:
        """Its workers' addresses on its internal network as its provider knows them, in worker order;
        none when it does not (the hosts jobtpu reaches then stand for them)."""
        return ()

    def trusted_keys(self, record: MachineRecord | None, worker: int) -> list[str]:
        """Host keys ("type base64") a worker is trusted by under the `strict` policy besides known_hosts:
        those its provider published for it (a TPU node's, through the API), as the last pass recorded them."""
        keys = (record.host_keys if record is not None else None) or []
        return list(keys[worker]) if worker < len(keys) else []

    def transport(self, machine: Machine, endpoint: Endpoint, home: Home, trusted: Iterable[str] = ()) -> Transport:
        """The way to one worker: over SSH, unless the kind says otherwise."""
        from jobtpu.transport.connect import ssh_transport

        return ssh_transport(machine, endpoint, home, trusted)

    def probe_script(self, machine: Machine, workers: list[tuple[WorkerRef, int]], home_id: str,
                     markers: list[tuple[WorkerRef, str]] | None = None, ids: Mapping[WorkerRef, str] | None = None) -> str:
        """The script that probes one worker's (job worker, log bytes already home) pairs, and whether
        the attempts in `markers` wrote their --saved-marker (worker, path). `ids`: a batch scheduler's
        job id of each worker as the home has it (a Slurm cluster's)."""
        from jobtpu.remote.scripts import probe_script

        return probe_script(machine.root, workers, home_id=home_id, markers=markers or ())

    def kill_script(self, machine: Machine, refs: list[WorkerRef], grace: float, home_id: str,
                    first: str | None = None, ids: Mapping[WorkerRef, str] | None = None) -> str:
        """The script that stops job workers on one worker: TERM, then KILL after `grace` seconds;
        with `first` (an eviction's), that signal a grace before the TERM. `ids` as probe_script's."""
        from jobtpu.remote.scripts import kill_script

        return kill_script(machine.root, refs, grace=grace, home_id=home_id, ask=self.stops_by_request, first=first)

    def batch_options(self, machine: Machine, job: Job, grace: float) -> tuple[str, ...] | None:
        """The options an attempt is handed to the machine's batch scheduler with; None: it has none,
        the launch starts the job on the worker itself."""
        return None

    def observe(self, p: Any, seen: Observation) -> list[MachineWork]:
        """A pass's first look, before any worker is probed: what the provider says of this kind's
        machines (where their workers are, whether they are up), each machine's steps planned and
        recorded as intents, saved before `carry_out`. Fills their views and workers' addresses."""
        return []

    def bring_back(self, p: Any, machine: Machine, now: float) -> MachineWork | None:
        """A job wants the machine back: plan and record its first step (None: nothing to do; a
        machine the provider does not own is never brought back)."""
        return None

    def carry_out(self, p: Any, works: list[MachineWork], now: float) -> None:
        """Carry out the steps `observe` and `bring_back` planned and the pass saved."""

    def check_provider(self, reach: Any, machine: Machine) -> list[tuple[str, bool]]:
        """`jobtpu doctor`'s lines (text, is a problem) on what the machine's provider says of it,
        before its workers are checked; it may tell the session where the workers are now."""
        return []

    def check_workers(self, reach: Any, machine: Machine, eps: list[Endpoint], fix: bool,
                      label_of: Callable[[Machine, Endpoint], str]) -> list[tuple[str, bool]]:
        """`jobtpu doctor`'s lines on what only this kind's workers need (a TPU's device and lock file)."""
        return []

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

    # `jobtpu doctor --accelerator` checks its workers' accelerator (a TPU's, through JAX).
    accelerator_checked: ClassVar[bool] = False

    def check_accelerator(self, reach: Any, machine: Machine, eps: list[Endpoint],
                          label_of: Callable[[Machine, Endpoint], str]) -> list[tuple[str, bool]]:
        """`jobtpu doctor --accelerator`'s lines, for a kind whose `accelerator_checked`."""
        return []

    def other_names(self, machine: Machine) -> tuple[str, ...]:
        """Names a person may give the machine besides its own and its aliases (a TPU's node)."""
        return ()

    def provider_zone(self, machine: Machine, record: MachineRecord) -> str:
        """The zone its provider placed it in, for the team sheet ("" when no provider places it)."""
        return ""

    def provisioning(self, machine: Machine, record: MachineRecord) -> str:
        """How its provider provisions it (a TPU's spot, preemptible, reserved...), "" when none does."""
        return ""

    def provider_columns(self, machine: Machine, record: MachineRecord) -> dict[str, Any]:
        """`jobtpu machines --json`'s fields that only a provider's machine has."""
        return {}

    def create_retry(self, record: MachineRecord) -> float | None:
        """When a failed create is tried again: `machines`' `next_try` (an ssh machine's record holds its
        short pause after a failed contact there, which `machines` does not show)."""
        return None

    def doing(self, machine: Machine, record: MachineRecord, now: float) -> list[str]:
        """What the live view says of its provider's side, after its jobs (a TPU's node, queued resource
        and a create's back-off)."""
        return _queued_words(machine, record)

    def where(self, machine: Machine, record: MachineRecord, row: dict[str, Any]) -> list[tuple[str, str]] | None:
        """`jobtpu machines NAME`'s lines on where it is, when its provider says (None: its hosts say)."""
        return None

    def never_seen(self, machine: Machine) -> str:
        """What `machines` says of it before any pass has."""
        # An idle ssh machine costs no round trip in a pass; it is first contacted when a job goes there.
        return (f"not contacted yet: a pass contacts it when a job goes there; "
                f"`jobtpu doctor {machine.name}` checks it now")

    def whole_accelerator(self, machine: Machine) -> tuple[int | None, str] | None:
        """What an attempt holds on it when it holds the whole accelerator (a TPU's chips, from its
        type), and the unit; None: what the job asked for (its GPUs)."""
        return None

    def state_word(self, record: MachineRecord) -> str:
        """The word a table shows for a machine no pass has said anything of yet."""
        return record.state or "unknown"


class LocalDriver(Driver):
    kind = MachineKind.LOCAL
    remote = False
    stops_by_request = True

    def endpoints(self, machine: Machine, runtime: Any) -> list[Endpoint]:
        return [Endpoint(machine.name, 0, None)]

    def transport(self, machine: Machine, endpoint: Endpoint, home: Home, trusted: Iterable[str] = ()) -> Transport:
        from jobtpu.transport.connect import local_transport

        return local_transport(machine, endpoint)

    def state_word(self, record: MachineRecord) -> str:
        return record.state or "up"  # this computer is up whenever a pass runs on it


class SshDriver(Driver):
    kind = MachineKind.SSH

    def endpoints(self, machine: Machine, runtime: Any) -> list[Endpoint]:
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

    def new_runtime(self, fleet: Fleet, state: State) -> Any:
        # Imported here: the TPU API's client is made (and google-cloud loaded) only on first use.
        from jobtpu.tpu.runtime import TpuRuntime

        return TpuRuntime(fleet.gcp, state)

    def endpoints(self, machine: Machine, runtime: Any) -> list[Endpoint]:
        """Where the TPU API last said its workers are (tpu/runtime.py); none before it said."""
        addresses = runtime.addresses.get(machine.name) if runtime is not None else None
        return [Endpoint(machine.name, i, addr, machine.port) for i, addr in enumerate(addresses or [])]

    def internal_addresses(self, machine: Machine, runtime: Any) -> tuple[str, ...]:
        node = runtime.nodes.get(machine.name) if runtime is not None else None
        return node.internal if node is not None else ()

    def observe(self, p: Any, seen: Observation) -> list[MachineWork]:
        from jobtpu.tpu.flow import observe_tpus

        return observe_tpus(p, seen)

    def bring_back(self, p: Any, machine: Machine, now: float) -> MachineWork | None:
        from jobtpu.tpu.flow import request_recreate

        return request_recreate(p, machine, now)

    def carry_out(self, p: Any, works: list[MachineWork], now: float) -> None:
        from jobtpu.tpu.flow import carry_out_all

        carry_out_all(p, works, now)

    def check_provider(self, reach: Any, machine: Machine) -> list[tuple[str, bool]]:
        from jobtpu.tpu.checks import node_check

        return node_check(reach, machine)

    def check_workers(self, reach: Any, machine: Machine, eps: list[Endpoint], fix: bool,
                      label_of: Callable[[Machine, Endpoint], str]) -> list[tuple[str, bool]]:
        from jobtpu.tpu.checks import device_checks

        return device_checks(reach, machine, eps, fix, label_of)

    def probes(self, reachable: bool | None) -> bool:
        return reachable is not False  # the API said its workers are gone: nothing to ask them

    def zone_and_node(self, machine: Machine, record: MachineRecord) -> tuple[str, str]:
        return self.provider_zone(machine, record), machine.node or ""  # capacity may have moved its zone

    accelerator_checked = True

    def check_accelerator(self, reach: Any, machine: Machine, eps: list[Endpoint],
                          label_of: Callable[[Machine, Endpoint], str]) -> list[tuple[str, bool]]:
        from jobtpu.tpu.accelerator import accelerator_checks

        return accelerator_checks(reach, machine, eps, label_of)

    def other_names(self, machine: Machine) -> tuple[str, ...]:
        return (machine.node,) if machine.node else ()

    def provider_zone(self, machine: Machine, record: MachineRecord) -> str:
        return record.zone or machine.zone or ""

    def provisioning(self, machine: Machine, record: MachineRecord) -> str:
        from jobtpu.schema.nodespec import provisioning

        return provisioning(machine, record)

    def provider_columns(self, machine: Machine, record: MachineRecord) -> dict[str, Any]:
        return {"provisioning": self.provisioning(machine, record), "zone": record.zone or machine.zone,
                "moved": record.moved,
                "queued_resource": record.queued_state if machine.queued_resource else None,
                "refused": record.refused.message if record.refused else None}

    def create_retry(self, record: MachineRecord) -> float | None:
        return record.next_try

    def doing(self, machine: Machine, record: MachineRecord, now: float) -> list[str]:
        said = [f"node {record.tpu_state or '?'}", *_queued_words(machine, record)]
        if record.next_try is not None and record.next_try > now:  # a create's
            said.append(f"back-off {int(record.next_try - now)} s after {record.failures} failure(s)")
        return said

    def where(self, machine: Machine, record: MachineRecord, row: dict[str, Any]) -> list[tuple[str, str]] | None:
        accelerator = f"{machine.accelerator or '?'} ({row.get('provisioning')})"
        node = f"{machine.node or machine.name} in {row.get('zone') or '?'}"
        if machine.slice_group:
            node += (f" (slice {machine.slice_index} of {machine.slices} of {machine.slice_group}, "
                     f"queued resource {machine.queued_resource_id})")
        return [("accelerator", accelerator), ("node", node),
                ("addresses", ", ".join(record.addresses or []) or "not listed yet")]

    def never_seen(self, machine: Machine) -> str:
        return "not asked yet: the next `jobtpu manage` asks the TPU API"

    def whole_accelerator(self, machine: Machine) -> tuple[int | None, str] | None:
        from jobtpu.schema.accelerator import accelerator

        found = accelerator((machine.accelerator or "").lower())
        return (found.chips if found is not None else None), "chip"


class SlurmDriver(SshDriver):
    """A Slurm cluster reached at its login host, its one worker as jobtpu sees it: a launch is an
    sbatch, a probe one squeue, a stop scancel (jobtpu/slurm/, sh/slurm.sh). The cluster's nodes
    share the run root with the login host. Without a login host jobtpu runs on the login node: the
    same scripts run here as the local machine's do, with no SSH (docs/reference/machines-json.md §3.3.1)."""

    kind = MachineKind.SLURM

    def endpoints(self, machine: Machine, runtime: Any) -> list[Endpoint]:
        return super().endpoints(machine, runtime) if machine.hosts else [Endpoint(machine.name, 0, None)]

    def reached_over_ssh(self, machine: Machine) -> bool:
        return bool(machine.hosts)  # without a login host, jobtpu runs on the login node

    def transport(self, machine: Machine, endpoint: Endpoint, home: Home, trusted: Iterable[str] = ()) -> Transport:
        if endpoint.addr is not None:
            return super().transport(machine, endpoint, home, trusted)
        from jobtpu.transport.connect import local_transport

        # A login's environment, as the local machine's scripts have, and where Slurm's clients find
        # the cluster when the site says so by SLURM_CONF rather than /etc/slurm.
        return local_transport(machine, endpoint, passed=("SLURM_CONF",))

    def probe_script(self, machine: Machine, workers: list[tuple[WorkerRef, int]], home_id: str,
                     markers: list[tuple[WorkerRef, str]] | None = None, ids: Mapping[WorkerRef, str] | None = None) -> str:
        # A cluster's --saved-marker is not looked for yet: its saves show by --saved-when lines.
        from jobtpu.slurm.scripts import probe_script

        return probe_script(machine.root, workers, ids=ids)

    def kill_script(self, machine: Machine, refs: list[WorkerRef], grace: float, home_id: str,
                    first: str | None = None, ids: Mapping[WorkerRef, str] | None = None) -> str:
        # scancel's own TERM, grace and KILL: a cluster's eviction sends no --signal first yet.
        from jobtpu.slurm.scripts import kill_script

        return kill_script(machine.root, refs, grace, ids)

    def batch_options(self, machine: Machine, job: Job, grace: float) -> tuple[str, ...] | None:
        from jobtpu.slurm.batch import sbatch_options

        return sbatch_options(machine, job, grace)

    def check_workers(self, reach: Any, machine: Machine, eps: list[Endpoint], fix: bool,
                      label_of: Callable[[Machine, Endpoint], str]) -> list[tuple[str, bool]]:
        from jobtpu.slurm.checks import slurm_checks

        return slurm_checks(reach, machine, eps, label_of)

    def never_seen(self, machine: Machine) -> str:
        return (f"not contacted yet: a pass asks Slurm at {machine.hosts[0] if machine.hosts else 'this computer'} "
                "when a job goes there; "
                f"`jobtpu doctor {machine.name}` checks the login host now")


def _queued_words(machine: Machine, record: MachineRecord) -> list[str]:
    if machine.slice_group:  # one queued resource makes every slice of the group
        return [f"slice {machine.slice_index} of {machine.slices} of {machine.slice_group}",
                f"queued resource {machine.queued_resource_id} {record.queued_state or 'none'}"]
    return [f"queued resource {record.queued_state or 'none'}"] if machine.queued_resource else []


DRIVERS: dict[MachineKind, Driver] = {d.kind: d for d in (LocalDriver(), SshDriver(), TpuDriver(), SlurmDriver())}


def driver_for(machine: Machine) -> Driver:
    """The driver of a machine's kind (a Machine built by hand may carry the kind as its word)."""
    return DRIVERS[MachineKind(machine.kind)]

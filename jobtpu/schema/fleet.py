"""The fleet as the rest of jobtpu sees it: each Machine (machines.json's entry, its connection keys
filled from `defaults`, its zones and create fields worked out), the team's limits and settings.
home/machines.py builds it from the file's types (schema/machines_file.py)."""

import re
import typing
from enum import StrEnum
from typing import Any, Literal

from jobtpu.errors import NotFoundError
from jobtpu.schema.machines_file import MachineEntry
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.resume_policy import DEFAULT, ResumePolicy

if typing.TYPE_CHECKING:  # the sheet's module is loaded only for a home that has one
    from jobtpu.schema.priority import Classes
    from jobtpu.schema.sheet_config import SheetConfig


# Matched case-insensitively, as the old TPU manager did ("GRPC Error" too). The last two of grpc are
# the machine failing, not the job: libtpu crashing as its runtime tears down, and a worker whose
# python is gone (a half-set-up or wiped disk); the rule's recovery (resume, or reapply's new node)
# is what helps, where `exit N` would end the job. "Allocation type" heads XLA's out-of-memory report.
DEFAULT_ERROR_PATTERNS: dict[str, tuple[str, ...]] = {
    "grpc": ("GRPC error", "DEADLINE_EXCEEDED", "Socket closed", "failed to connect to all addresses",
             "UNAVAILABLE: ", "StatusCode.UNAVAILABLE", "Attempt to free invalid pointer",
             "python: No such file or directory"),
    "oom": ("RESOURCE_EXHAUSTED", "Out of memory", "OutOfMemoryError", "Allocation type"),
}


class UserLimit(msgspec.Struct, frozen=True):
    """One user's limits; None: no limit on that count."""

    jobs: int | None = None
    machines: int | None = None
    tpu_machines: int | None = None

    @property
    def any(self) -> bool:
        return self.jobs is not None or self.machines is not None or self.tpu_machines is not None


NO_LIMIT = UserLimit()


class MachineKind(StrEnum):
    """What a machine is (machines.json's `kind`): each compares equal to its word. What each kind does
    differently in a pass is one place, fleet/drivers.py."""

    LOCAL = "local"
    SSH = "ssh"
    TPU = "tpu"
    SLURM = "slurm"


class Machine(MachineEntry, frozen=True, kw_only=True):
    """One machine: its entry in machines.json (each key as written, declared once there), with the
    keys worked out from the entry redeclared here with what they came to."""

    name: str
    kind: MachineKind  # type: ignore[assignment]  # the entry's word, as its enum
    hosts: tuple[str, ...] = ()
    preemptible: bool = False  # Google may take it away: a preemptible or a spot node
    spot: bool = False
    zone: str | None = None  # the zone in use (the first of `zones` until capacity errors move it)
    zones: tuple[str, ...] = ()  # a tpu's zones, in order of preference
    labels: dict[str, str] = {}
    # TPU API create fields machines.json sets (its own keys and `node_spec`), over the recorded spec.
    node_overrides: dict[str, Any] = {}
    # Provisioned through a queued resource: {"tier": spot|guaranteed|best-effort, "valid_for": seconds}.
    queued_resource: dict[str, Any] | None = None  # type: ignore[assignment]  # the entry's `true` worked out
    # The connection keys, each the machine's own else `defaults`'s else the built-in one.
    user: str | None = None
    port: int = 22
    identity_file: str | None = None
    root: str = "jobtpu"
    host_key_policy: Literal["strict", "accept-new", "off"] = "accept-new"
    connect_timeout: float = 10.0
    peer_addresses: tuple[str, ...] = ()  # where the other workers reach each worker (docs/design.md §4.1)
    refused: str | None = None  # why it takes no job: its identity_file came from an untrusted machines.json
    slice_group: str | None = None  # the machines.json entry of N slices this machine is one slice of
    slice_index: int | None = None  # which slice (0…N-1); its node is the entry's node + "-<index>"

    @property
    def capacity(self) -> dict[str, int]:
        """Counts offered, always including `slot` (1 unless declared)."""
        return {"slot": 1, **self.resources}

    # What differs between kinds, named by what it means (docs/design.md §5.1): the one place outside
    # fleet/drivers.py and the loader that reads a machine's kind.
    @property
    def cloud_node(self) -> bool:
        """A node the TPU API owns: the API says where its workers are and whether it is up, Google
        may preempt it, and a pass deletes and creates it again (zones, node spec, queued resources)."""
        return self.kind == MachineKind.TPU

    @property
    def runs_here(self) -> bool:
        """Its jobs run on this host, under this home: up without being reached."""
        return self.kind == MachineKind.LOCAL

    @property
    def runs_as_this_account(self) -> bool:
        """A launch on it runs the job as this process's account: the local machine, or a Slurm
        cluster whose login node is this computer (sbatch hands the job over as this account, and its
        nodes share the filesystem). When state.json is not this account's alone, the job's spec must
        say so (docs/design.md §7)."""
        return self.runs_here or (self.scheduled and not self.hosts)

    @property
    def listed_hosts(self) -> bool:
        """Its workers are the hosts machines.json lists, reached over SSH."""
        return self.kind == MachineKind.SSH

    @property
    def known_workers(self) -> int | None:
        """How many workers it has before anything is asked: its listed hosts, one here; a cloud
        node's come from the API."""
        # A Slurm cluster is one worker, at its login host or, without one, here.
        return len(self.hosts) if self.listed_hosts else 1 if self.runs_here or self.scheduled else None

    @property
    def scheduled(self) -> bool:
        """A cluster whose batch scheduler (Slurm) places, queues and counts the jobs it is handed: jobtpu
        hands it each job at once and allocates none of its resources (docs/reference/machines-json.md)."""
        return self.kind == MachineKind.SLURM

    @property
    def queued_resource_id(self) -> str:
        """The queued resource that makes its node: the node's own name, or for a slice its group's
        (the entry's node, whose nodes Cloud TPU names <node>-0…, docs/reference/machines-json.md)."""
        node = self.node or ""
        return node[:-len(f"-{self.slice_index}")] if self.slice_group and self.slice_index is not None else node

    def in_zone(self, zone: str | None) -> "Machine":
        """This machine, in one of its zones (the first when `zone` is not one of them)."""
        return msgspec.structs.replace(
            self, zone=zone if zone in self.zones else (self.zones[0] if self.zones else self.zone))

    def default_rule(self) -> str:
        # A Slurm cluster may requeue or preempt a job: its next attempt resumes, as on a spot TPU.
        return "pre" if (self.cloud_node and self.preemptible) or self.scheduled else "pass"


class Fleet(msgspec.Struct, frozen=True):
    machines: dict[str, Machine]
    gcp: dict[str, Any] = msgspec.field(default_factory=dict)
    config_aliases: dict[str, str] = msgspec.field(default_factory=dict)
    error_patterns: dict[str, tuple[str, ...]] = msgspec.field(default_factory=lambda: dict(DEFAULT_ERROR_PATTERNS))
    notify: list[Any] = msgspec.field(default_factory=list)  # destinations.Destination, from machines.json's "notify"
    per_user: UserLimit = NO_LIMIT
    user_limits: dict[str, UserLimit] = msgspec.field(default_factory=dict)
    sheet: "SheetConfig | None" = None  # machines.json's `sheet`: the team's spreadsheet, when there is one
    # Privileged keys an untrusted machines.json held and the pass did not use: one line each (§7).
    refused: tuple[str, ...] = ()
    classes: "Classes | None" = None  # machines.json's priority_classes (schema/priority.py), when it has them
    runner: Any = None  # trust.Runner, when a trusted runner.json names a runner or allows private webhooks
    resume: ResumePolicy = DEFAULT  # machines.json's `resume`: where a preempted or lost job resumes

    @property
    def has_limits(self) -> bool:
        return self.per_user.any or any(limit.any for limit in self.user_limits.values())

    def limit_for(self, user: str) -> UserLimit:
        return self.user_limits.get(user, self.per_user)

    def get(self, name: str) -> Machine | None:
        return self.machines.get(name)

    def slices_of(self, group: str | None) -> list[Machine]:
        """The machines of a machines.json entry of several slices, in slice order; [] for any other name."""
        found = [m for m in self.machines.values() if group and m.slice_group == group]
        return sorted(found, key=lambda m: m.slice_index or 0)

    def require(self, name: str) -> Machine:
        """The machine, or the one error every command gives for a name it does not know."""
        return self.resolve(name)

    def resolve(self, name: str) -> Machine:
        """The machine a user means by `name`: its name in machines.json, one of its `aliases`, or for
        a TPU machine its node's name (`n`) or full name (`projects/p/locations/z/nodes/n`). Every
        command that takes a machine name asks here, so each takes the same names."""
        found = self.machines.get(name) or next((m for m in self.machines.values() if name in m.aliases), None)
        if found is not None:
            return found
        nodes = [m for m in self.machines.values() if m.cloud_node and self._is_node_of(name, m)]
        if len(nodes) == 1:
            return nodes[0]
        if nodes:
            raise NotFoundError(f"{name!r} is the node of several machines: {', '.join(m.name for m in nodes)}",
                                hint="name the machine as machines.json does")
        if slices := self.slices_of(name):
            raise NotFoundError(f"{name!r} is {len(slices)} slices, each a machine: {', '.join(m.name for m in slices)}",
                                hint="name one slice (`jobtpu tpu apply|reapply|delete` also take the group's name)")
        from jobtpu.suggest import nearest

        close = nearest(name, [n for m in self.machines.values() for n in (m.name, *m.aliases)])
        meant = f"did you mean {close}? " if close else ""
        raise NotFoundError(f"unknown machine {name!r}", hint=f"{meant}machines in machines.json: {self.names_text()}")

    def _is_node_of(self, name: str, machine: Machine) -> bool:
        full = _NODE_PATH.fullmatch(name)
        if full is None:
            return name == machine.node
        project = self.gcp.get("project")
        return (full["node"] == machine.node and full["zone"] in (machine.zones or (machine.zone,))
                and (not isinstance(project, str) or project == full["project"]))

    def names_text(self) -> str:
        """Every machine's name, with its aliases in brackets: what an unknown name's hint lists."""
        return ", ".join(f"{m.name} ({', '.join(m.aliases)})" if m.aliases else m.name for m in self.machines.values())


_NODE_PATH = re.compile(r"projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)/nodes/(?P<node>[^/]+)")


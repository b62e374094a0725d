"""machines.json → frozen Machine specs and team settings (docs/reference/machines-json.md §3).

msgspec decodes the file into the Structs below: their types say what each key holds, and a key they
do not name is refused, so a typo never passes silently. What a type cannot say (name patterns,
ranges, what each kind of machine needs) is checked by the small functions after them. Every
problem is one line naming the file, the machine and the key, and changes nothing."""

from __future__ import annotations

import itertools
import os
import re
import reprlib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, TypeVar, get_args, get_origin, get_type_hints

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from jobtpu.decide.fit import MAX_RESOURCE_COUNT
from jobtpu.errors import ConfigError, NotFoundError
from jobtpu.home.layout import Home
from jobtpu.home.safefs import UnsafePath, open_file, read_fd
from jobtpu.home.store import parse_json_file
from jobtpu.tpu.nodespec import NodeSpec, NonEmptyText, default_runtime

if typing.TYPE_CHECKING:  # the sheet's module is loaded only for a home that has one
    from jobtpu.sheet.api import SheetConfig

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
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
MACHINE_NAME = _NAME  # what a machine's name or alias may be (importer.py checks names with it)
_RESOURCE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


# ---- the file's schema ----------------------------------------------------------------------------
# Each key's Meta description ends the sentence "'key' ..." of the error a wrong value gets.
# UNSET means "not in the file": a default applies, where null may be a value of its own.

_Text = Annotated[str | None | UnsetType, Meta(description="must be a string")]
_OptionalText = Annotated[str | None, Meta(description="must be a string")]
_Flag = Annotated[bool | UnsetType, Meta(description="must be true or false")]
_Object = Meta(description="must be an object")


class _Keys(Struct, forbid_unknown_fields=True):
    """An object of machines.json: only the keys its class names."""


class Connection(_Keys):
    """How to reach a machine's hosts: allowed in `defaults` and in every machine (the machine wins)."""

    user: _Text = UNSET
    port: Annotated[int | None | UnsetType, Meta(description="must be an integer port")] = UNSET
    identity_file: _Text = UNSET
    root: _Text = UNSET
    host_key_policy: Annotated[Literal["strict", "accept-new", "off"] | UnsetType, Meta(
        description="must be one of strict, accept-new, off")] = UNSET
    connect_timeout: Annotated[int | float | None | UnsetType, Meta(description="must be a number of seconds")] = UNSET


BUILTIN_DEFAULTS = Connection(user=None, port=22, identity_file=None, root="jobtpu",
                              host_key_policy="accept-new", connect_timeout=10)


class QueuedResource(_Keys):
    tier: Annotated[Literal["spot", "guaranteed", "best-effort"], Meta(
        description="must be one of spot, guaranteed, best-effort")] = "spot"
    valid_for: Annotated[Annotated[int, Meta(gt=0)] | None, Meta(
        description="must be a number of seconds > 0")] = None  # how long the request may wait in a zone


class MachineEntry(Connection, kw_only=True):
    """One machine. Which keys each kind needs or refuses is checked after decoding (_check_kind)."""

    kind: Annotated[Literal["local", "ssh", "tpu"], Meta(description="must be one of local, ssh, tpu")]
    hosts: Annotated[list[str] | UnsetType, Meta(description='must be a non-empty list of "addr" or "addr:port"')] = UNSET
    resources: Annotated[dict[str, int], Meta(description="must map resource names to counts")] = {}
    accelerator: _OptionalText = None
    preemptible: _Flag = UNSET
    node: _OptionalText = None
    zone: Annotated[str | list[str] | None, Meta(
        description="must be a zone, or a list of distinct zones in order of preference "
                    "(capacity errors move the node to the next)")] = None
    runtime_version: _OptionalText = None
    setup: Annotated[list[str], Meta(description="must be a list of shell commands")] = []
    use_external_ip: Annotated[bool, Meta(description="must be true or false")] = False
    labels: Annotated[dict[str, str] | UnsetType, Meta(description="must map strings to strings")] = UNSET
    spot: _Flag = UNSET
    node_spec: Annotated[NodeSpec | UnsetType, Meta(description="must be an object of TPU API create fields")] = UNSET
    queued_resource: Annotated[bool | QueuedResource | None, Meta(
        description='must be true or {"tier": "spot", "valid_for": 86400}')] = None
    aliases: Annotated[list[str], Meta(description="must be a list of other names for the machine")] = []
    peer_addresses: Annotated[list[str] | UnsetType, Meta(
        description="must be a list of addresses, one per worker, where the other workers reach it")] = UNSET


class Gcp(_Keys):
    project: _Text = UNSET
    api_endpoint: _Text = UNSET
    credentials: _Text = UNSET
    recreate_backoff: Annotated[int | float | UnsetType, Meta(
        description="must be a number of seconds ≥ 0 (the first retry's wait; it doubles)")] = UNSET


class ErrorPatterns(_Keys):
    """A class given replaces that class's default list, or adds to it with `"extend": true`."""

    grpc: Annotated[list[NonEmptyText] | UnsetType, Meta(description="must be a list of non-empty strings")] = UNSET
    oom: Annotated[list[NonEmptyText] | UnsetType, Meta(description="must be a list of non-empty strings")] = UNSET
    extend: Annotated[bool, Meta(description="must be true or false")] = False


_Limit = Annotated[Annotated[int, Meta(ge=0)] | None | UnsetType, Meta(description="must be a whole number ≥ 0, or null (no limit)")]


class UserLimitEntry(_Keys):
    """How much of the fleet one user's jobs may hold at once (launching, running or stopping)."""

    jobs: _Limit = UNSET
    machines: _Limit = UNSET
    tpu_machines: _Limit = UNSET


class LimitsEntry(_Keys):
    per_user: Annotated[UserLimitEntry, _Object] = msgspec.field(default_factory=UserLimitEntry)
    # Named users' own limits, key by key over per_user (a lead who may hold more TPUs).
    users: Annotated[dict[str, UserLimitEntry], Meta(description="must map user names to limits objects")] = {}


class MachinesFile(_Keys):
    defaults: Annotated[Connection, _Object] = msgspec.field(default_factory=Connection)
    gcp: Annotated[Gcp, _Object] = msgspec.field(default_factory=Gcp)
    # Each machine stays raw until it is decoded on its own, so that an error can name the machine.
    machines: Annotated[dict[str, Raw] | UnsetType, Meta(
        description="must be a non-empty object of name → machine")] = UNSET
    config_aliases: Annotated[dict[str, NonEmptyText], Meta(
        description="must map short names to config keys (non-empty strings)")] = {}
    error_patterns: Annotated[ErrorPatterns, _Object] = msgspec.field(default_factory=ErrorPatterns)
    # Where passes send notifications (notify.py checks each entry and says what is wrong in one line).
    notify: Raw | UnsetType = UNSET
    limits: Annotated[LimitsEntry, _Object] = msgspec.field(default_factory=LimitsEntry)
    # The team's spreadsheet: kept raw, checked by sheet.parse_config (its own one-line errors).
    sheet: Raw | UnsetType = UNSET


@dataclass(frozen=True)
class UserLimit:
    """One user's limits; None: no limit on that count."""

    jobs: int | None = None
    machines: int | None = None
    tpu_machines: int | None = None

    @property
    def any(self) -> bool:
        return self.jobs is not None or self.machines is not None or self.tpu_machines is not None


NO_LIMIT = UserLimit()


@dataclass(frozen=True)
class Machine:
    name: str
    kind: str
    hosts: tuple[str, ...] = ()
    resources: dict[str, int] = field(default_factory=dict)
    accelerator: str | None = None
    preemptible: bool = False  # Google may take it away: a preemptible or a spot node
    spot: bool = False
    node: str | None = None
    zone: str | None = None  # the zone in use (the first of `zones` until capacity errors move it)
    zones: tuple[str, ...] = ()  # a tpu's zones, in order of preference
    runtime_version: str | None = None
    setup: tuple[str, ...] = ()
    use_external_ip: bool = False  # connect to the workers' external addresses (not: whether they get one)
    labels: dict[str, str] = field(default_factory=dict)
    # TPU API create fields machines.json sets (its own keys and `node_spec`), over the recorded spec.
    node_overrides: dict[str, Any] = field(default_factory=dict)
    # Provisioned through a queued resource: {"tier": spot|guaranteed|best-effort, "valid_for": seconds}.
    queued_resource: dict[str, Any] | None = None
    user: str | None = None
    port: int = 22
    identity_file: str | None = None
    root: str = "jobtpu"
    host_key_policy: str = "accept-new"
    connect_timeout: float = 10.0
    aliases: tuple[str, ...] = ()  # other names the user may type for it (machines.json `aliases`)
    peer_addresses: tuple[str, ...] = ()  # where the other workers reach each worker (docs/design.md §4.1)
    refused: str | None = None  # why it takes no job: its identity_file came from an untrusted machines.json

    @property
    def capacity(self) -> dict[str, int]:
        """Counts offered, always including `slot` (1 unless declared)."""
        return {"slot": 1, **self.resources}

    @property
    def is_tpu(self) -> bool:
        return self.kind == "tpu"

    def in_zone(self, zone: str | None) -> Machine:
        """This machine, in one of its zones (the first when `zone` is not one of them)."""
        return replace(self, zone=zone if zone in self.zones else (self.zones[0] if self.zones else self.zone))

    def default_rule(self) -> str:
        return "pre" if self.is_tpu and self.preemptible else "pass"


@dataclass(frozen=True)
class Fleet:
    machines: dict[str, Machine]
    gcp: dict[str, Any] = field(default_factory=dict)
    config_aliases: dict[str, str] = field(default_factory=dict)
    error_patterns: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ERROR_PATTERNS))
    notify: list[Any] = field(default_factory=list)  # notify.Destination, from machines.json's "notify"
    per_user: UserLimit = NO_LIMIT
    user_limits: dict[str, UserLimit] = field(default_factory=dict)
    sheet: SheetConfig | None = None  # machines.json's `sheet`: the team's spreadsheet, when there is one
    # Privileged keys an untrusted machines.json held and the pass did not use: one line each (§7).
    refused: tuple[str, ...] = ()
    runner: Any = None  # trust.Runner, when a trusted runner.json names a runner or allows private webhooks

    @cached_property
    def has_limits(self) -> bool:
        return self.per_user.any or any(limit.any for limit in self.user_limits.values())

    def limit_for(self, user: str) -> UserLimit:
        return self.user_limits.get(user, self.per_user)

    def get(self, name: str) -> Machine | None:
        return self.machines.get(name)

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
        nodes = [m for m in self.machines.values() if m.is_tpu and self._is_node_of(name, m)]
        if len(nodes) == 1:
            return nodes[0]
        if nodes:
            raise NotFoundError(f"{name!r} is the node of several machines: {', '.join(m.name for m in nodes)}",
                                hint="name the machine as machines.json does")
        raise NotFoundError(f"unknown machine {name!r}", hint=f"machines in machines.json: {self.names_text()}")

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


class _Refused(Exception):
    """One line saying what is wrong in machines.json; load_fleet names the file and what to do."""


def load_fleet(home: Home) -> Fleet:
    path = home.machines_file
    try:
        data = _machines_bytes(home)
    except UnsafePath as e:
        raise ConfigError(e.message, f"fix {path}; nothing was changed") from None
    if _plainly_own(data) and not os.path.lexists(home.root / "runner.json"):
        try:  # a private home's own file and no runner.json: read as it is (every command's path)
            return _fleet(_read(path, data[0] if data else None), home)
        except _Refused as e:
            raise ConfigError(f"{path.name}: {e}", f"fix {path}; nothing was changed") from None
    from jobtpu.home.privileged import gate

    gated = gate(data, home.root)
    try:
        fleet = _fleet(_read(path, gated.data), home)
    except _Refused as e:
        raise ConfigError(f"{path.name}: {e}", f"fix {path}; nothing was changed") from None
    if gated.refused or gated.refused_machines or gated.runner.problem:
        machines = {name: replace(m, refused=gated.refused_machines[name]) if name in gated.refused_machines else m
                    for name, m in fleet.machines.items()}
        fleet = replace(fleet, machines=machines, refused=gated.lines())
    return replace(fleet, runner=gated.runner) if gated.runner.runner or gated.runner.allow_private_webhooks else fleet


def check_machines(home: Home, data: bytes) -> None:
    """ConfigError unless `data` is a machines.json every command would load (`import` checks what it
    is about to write)."""
    try:
        _fleet(_read(home.machines_file, data), home)
    except _Refused as e:
        raise ConfigError(f"{home.machines_file.name} would be refused: {e}", "nothing was changed") from None


def _plainly_own(found: tuple[bytes, os.stat_result] | None) -> bool:
    """trust.why_untrusted's answer, without loading it, for the common case: no file, or this
    account's own file that nobody else can write (docs/design.md §7)."""
    if found is None:
        return True
    st = found[1]
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022 and st.st_nlink == 1


def _machines_bytes(home: Home) -> tuple[bytes, os.stat_result] | None:
    """machines.json's bytes and stat, opened through safefs; None when the home has none."""
    fd = -1
    try:
        fd = open_file(home.root, home.machines_file.name)
    except FileNotFoundError:
        return None
    try:
        return read_fd(fd), os.fstat(fd)
    finally:
        os.close(fd)


def _read(path: Path, data: bytes | None) -> MachinesFile:
    if data is None:
        return MachinesFile()
    try:
        return _decode(data, MachinesFile, owner=None)
    except msgspec.DecodeError as e:  # not JSON at all (wrong types are _decode's business)
        _refuse_syntax(path, data, e)


def _refuse_syntax(path: Path, data: bytes, error: msgspec.DecodeError) -> NoReturn:
    """What is wrong in the standard library's words, with line and column, as for state.json."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Refused(f"not UTF-8 text (byte {e.start} cannot be decoded)") from None
    parse_json_file(path, text)  # raises
    raise _Refused(f"not valid JSON text ({error})")


def _fleet(doc: MachinesFile, home: Home) -> Fleet:
    if doc.gcp.recreate_backoff is not UNSET and doc.gcp.recreate_backoff < 0:
        raise _Refused(f"{_must(MachinesFile, 'gcp', 'recreate_backoff')} (got {doc.gcp.recreate_backoff!r})")
    entries = {"local": Raw(b'{"kind": "local"}')} if doc.machines is UNSET else doc.machines
    if not entries:
        raise _Refused(_must(MachinesFile, "machines"))
    defaults = Connection(**_connection(doc.defaults, BUILTIN_DEFAULTS))  # complete: no key left UNSET
    machines: dict[str, Machine] = {}
    for name, raw in entries.items():
        if not _NAME.match(name):
            raise _Refused(f"machine name {name!r} must be letters, digits, '.', '_' or '-'")
        entry = _decode(raw, MachineEntry, owner=f"machine {name!r}")
        try:
            machines[name] = _machine(name, entry, defaults, home)
        except _Refused as e:
            raise _Refused(f"machine {name!r}: {e}") from None
    tpus = sorted(name for name, m in machines.items() if m.is_tpu)
    if tpus and not doc.gcp.project:
        # Said at load, by every command: found only when a pass first asks the TPU API, it came after
        # the pass had started writing to the home.
        raise _Refused(f'TPU machines ({", ".join(tpus)}) need gcp.project: add "gcp": {{"project": "..."}}')
    _check_aliases(machines)
    patterns = error_patterns(doc.error_patterns)
    per_user, user_limits = _limits(doc.limits)
    fleet = Fleet(machines=machines, gcp=msgspec.to_builtins(doc.gcp), config_aliases=dict(doc.config_aliases),
                  error_patterns=patterns, per_user=per_user, user_limits=user_limits, sheet=_sheet(doc.sheet, home),
                  notify=_notify(doc.notify))
    # A tpu-manager tab names machines as people do (aliases, node names): the sheet asks the fleet.
    return replace(fleet, sheet=replace(fleet.sheet, resolve=fleet.resolve)) if fleet.sheet else fleet


def error_patterns(given: ErrorPatterns) -> dict[str, tuple[str, ...]]:
    """The defaults, each class given replacing its list (a team's own words only), or with
    `extend` added after it (the defaults keep matching what they always did)."""
    patterns = dict(DEFAULT_ERROR_PATTERNS)
    for key in ("grpc", "oom"):
        value = getattr(given, key)
        if value is not UNSET:
            patterns[key] = tuple(dict.fromkeys((*patterns[key], *value) if given.extend else value))
    return patterns


def _notify(raw: Raw | UnsetType) -> list[Any]:
    """The notification destinations machines.json names (a user's own settings take none yet)."""
    if raw is UNSET:
        return []
    from jobtpu.tell.notify import (
        parse_destinations,  # only a fleet that notifies loads urllib and subprocess
    )

    try:
        return parse_destinations(msgspec.json.decode(raw), "notify")
    except ConfigError as e:
        raise _Refused(e.message) from None


def _limits(entry: LimitsEntry) -> tuple[UserLimit, dict[str, UserLimit]]:
    """The team's per-user limits, and each named user's (their keys over the team's)."""
    from jobtpu.schema.state import USER_NAME

    def merged(own: UserLimitEntry, base: UserLimit) -> UserLimit:
        return UserLimit(**{key: getattr(base, key) if getattr(own, key) is UNSET else getattr(own, key)
                            for key in UserLimitEntry.__struct_fields__})

    per_user = merged(entry.per_user, NO_LIMIT)
    for name in entry.users:
        if not USER_NAME.match(name):
            raise _Refused(f"limits.users: {name[:40]!r} is not a user name")
    return per_user, {name: merged(own, per_user) for name, own in entry.users.items()}


def _sheet(raw: Raw | UnsetType, home: Home) -> SheetConfig | None:
    if raw is UNSET:
        return None
    from jobtpu.sheet.api import parse_config  # only a home with a sheet loads it

    return parse_config(msgspec.json.decode(raw), where=home.machines_file.name)


def _machine(name: str, entry: MachineEntry, defaults: Connection, home: Home) -> Machine:
    _check_kind(entry)
    _check_resources(entry.resources)
    connection = _connection(entry, defaults)
    _check_connection(connection)
    zones = _zones(entry.zone)
    queued = _queued_resource(entry.queued_resource)
    if queued and len(zones) > 1 and not queued.get("valid_for"):
        # A queued resource waits in its zone until it is served or its valid_for ends: without an
        # end it would never give the next zone its turn.
        raise _Refused("a queued resource with several zones needs queued_resource.valid_for "
                       "(how long to wait in one zone before asking in the next, like 3600)")
    return Machine(
        name=name, kind=entry.kind, hosts=tuple(entry.hosts or ()), resources=dict(entry.resources),
        accelerator=entry.accelerator,
        preemptible=bool(entry.preemptible is True or entry.spot is True or (queued or {}).get("tier") == "spot"),
        spot=entry.spot is True, node=entry.node, zone=zones[0] if zones else None, zones=zones,
        node_overrides=_node_overrides(entry) if entry.kind == "tpu" else {}, queued_resource=queued,
        runtime_version=entry.runtime_version, setup=tuple(entry.setup), use_external_ip=entry.use_external_ip,
        labels=dict(entry.labels or {}), user=connection["user"], port=connection["port"],
        identity_file=connection["identity_file"], root=_root(entry, connection["root"], home),
        host_key_policy=connection["host_key_policy"], connect_timeout=float(connection["connect_timeout"]),
        aliases=tuple(entry.aliases), peer_addresses=tuple(entry.peer_addresses or ()),
    )


# ---- what the types cannot say -------------------------------------------------------------------

def _check_kind(entry: MachineEntry) -> None:
    """The keys one kind needs and another refuses."""
    if entry.kind != "ssh" and entry.hosts is not UNSET:
        raise _Refused("'hosts' is only for kind ssh (a tpu's workers come from the TPU API)")
    if entry.kind == "ssh":
        if not entry.hosts or not all(entry.hosts):
            raise _Refused("an ssh machine needs 'hosts', a non-empty list of \"addr\" or \"addr:port\"")
        for host in entry.hosts:
            _split_host(host, 22, _Refused)
    if entry.peer_addresses is not UNSET:
        _check_peer_addresses(entry)
    if entry.kind == "tpu":
        for key in ("node", "accelerator", "zone"):
            if not getattr(entry, key):
                raise _Refused(f"a tpu machine needs '{key}'")
        if isinstance(entry.zone, list) and (not all(entry.zone) or len(set(entry.zone)) != len(entry.zone)):
            raise _Refused(f"{_must(MachineEntry, 'zone')} (got {entry.zone!r})")


def _check_peer_addresses(entry: MachineEntry) -> None:
    """One address per worker (an ssh machine's hosts; a TPU's workers are checked when the API lists them)."""
    given = entry.peer_addresses or []
    if entry.kind == "local":
        raise _Refused("'peer_addresses' is only for ssh and tpu machines (a local machine has one worker)")
    if not given or not all(a.strip() and a.strip() == a and " " not in a for a in given):
        raise _Refused(f"{_must(MachineEntry, 'peer_addresses')} (got {entry.peer_addresses!r})")
    if entry.kind == "ssh" and len(given) != len(entry.hosts or ()):
        raise _Refused(f"'peer_addresses' names {len(given)} addresses for {len(entry.hosts or ())} hosts: "
                       "give one per host, in the order of 'hosts'")


def _check_aliases(machines: Mapping[str, Machine]) -> None:
    """Each alias names one machine: a valid name, not another machine's name or alias."""
    owner: dict[str, str] = {}
    for machine in machines.values():
        for alias in machine.aliases:
            if not _NAME.match(alias):
                raise _Refused(f"machine {machine.name!r}: alias {alias!r} must be letters, digits, '.', '_' or '-'")
            taken = alias if alias in machines else owner.get(alias)
            if taken is not None and taken != machine.name:
                raise _Refused(f"machine {machine.name!r}: alias {alias!r} already names machine {taken!r}")
            owner[alias] = machine.name


def _check_resources(resources: Mapping[str, object]) -> None:
    """Also given the file's raw object when its types are wrong, to name the resource at fault."""
    for res, count in resources.items():
        if not _RESOURCE.match(res) or not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise _Refused(f"resource {res!r} must be a lowercase name with a count ≥ 0")
        if count > MAX_RESOURCE_COUNT:
            raise _Refused(f"resource {res!r} count {count} is more than jobtpu hands out "
                           f"({MAX_RESOURCE_COUNT} at most)")


def _connection(entry: Connection, defaults: Connection) -> dict[str, Any]:
    """Each connection key from the machine, else from `defaults`."""
    values = {}
    for key in Connection.__struct_fields__:
        value = getattr(entry, key)
        values[key] = getattr(defaults, key) if value is UNSET else value
    return values


def _check_connection(values: dict[str, Any]) -> None:
    port, timeout = values["port"], values["connect_timeout"]
    if port is None or not 0 < port < 65536:
        raise _Refused(f"port {port} is out of range")
    if timeout is None or timeout <= 0:
        raise _Refused("connect_timeout must be positive")


def _root(entry: MachineEntry, root: str | None, home: Home) -> str:
    if entry.kind == "local":
        # The local machine's folder lives in the home unless its own entry says otherwise
        # (`defaults.root` is for remote machines): `"root": null` means the default, "~/runs" the user's runs.
        own = entry.root
        return str(home.local_run_root if own is UNSET or own is None else Path(home.root, Path(own).expanduser()))
    root = root or "jobtpu"
    if root == "~" or root.startswith("~/"):  # scripts quote the root, so "~" would be a literal folder
        root = root[2:] or "."
    return root


def _queued_resource(value: bool | QueuedResource | None) -> dict[str, Any] | None:
    """`true` (spot), or {"tier": ..., "valid_for": seconds the request may wait in the queue}."""
    if value is None or value is False:
        return None
    if value is True:
        return {"tier": "spot"}
    return {"tier": value.tier, **({"valid_for": value.valid_for} if value.valid_for else {})}


def _zones(zone: str | list[str] | None) -> tuple[str, ...]:
    return tuple(zone) if isinstance(zone, list) else (zone,) if zone else ()


def _node_overrides(entry: MachineEntry) -> dict[str, Any]:
    """The create fields a tpu machine's own keys and its `node_spec` set (API field names)."""
    overrides: dict[str, Any] = {"acceleratorType": entry.accelerator}
    if entry.runtime_version:
        overrides["runtimeVersion"] = entry.runtime_version
    if entry.labels is not UNSET:
        overrides["labels"] = dict(entry.labels)
    scheduling: dict[str, bool] = {}
    if entry.preemptible is True:
        scheduling["preemptible"] = True
    elif entry.preemptible is False:  # on demand, neither preemptible nor spot
        scheduling.update(preemptible=False, spot=False)
    if entry.spot is not UNSET:
        scheduling.update(spot=entry.spot, **({"preemptible": False} if entry.spot else {}))
    if scheduling:
        overrides["schedulingConfig"] = scheduling
    node_spec: dict[str, Any] = msgspec.to_builtins(entry.node_spec) if entry.node_spec is not UNSET else {}
    for key, value in node_spec.items():
        if isinstance(value, dict) and isinstance(overrides.get(key), dict) and key != "labels":
            overrides[key] = {**overrides[key], **value}
        else:
            overrides[key] = value
    if "acceleratorConfig" in node_spec:
        overrides.pop("acceleratorType", None)
    if not overrides.get("runtimeVersion") and not default_runtime(entry.accelerator):
        raise _Refused(f"jobtpu does not know the runtime version for {entry.accelerator!r}: "
                       "set 'runtime_version' (like \"tpu-ubuntu2204-base\")")
    return overrides


# ---- msgspec's errors in machines.json's words ----------------------------------------------------

_T = TypeVar("_T")
_ERROR = re.compile(r"(?P<problem>.*?)(?: - at `\$(?P<at>.*)`)?", re.S)
_STEP = re.compile(r"\.([^.\[]+)|(\[[^\]]*\])")  # .name or [3] or [...] (a dict's value)
# The file as plain values, for the "(got ...)" of a message: 1e400 too, as inf (msgspec refuses it by default).
_ANY_VALUE = msgspec.json.Decoder(float_hook=float)
_UNSEEN = object()
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60


def _decode(data: bytes | Raw, kind: type[_T], owner: str | None) -> _T:
    """`data` as `kind`, or _Refused saying what is wrong where. `owner` is "machine 'x'" for one
    machine's entry, None for the file. Text that is not JSON raises msgspec.DecodeError."""
    try:
        try:
            return msgspec.json.decode(data, type=kind)
        except msgspec.ValidationError as e:
            problem = str(e)
        # msgspec stops at the first wrong type, unread text after it may not be JSON at all: that is
        # said first (this read raises), as a user would fix it first. (A machine's entry is JSON: the
        # file's read went through it.)
        raw = _ANY_VALUE.decode(data)
    except RecursionError:
        raise _Refused("nested too deeply to be a jobtpu file") from None
    raise _Refused(_explain(problem, kind, raw, owner))


def _explain(error: str, kind: type, raw: Any, owner: str | None) -> str:
    """One line from msgspec's error (`Expected `int`, got `str` - at `$.port``), the declared type's
    description and the value that was there."""
    match = _ERROR.fullmatch(error)
    problem, steps = (match["problem"], [name or index for name, index in _STEP.findall(match["at"] or "")]) \
        if match else (error, [])
    if unknown := re.fullmatch(r"Object contains unknown field `(.*)`", problem):
        return _unknown_key(kind, steps, unknown[1], owner)
    missing = re.fullmatch(r"Object missing required field `(.*)`", problem)
    if missing:
        steps = [*steps, missing[1]]
    # A list item's or a map value's fault is told as its container's: `'tags' must be a list of ...`.
    names = list(itertools.takewhile(lambda step: not step.startswith("["), steps))
    if not names:
        return f"{owner or 'the top level'} must be an object"
    prefix = f"{owner}: " if owner else ""
    value = _value_at(raw, names)
    if names == ["resources"] and isinstance(value, dict):
        try:
            _check_resources(value)
        except _Refused as e:
            return f"{prefix}{e}"
    key = ".".join(names)
    description = _description(_type_at(kind, names)) or f"is not valid ({problem})"
    if missing and names == steps:
        return f"{prefix}'{key}' is missing: it {description}"
    return f"{prefix}'{key}' {description}" + ("" if value is _UNSEEN else f" (got {_SHORT.repr(value)})")


def _unknown_key(kind: type, steps: list[str], key: str, owner: str | None) -> str:
    """`unknown key 'prot' in machine 'm' (valid: ...)`; in the file's own sections, `... in gcp`."""
    where = owner or (steps[0] if steps else "the top level")
    inside = steps if owner else steps[1:]
    path = "".join(step if step.startswith("[") else f".{step}" for step in [*inside, key]).lstrip(".")
    struct = _struct_in(_type_at(kind, [step for step in steps if not step.startswith("[")]))
    valid = f" (valid: {', '.join(_keys_of(struct))})" if struct else ""
    return f"unknown key {path!r} in {where}{valid}"


def _must(kind: type, *names: str) -> str:
    """What the schema says the key must be: "'zone' must be a zone, or ..."."""
    return f"'{'.'.join(names)}' {_description(_type_at(kind, list(names)))}"


def _value_at(raw: Any, names: list[str]) -> Any:
    for name in names:
        raw = raw.get(name, _UNSEEN) if isinstance(raw, dict) else _UNSEEN
    return raw


def _type_at(kind: Any, names: list[str]) -> Any:
    """The declared type (with its Annotated description) of the key at `names`; None past the schema."""
    declared = kind
    for name in names:
        struct = _struct_in(declared)
        if struct is None or name not in struct.__struct_fields__:
            return None
        declared = _hints(struct)[name]
    return declared


def _struct_in(declared: Any) -> type[Struct] | None:
    """The Struct a declared type holds, looking through Annotated, unions and list items."""
    if isinstance(declared, type) and issubclass(declared, Struct):
        return declared
    for arg in get_args(declared):
        found = _struct_in(arg)
        if found is not None:
            return found
    return None


def _description(declared: Any) -> str | None:
    if get_origin(declared) is Annotated:
        for meta in declared.__metadata__:
            if isinstance(meta, Meta) and meta.description:
                return meta.description
    return None


def _keys_of(struct: type[Struct]) -> tuple[str, ...]:
    """A Struct's keys, its own before those it inherits (a machine's `kind` before its connection keys)."""
    inherited: tuple[str, ...] = getattr(struct.__mro__[1], "__struct_fields__", ())
    return (*(key for key in struct.__struct_fields__ if key not in inherited), *inherited)


@cache
def _hints(struct: type[Struct]) -> dict[str, Any]:
    return get_type_hints(struct, include_extras=True)


def split_host(host: str, default_port: int) -> tuple[str, int]:
    """"addr" or "addr:port" (IPv6 as "[addr]:port") → (addr, port)."""
    def fail(message: str) -> ConfigError:
        return ConfigError(message)
    return _split_host(host, default_port, fail)


def _split_host(host: str, default_port: int, fail: Callable[[str], Exception]) -> tuple[str, int]:
    if host.startswith("["):
        addr, _, rest = host[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        addr, _, port_text = host.partition(":")
    else:
        addr, port_text = host, ""
    if not port_text:
        return addr, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise fail(f"host {host!r} has a bad port")
    return addr, int(port_text)

"""machines.json → the Fleet (docs/reference/machines-json.md §3): the loader, beside the files it
reads; schema/fleet.py holds the types.

msgspec decodes the file into its types (schema/machines_file.py); schema/decode.py says what a wrong
key holds. What a type cannot say (what each kind of machine needs, names that must not clash, the
keys that only make sense together) is checked by the small functions below. Every problem is one
line naming the file, the machine and the key, and changes nothing."""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jobtpu.errors import ConfigError
from jobtpu.home import slices, slurm_entry
from jobtpu.home.layout import Home
from jobtpu.home.safefs import CAP_CONFIG, UnsafePath, open_file, read_capped
from jobtpu.schema.decode import FileRefused, decode, must, plain_values, refuse_syntax
from jobtpu.schema.fleet import DEFAULT_ERROR_PATTERNS, NO_LIMIT, Fleet, Machine, MachineKind, UserLimit
from jobtpu.schema.machines_file import (
    BUILTIN_DEFAULTS,
    MACHINE_NAME,
    Connection,
    ErrorPatterns,
    LimitsEntry,
    MachineEntry,
    MachinesFile,
    QueuedResource,
    UserLimitEntry,
)
from jobtpu.schema.msgspec_lib import UNSET, Raw, UnsetType, msgspec
from jobtpu.schema.names import MAX_CONNECT_TIMEOUT, RESOURCE_NAME, USER_NAME
from jobtpu.schema.nodespec import default_runtime
from jobtpu.schema.request import MAX_RESOURCE_COUNT
from jobtpu.schema.resume_policy import DEFAULT, resume_policy

if typing.TYPE_CHECKING:  # the sheet's module is loaded only for a home that has one
    from jobtpu.schema.sheet_config import SheetConfig


def load_fleet(home: Home) -> Fleet:
    path = home.machines_file
    try:
        data = _machines_bytes(home)
    except UnsafePath as e:
        raise ConfigError(e.message, f"fix {path}; nothing was changed") from None
    if _plainly_own(data) and not os.path.lexists(home.root / "runner.json"):
        try:  # a private home's own file and no runner.json: read as it is (every command's path)
            return _fleet(_read(path, data[0] if data else None), home)
        except FileRefused as e:
            raise ConfigError(f"{path.name}: {e}", f"fix {path}; nothing was changed") from None
    from jobtpu.home.privileged import gate

    gated = gate(data, home.root)
    try:
        fleet = _fleet(_read(path, gated.data), home)
    except FileRefused as e:
        raise ConfigError(f"{path.name}: {e}", f"fix {path}; nothing was changed") from None
    if gated.refused or gated.refused_machines or gated.runner.problem:
        machines = {name: msgspec.structs.replace(m, refused=gated.refused_machines[name]) if name in gated.refused_machines else m
                    for name, m in fleet.machines.items()}
        fleet = msgspec.structs.replace(fleet, machines=machines, refused=gated.lines())
    return msgspec.structs.replace(fleet, runner=gated.runner) if gated.runner.runner or gated.runner.allow_private_webhooks else fleet


def check_machines(home: Home, data: bytes) -> None:
    """ConfigError unless `data` is a machines.json every command would load (`import` checks what it
    is about to write)."""
    try:
        _fleet(_read(home.machines_file, data), home)
    except FileRefused as e:
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
        return read_capped(fd, home.machines_file.name, CAP_CONFIG), os.fstat(fd)
    finally:
        os.close(fd)


def _read(path: Path, data: bytes | None) -> MachinesFile:
    if data is None:
        return MachinesFile()
    try:
        file: MachinesFile = decode(data, MachinesFile)
    except msgspec.DecodeError as e:  # not JSON at all (wrong types are decode's business)
        refuse_syntax(path, data, e)
    return file


def _fleet(doc: MachinesFile, home: Home) -> Fleet:
    if doc.gcp.recreate_backoff is not UNSET and doc.gcp.recreate_backoff < 0:
        raise FileRefused(f"{must(MachinesFile, 'gcp', 'recreate_backoff')} (got {doc.gcp.recreate_backoff!r})")
    entries = {"local": Raw(b'{"kind": "local"}')} if doc.machines is UNSET else doc.machines
    if not entries:
        raise FileRefused(must(MachinesFile, "machines"))
    defaults = Connection(**_connection(doc.defaults, BUILTIN_DEFAULTS))  # complete: no key left UNSET
    machines: dict[str, Machine] = {}
    for name, raw in entries.items():
        if not MACHINE_NAME.match(name):
            raise FileRefused(f"machine name {name!r} must be letters, digits, '.', '_' or '-'")
        entry = _entry(name, raw)
        try:
            made = slices.expand(_machine(name, entry, defaults, home))
        except FileRefused as e:
            raise FileRefused(f"machine {name!r}: {e}") from None
        slices.check_names(name, made, machines)
        machines.update(made)
    tpus = sorted(name for name, m in machines.items() if m.cloud_node)
    if tpus and not doc.gcp.project:
        # Said at load, by every command: found only when a pass first asks the TPU API, it came after
        # the pass had started writing to the home.
        raise FileRefused(f'TPU machines ({", ".join(tpus)}) need gcp.project: add "gcp": {{"project": "..."}}')
    _check_aliases(machines)
    patterns = error_patterns(doc.error_patterns)
    per_user, user_limits = _limits(doc.limits)
    fleet = Fleet(machines=machines, gcp=msgspec.to_builtins(doc.gcp), config_aliases=dict(doc.config_aliases),
                  error_patterns=patterns, per_user=per_user, user_limits=user_limits, sheet=_sheet(doc.sheet, home),
                  notify=_notify(doc.notify), resume=DEFAULT if doc.resume is UNSET else
                  resume_policy(doc.resume, (z for m in machines.values() for z in (*m.zones, m.zone) if z)),
                  classes=_classes(doc.priority_classes))
    # A tpu-manager tab names machines as people do (aliases, node names): the sheet asks the fleet.
    return msgspec.structs.replace(fleet, sheet=msgspec.structs.replace(fleet.sheet, resolve=fleet.resolve)) if fleet.sheet else fleet


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
    from jobtpu.decide.destinations import (
        parse_destinations,  # only a fleet that notifies loads urllib and subprocess
    )

    try:
        return parse_destinations(msgspec.json.decode(raw), "notify")
    except ConfigError as e:
        raise FileRefused(e.message) from None


def _classes(raw: Raw | UnsetType) -> Any:
    from jobtpu.schema.priority import parse_classes  # its refusals are FileRefused lines

    return None if raw is UNSET else parse_classes(msgspec.json.decode(raw))


def _limits(entry: LimitsEntry) -> tuple[UserLimit, dict[str, UserLimit]]:
    """The team's per-user limits, and each named user's (their keys over the team's)."""

    def merged(own: UserLimitEntry, base: UserLimit) -> UserLimit:
        return UserLimit(**{key: getattr(base, key) if getattr(own, key) is UNSET else getattr(own, key)
                            for key in UserLimitEntry.__struct_fields__})

    per_user = merged(entry.per_user, NO_LIMIT)
    for name in entry.users:
        if not USER_NAME.match(name):
            raise FileRefused(f"limits.users: {name[:40]!r} is not a user name")
    return per_user, {name: merged(own, per_user) for name, own in entry.users.items()}


def _sheet(raw: Raw | UnsetType, home: Home) -> SheetConfig | None:
    if raw is UNSET:
        return None
    from jobtpu.schema.sheet_config import parse_config  # only a home with a sheet loads it

    return parse_config(msgspec.json.decode(raw), where=home.machines_file.name)


def _entry(name: str, raw: Raw) -> MachineEntry:
    """One machine's entry as its type; a wrong resource is named by its own check."""
    try:
        entry: MachineEntry = decode(raw, MachineEntry, owner=f"machine {name!r}")
    except FileRefused as e:
        if str(e).startswith(f"machine {name!r}: 'resources'"):
            doc = plain_values(raw)
            if isinstance(doc, dict) and isinstance(doc.get("resources"), dict):
                try:
                    _check_resources(doc["resources"])
                except FileRefused as named:
                    raise FileRefused(f"machine {name!r}: {named}") from None
        raise
    return entry


def _machine(name: str, entry: MachineEntry, defaults: Connection, home: Home) -> Machine:
    _check_kind(entry)
    slices.check_slices(entry)
    _check_resources(entry.resources)
    connection = _connection(entry, defaults)
    _check_connection(connection, "defaults.connect_timeout" if entry.connect_timeout is UNSET else "connect_timeout")
    zones = _zones(entry.zone)
    queued = slices.queued_of(entry, _queued_resource(entry.queued_resource))
    if queued and len(zones) > 1 and not queued.get("valid_for"):
        # A queued resource waits in its zone until it is served or its valid_for ends: without an
        # end it would never give the next zone its turn.
        raise FileRefused("a queued resource with several zones needs queued_resource.valid_for "
                       "(how long to wait in one zone before asking in the next, like 3600)")
    worked_out: dict[str, Any] = dict(
        name=name, kind=MachineKind(entry.kind), hosts=_hosts(entry), zone=zones[0] if zones else None, zones=zones,
        preemptible=bool(entry.preemptible is True or entry.spot is True or (queued or {}).get("tier") == "spot"),
        spot=entry.spot is True, node_overrides=_node_overrides(entry) if entry.kind == "tpu" else {},
        queued_resource=queued, labels=dict(entry.labels or {}), user=connection["user"], port=connection["port"],
        identity_file=connection["identity_file"], root=_root(entry, connection["root"], home),
        host_key_policy=connection["host_key_policy"], connect_timeout=float(connection["connect_timeout"]),
        peer_addresses=tuple(entry.peer_addresses or ()))
    as_written = {key: getattr(entry, key) for key in MachineEntry.__struct_fields__}
    return Machine(**{**as_written, **worked_out})


# ---- what the types cannot say -------------------------------------------------------------------

def _check_peer_addresses(entry: MachineEntry) -> None:
    """One address per worker (an ssh machine's hosts; a TPU's workers are checked when the API lists them)."""
    given = entry.peer_addresses or ()
    if entry.kind == "local":
        raise FileRefused("'peer_addresses' is only for ssh and tpu machines (a local machine has one worker)")
    if not given or not all(a.strip() and a.strip() == a and " " not in a for a in given):
        raise FileRefused(f"{must(MachineEntry, 'peer_addresses')} (got {list(given)!r})")
    if entry.kind == "ssh" and len(given) != len(entry.hosts or ()):
        raise FileRefused(f"'peer_addresses' names {len(given)} addresses for {len(entry.hosts or ())} hosts: "
                          "give one per host, in the order of 'hosts'")


def _hosts(entry: MachineEntry) -> tuple[str, ...]:
    """The hosts jobtpu reaches: an ssh machine's, a Slurm cluster's login host."""
    return (entry.host,) if isinstance(entry.host, str) else entry.hosts or ()


def _check_kind(entry: MachineEntry) -> None:
    """The keys one kind needs and another refuses."""
    slurm_entry.check(entry, lambda host: _split_host(host, 22, FileRefused))
    if entry.kind != "ssh" and entry.hosts is not UNSET:
        raise FileRefused("'hosts' is only for kind ssh (a tpu's workers come from the TPU API)")
    if entry.kind == "ssh":
        if not entry.hosts or not all(entry.hosts):
            raise FileRefused("an ssh machine needs 'hosts', a non-empty list of \"addr\" or \"addr:port\"")
        for host in entry.hosts:
            _split_host(host, 22, FileRefused)
    if entry.slices is not UNSET and entry.kind != "tpu":
        raise FileRefused("'slices' is only for kind tpu (slices of one queued resource)")
    if entry.peer_addresses is not UNSET:
        _check_peer_addresses(entry)
    if entry.kind == "tpu":
        for key in ("node", "accelerator", "zone"):
            if not getattr(entry, key):
                raise FileRefused(f"a tpu machine needs '{key}'")
        if isinstance(entry.zone, list) and (not all(entry.zone) or len(set(entry.zone)) != len(entry.zone)):
            raise FileRefused(f"{must(MachineEntry, 'zone')} (got {entry.zone!r})")


def _check_aliases(machines: Mapping[str, Machine]) -> None:
    """Each alias names one machine: a valid name, not another machine's name or alias."""
    owner: dict[str, str] = {}
    for machine in machines.values():
        for alias in machine.aliases:
            if not MACHINE_NAME.match(alias):
                raise FileRefused(f"machine {machine.name!r}: alias {alias!r} must be letters, digits, '.', '_' or '-'")
            taken = alias if alias in machines else owner.get(alias)
            if taken is not None and taken != machine.name:
                raise FileRefused(f"machine {machine.name!r}: alias {alias!r} already names machine {taken!r}")
            owner[alias] = machine.name


def _check_resources(resources: Mapping[str, object]) -> None:
    """Also given the file's raw object when its types are wrong, to name the resource at fault."""
    for res, count in resources.items():
        if not RESOURCE_NAME.match(res) or not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise FileRefused(f"resource {res!r} must be a lowercase name with a count ≥ 0")
        if count > MAX_RESOURCE_COUNT:
            raise FileRefused(f"resource {res!r} count {count} is more than jobtpu hands out "
                           f"({MAX_RESOURCE_COUNT} at most)")


def _connection(entry: Connection, defaults: Connection) -> dict[str, Any]:
    """Each connection key from the machine, else from `defaults`."""
    values = {}
    for key in Connection.__struct_fields__:
        value = getattr(entry, key)
        values[key] = getattr(defaults, key) if value is UNSET else value
    return values


def _check_connection(values: dict[str, Any], timeout_key: str = "connect_timeout") -> None:
    port, timeout = values["port"], values["connect_timeout"]
    if port is None or not 0 < port < 65536:
        raise FileRefused(f"port {port} is out of range")
    if timeout is None or timeout <= 0:
        raise FileRefused("connect_timeout must be positive")
    if timeout > MAX_CONNECT_TIMEOUT:  # a host that never answers must not hold every pass for a day
        raise FileRefused(f"{timeout_key} {timeout:g} is over {MAX_CONNECT_TIMEOUT} seconds, the most a pass "
                          "waits to reach a host")


def _root(entry: MachineEntry, root: str | None, home: Home) -> str:
    if entry.kind == "local":
        # The local machine's folder lives in the home unless its own entry says otherwise
        # (`defaults.root` is for remote machines): `"root": null` means the default, "~/runs" the user's runs.
        own = entry.root
        return str(home.local_run_root if own is UNSET or own is None else Path(home.root, Path(own).expanduser()))
    root = root or "jobtpu"
    if root == "~" or root.startswith("~/"):  # scripts quote the root, so "~" would be a literal folder
        root = root[2:] or "."
    return slurm_entry.here_root(root) if entry.kind == "slurm" and entry.host is UNSET else root


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
        raise FileRefused(f"jobtpu does not know the runtime version for {entry.accelerator!r}: "
                       "set 'runtime_version' (like \"tpu-ubuntu2204-base\")")
    return overrides


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

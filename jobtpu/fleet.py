"""machines.json → frozen Machine specs and team settings, validated key by key (docs/reference.md §3)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError, NotFoundError
from .home import Home
from .requests import MAX_RESOURCE_COUNT
from .store import parse_json_file

KINDS = ("local", "ssh", "tpu")
HOST_KEY_POLICIES = ("strict", "accept-new", "off")
ERROR_CLASSES = ("grpc", "oom")
DEFAULT_ERROR_PATTERNS: dict[str, tuple[str, ...]] = {
    "grpc": ("GRPC error", "DEADLINE_EXCEEDED", "Socket closed", "failed to connect to all addresses",
             "UNAVAILABLE: ", "StatusCode.UNAVAILABLE"),
    "oom": ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OutOfMemoryError",
            "CUDA out of memory", "Ran out of memory in memory space"),
}

_TOP_KEYS = ("defaults", "gcp", "machines", "config_aliases", "error_patterns")
_CONNECTION_KEYS = ("user", "port", "identity_file", "root", "host_key_policy", "connect_timeout")
_MACHINE_KEYS = ("kind", "hosts", "resources", "accelerator", "preemptible", "node", "zone",
                 "runtime_version", "setup", "use_external_ip", "labels", "spot", "node_spec", "queued_resource",
                 *_CONNECTION_KEYS)
_GCP_KEYS = ("project", "api_endpoint", "credentials", "recreate_backoff")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_RESOURCE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")

BUILTIN_DEFAULTS: dict[str, Any] = {"user": None, "port": 22, "identity_file": None, "root": "jobtpu",
                                    "host_key_policy": "accept-new", "connect_timeout": 10}


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

    def get(self, name: str) -> Machine | None:
        return self.machines.get(name)

    def require(self, name: str) -> Machine:
        """The machine, or the one error every command gives for a name it does not know."""
        machine = self.machines.get(name)
        if machine is None:
            raise NotFoundError(f"unknown machine {name!r}", hint=f"machines in machines.json: {', '.join(self.machines)}")
        return machine


def load_fleet(home: Home) -> Fleet:
    path = home.machines_file
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return fleet_from_json({}, path, home)
    return fleet_from_json(parse_json_file(path, text), path, home)


def fleet_from_json(data: Any, path: Path, home: Home) -> Fleet:
    where = path.name
    hint = f"fix {path}; nothing was changed"

    def fail(message: str) -> ConfigError:
        return ConfigError(f"{where}: {message}", hint)

    def check_keys(obj: Any, valid: tuple[str, ...], label: str) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise fail(f"{label} must be an object")
        for key in obj:
            if key not in valid:
                raise fail(f"unknown key {key!r} in {label} (valid: {', '.join(valid)})")
        return obj

    top = check_keys(data, _TOP_KEYS, "the top level")
    defaults = dict(BUILTIN_DEFAULTS)
    defaults.update(check_keys(top.get("defaults", {}), _CONNECTION_KEYS, "defaults"))
    gcp = check_keys(top.get("gcp", {}), _GCP_KEYS, "gcp")
    for key in ("project", "api_endpoint", "credentials"):
        if gcp.get(key) is not None and not isinstance(gcp[key], str):
            raise fail(f"gcp.{key} must be a string")
    backoff = gcp.get("recreate_backoff", 30)
    if not isinstance(backoff, int | float) or isinstance(backoff, bool) or backoff < 0:
        raise fail("gcp.recreate_backoff must be a number of seconds (the first retry's wait; it doubles)")

    raw_machines = top.get("machines", {"local": {"kind": "local"}})
    if not isinstance(raw_machines, dict) or not raw_machines:
        raise fail("'machines' must be a non-empty object of name → machine")
    machines: dict[str, Machine] = {}
    for name, spec in raw_machines.items():
        if not _NAME.match(name):
            raise fail(f"machine name {name!r} must be letters, digits, '.', '_' or '-'")
        check_keys(spec, _MACHINE_KEYS, f"machine {name!r}")
        machines[name] = _machine(name, spec, defaults, home, fail)

    aliases = top.get("config_aliases", {})
    if not isinstance(aliases, dict) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                for k, v in aliases.items()):
        raise fail("config_aliases must map short names to config keys (strings)")
    patterns = dict(DEFAULT_ERROR_PATTERNS)
    raw_patterns = check_keys(top.get("error_patterns", {}), ERROR_CLASSES, "error_patterns")
    for key, value in raw_patterns.items():
        if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
            raise fail(f"error_patterns.{key} must be a list of non-empty strings")
        patterns[key] = tuple(value)
    return Fleet(machines=machines, gcp=gcp, config_aliases=aliases, error_patterns=patterns)


def _machine(name: str, spec: dict[str, Any], defaults: dict[str, Any], home: Home, fail: Any) -> Machine:
    label = f"machine {name!r}"
    kind = spec.get("kind")
    if kind not in KINDS:
        raise fail(f"{label}: 'kind' must be one of {', '.join(KINDS)} (got {kind!r})")
    merged = {**defaults, **spec}

    def typed(key: str, types: type | tuple[type, ...], what: str) -> Any:
        value = merged.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool) and bool not in (
                types if isinstance(types, tuple) else (types,))):
            raise fail(f"{label}: '{key}' must be {what}")
        return value

    hosts = spec.get("hosts", [])
    if kind == "ssh":
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
            raise fail(f"{label}: an ssh machine needs 'hosts', a non-empty list of \"addr\" or \"addr:port\"")
        for host in hosts:
            _split_host(host, 22, lambda m: fail(f"{label}: {m}"))
    elif "hosts" in spec:
        raise fail(f"{label}: 'hosts' is only for kind ssh (a tpu's workers come from the TPU API)")
    if kind == "tpu":
        for key in ("node", "accelerator"):
            if not isinstance(spec.get(key), str) or not spec[key]:
                raise fail(f"{label}: a tpu machine needs '{key}'")
        zone = spec.get("zone")
        if not zone:
            raise fail(f"{label}: a tpu machine needs 'zone'")
        if not isinstance(zone, str) and not (
                isinstance(zone, list) and zone and all(isinstance(z, str) and z for z in zone) and len(set(zone)) == len(zone)):
            raise fail(f"{label}: 'zone' must be a zone, or a list of distinct zones in order of preference "
                       "(capacity errors move the node to the next)")
    resources = spec.get("resources", {})
    if not isinstance(resources, dict):
        raise fail(f"{label}: 'resources' must map resource names to counts")
    for res, count in resources.items():
        if not _RESOURCE.match(res) or not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise fail(f"{label}: resource {res!r} must be a lowercase name with a count ≥ 0")
        if count > MAX_RESOURCE_COUNT:
            raise fail(f"{label}: resource {res!r} count {count} is more than jobtpu hands out "
                       f"({MAX_RESOURCE_COUNT} at most)")
    setup = spec.get("setup", [])
    if not isinstance(setup, list) or not all(isinstance(c, str) for c in setup):
        raise fail(f"{label}: 'setup' must be a list of shell commands")
    labels = spec.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise fail(f"{label}: 'labels' must map strings to strings")
    policy = merged.get("host_key_policy")
    if policy not in HOST_KEY_POLICIES:
        raise fail(f"{label}: host_key_policy must be one of {', '.join(HOST_KEY_POLICIES)}")
    port = typed("port", int, "an integer port")
    if port is None or not 0 < port < 65536:
        raise fail(f"{label}: port {port} is out of range")
    timeout = typed("connect_timeout", (int, float), "a number of seconds")
    if timeout is None or timeout <= 0:
        raise fail(f"{label}: connect_timeout must be positive")
    for key in ("user", "identity_file", "root", "accelerator", "runtime_version"):
        typed(key, str, "a string")
    for key in ("preemptible", "spot", "use_external_ip"):
        if not isinstance(spec.get(key, False), bool):
            raise fail(f"{label}: '{key}' must be true or false")
    overrides = _node_overrides(spec, lambda m: fail(f"{label}: {m}")) if kind == "tpu" else {}
    queued = _queued_resource(spec.get("queued_resource"), lambda m: fail(f"{label}: {m}"))
    if queued and len(_zones(spec)) > 1 and not queued.get("valid_for"):
        # A queued resource waits in its zone until it is served or its valid_for ends: without an
        # end it would never give the next zone its turn.
        raise fail(f"{label}: a queued resource with several zones needs queued_resource.valid_for "
                   "(how long to wait in one zone before asking in the next, like 3600)")
    root = merged["root"] or "jobtpu"
    if root == "~" or root.startswith("~/"):  # scripts quote the root, so "~" would be a literal folder
        root = root[2:] or "."
    if kind == "local":
        # The local machine's folder lives in the home unless machines.json says otherwise.
        # Built from the checked value: `"root": null` means the default, and "~/runs" the user's runs.
        local_root = spec.get("root")
        root = str(home.local_run_root if local_root is None else Path(home.root, Path(local_root).expanduser()))
    return Machine(
        name=name, kind=kind, hosts=tuple(hosts), resources=dict(resources),
        accelerator=spec.get("accelerator"), preemptible=bool(spec.get("preemptible") or spec.get("spot")
                                                       or (queued or {}).get("tier") == "spot"),
        spot=spec.get("spot", False), node_overrides=overrides, queued_resource=queued, node=spec.get("node"), zone=_zones(spec)[0] if kind == "tpu" else spec.get("zone"), zones=_zones(spec),
        runtime_version=spec.get("runtime_version"),
        setup=tuple(setup), use_external_ip=spec.get("use_external_ip", False), labels=dict(labels),
        user=merged.get("user"), port=port, identity_file=merged.get("identity_file"), root=root,
        host_key_policy=policy, connect_timeout=float(timeout),
    )


QUEUED_TIERS = ("spot", "guaranteed", "best-effort")


def _queued_resource(value: Any, fail: Any) -> dict[str, Any] | None:
    """`true` (spot), or {"tier": ..., "valid_for": seconds the request may wait in the queue}."""
    if value is None or value is False:
        return None
    if value is True:
        return {"tier": "spot"}
    if not isinstance(value, dict) or set(value) - {"tier", "valid_for"}:
        raise fail('\'queued_resource\' must be true or {"tier": "spot", "valid_for": 86400}')
    tier = value.get("tier", "spot")
    if tier not in QUEUED_TIERS:
        raise fail(f"queued_resource.tier must be one of {', '.join(QUEUED_TIERS)}")
    valid_for = value.get("valid_for")
    if valid_for is not None and (not isinstance(valid_for, int) or isinstance(valid_for, bool) or valid_for <= 0):
        raise fail("queued_resource.valid_for must be a number of seconds > 0")
    return {"tier": tier, **({"valid_for": valid_for} if valid_for else {})}


def _zones(spec: dict[str, Any]) -> tuple[str, ...]:
    zone = spec.get("zone")
    return tuple(zone) if isinstance(zone, list) else (zone,) if isinstance(zone, str) else ()


def _node_overrides(spec: dict[str, Any], fail: Any) -> dict[str, Any]:
    """The create fields a tpu machine's own keys and its `node_spec` set (API field names)."""
    from .nodespec import check_overrides, default_runtime

    overrides: dict[str, Any] = {"acceleratorType": spec["accelerator"]}
    if spec.get("runtime_version"):
        overrides["runtimeVersion"] = spec["runtime_version"]
    if "labels" in spec:
        overrides["labels"] = dict(spec["labels"])
    scheduling: dict[str, bool] = {}
    if spec.get("preemptible") is True:
        scheduling["preemptible"] = True
    elif "preemptible" in spec:  # false: on demand, neither preemptible nor spot
        scheduling.update(preemptible=False, spot=False)
    if "spot" in spec:
        scheduling.update(spot=spec["spot"], **({"preemptible": False} if spec["spot"] else {}))
    if scheduling:
        overrides["schedulingConfig"] = scheduling
    for key, value in check_overrides(spec.get("node_spec", {}), fail).items():
        if isinstance(value, dict) and isinstance(overrides.get(key), dict) and key != "labels":
            overrides[key] = {**overrides[key], **value}
        else:
            overrides[key] = value
    if "acceleratorConfig" in spec.get("node_spec", {}):
        overrides.pop("acceleratorType", None)
    if not overrides.get("runtimeVersion") and not default_runtime(spec["accelerator"]):
        raise fail(f"jobtpu does not know the runtime version for {spec['accelerator']!r}: "
                   "set 'runtime_version' (like \"tpu-ubuntu2204-base\")")
    return overrides


def split_host(host: str, default_port: int) -> tuple[str, int]:
    """"addr" or "addr:port" (IPv6 as "[addr]:port") → (addr, port)."""
    def fail(message: str) -> ConfigError:
        return ConfigError(message)
    return _split_host(host, default_port, fail)


def _split_host(host: str, default_port: int, fail: Any) -> tuple[str, int]:
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

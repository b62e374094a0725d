"""A TPU node's create spec, in the TPU API's own JSON field names: what is recorded from a node that
exists, what machines.json may override, gcloud's defaults for the rest, and the create body built
from the three. Pure: no google-cloud import (tpu.py turns the body into a request)."""

from typing import TYPE_CHECKING, Annotated, Any

from jobtpu.schema.accelerator import TWO_CORES_A_CHIP
from jobtpu.schema.accelerator import accelerator as parse_accelerator
from jobtpu.schema.msgspec_lib import UNSET, Meta, Struct, UnsetType

if TYPE_CHECKING:
    from jobtpu.schema.records import MachineRecord

NonEmptyText = Annotated[str, Meta(min_length=1)]
# Each field's Meta description ends the sentence "'node_spec.field' ..." of the error a wrong value gets.
_Flag = Annotated[bool | UnsetType, Meta(description="must be true or false")]
_Word = Annotated[NonEmptyText | UnsetType, Meta(description="must be a non-empty string")]
_Object = Meta(description="must be an object")


class _ApiObject(Struct, forbid_unknown_fields=True):
    """A TPU API object as machines.json may give it: only the fields the API takes, each of its type;
    a field left out stays UNSET and so is not sent (nor overrides what was recorded)."""


class NetworkConfig(_ApiObject):
    network: Annotated[str | UnsetType, Meta(description="must be a network name")] = UNSET
    subnetwork: Annotated[str | UnsetType, Meta(description="must be a subnetwork name")] = UNSET
    enableExternalIps: _Flag = UNSET
    canIpForward: _Flag = UNSET


class SchedulingConfig(_ApiObject):
    preemptible: _Flag = UNSET
    spot: _Flag = UNSET
    reserved: _Flag = UNSET


class ServiceAccount(_ApiObject):
    email: Annotated[str | UnsetType, Meta(description="must be a service account's email")] = UNSET
    scope: Annotated[list[str] | UnsetType, Meta(description="must be a list of OAuth scopes (strings)")] = UNSET


class ShieldedInstanceConfig(_ApiObject):
    enableSecureBoot: _Flag = UNSET


class AcceleratorConfig(_ApiObject):
    type: Annotated[str | UnsetType, Meta(description='must be a TPU generation, like "V4"')] = UNSET
    topology: Annotated[str | UnsetType, Meta(description='must be a topology, like "2x2x4"')] = UNSET


class DataDisk(_ApiObject):
    sourceDisk: str
    mode: str | UnsetType = UNSET


class NodeSpec(_ApiObject):
    """Everything `nodes.create` accepts that describes the node (not its name or output-only fields),
    in the API's own JSON names: the fields recordable() keeps from a node, and machines.json's `node_spec`."""

    acceleratorType: _Word = UNSET
    acceleratorConfig: Annotated[AcceleratorConfig | UnsetType, _Object] = UNSET
    runtimeVersion: _Word = UNSET
    networkConfig: Annotated[NetworkConfig | UnsetType, _Object] = UNSET
    serviceAccount: Annotated[ServiceAccount | UnsetType, _Object] = UNSET
    schedulingConfig: Annotated[SchedulingConfig | UnsetType, _Object] = UNSET
    dataDisks: Annotated[list[DataDisk] | UnsetType, Meta(
        description='must be a list of {"sourceDisk": "projects/…/disks/…", "mode": "READ_WRITE"}')] = UNSET
    labels: Annotated[dict[str, str] | UnsetType, Meta(description="must map strings to strings")] = UNSET
    metadata: Annotated[dict[str, str] | UnsetType, Meta(description="must map strings to strings")] = UNSET
    tags: Annotated[list[NonEmptyText] | UnsetType, Meta(
        description="must be a list of network tags (strings)")] = UNSET
    shieldedInstanceConfig: Annotated[ShieldedInstanceConfig | UnsetType, _Object] = UNSET
    description: _Word = UNSET


CREATE_FIELDS: tuple[str, ...] = NodeSpec.__struct_fields__
# Sub-objects merged key by key: `{"networkConfig": {"enableExternalIps": false}}` keeps the network.
_OBJECT_FIELDS: dict[str, tuple[str, ...]] = {
    "networkConfig": NetworkConfig.__struct_fields__, "schedulingConfig": SchedulingConfig.__struct_fields__,
    "serviceAccount": ServiceAccount.__struct_fields__,
    "shieldedInstanceConfig": ShieldedInstanceConfig.__struct_fields__,
    "acceleratorConfig": AcceleratorConfig.__struct_fields__,
}

# gcloud's `--version` default follows the accelerator's generation; other generations must say.
RUNTIME_BY_GENERATION = {
    "v2": "tpu-ubuntu2204-base", "v3": "tpu-ubuntu2204-base", "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite", "v5e": "v2-alpha-tpuv5-lite", "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}
_CONFIG_GENERATION = {"V2": "v2", "V3": "v3", "V4": "v4", "V5LITE_POD": "v5litepod", "V5P": "v5p", "V6E": "v6e"}


def default_runtime(accelerator: str | None) -> str | None:
    """gcloud's runtime version for an accelerator type like "v5p-8"; None for a generation jobtpu
    does not know."""
    found = parse_accelerator((accelerator or "").lower())
    if found is None or found.or_newer:  # `v3+` is a request's pattern, no type to create
        return None
    return RUNTIME_BY_GENERATION.get(found.generation) or RUNTIME_BY_GENERATION.get(
        _CONFIG_GENERATION.get(found.generation.upper(), ""))


def type_of_config(config: Any) -> str | None:
    """The type name an acceleratorConfig stands for: {"type": "V4", "topology": "2x2x4"} → "v4-32"
    (v2/v3/v4/v5p names count TensorCores, two a chip; v5e/v6e names count chips)."""
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        return None
    generation = _CONFIG_GENERATION.get(config["type"].upper())
    parts = str(config.get("topology") or "").split("x")
    if generation is None or not all(part.isdigit() for part in parts):
        return None
    chips = 1
    for part in parts:
        chips *= int(part)
    return f"{generation}-{chips * 2 if generation in TWO_CORES_A_CHIP else chips}"


def recordable(node: dict[str, Any]) -> dict[str, Any]:
    """The create fields of a node as the API returned it (camelCase JSON, enums by name), without
    empty values. Booleans are kept even when false: a node without external IPs says so."""
    import copy  # here: only a TPU's records need it, and its import costs every command 0.7 ms

    spec: dict[str, Any] = {}
    for key in CREATE_FIELDS:
        value = node.get(key)
        if key in _OBJECT_FIELDS and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k in _OBJECT_FIELDS[key] and v not in ("", [], None)}
        if key == "dataDisks" and isinstance(value, list):
            value = [{k: v for k, v in d.items() if k in DataDisk.__struct_fields__} for d in value if isinstance(d, dict)]
        if value in ("", [], {}, None):
            continue
        spec[key] = copy.deepcopy(value)
    return spec


def create_body(recorded: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """What to create: the recorded spec, machines.json's overrides on top, gcloud's defaults where
    neither says anything."""
    import copy

    body = copy.deepcopy(recorded)
    for key, value in overrides.items():
        if key in _OBJECT_FIELDS and isinstance(body.get(key), dict):
            body[key] = {**body[key], **copy.deepcopy(value)}
        else:
            body[key] = copy.deepcopy(value)
    _one_accelerator(body, recorded, overrides)
    scheduling = body.get("schedulingConfig") or {}
    if scheduling.get("spot") and scheduling.get("preemptible"):  # the API takes one: Spot, as Google advises
        scheduling["preemptible"] = False
    network = body.setdefault("networkConfig", {})
    network.setdefault("enableExternalIps", True)  # gcloud's default; the raw API gives none
    if not body.get("runtimeVersion"):
        accelerator = body.get("acceleratorType") or (body.get("acceleratorConfig") or {}).get("type")
        runtime = default_runtime(accelerator)
        if runtime:
            body["runtimeVersion"] = runtime
    return body


def _one_accelerator(body: dict[str, Any], recorded: dict[str, Any], overrides: dict[str, Any]) -> None:
    """The API takes one way to name the accelerator. An override's config wins; a recorded config
    (it carries a topology, like 4x4 rather than 2x8, that a type name does not) is kept while it
    still describes the accelerator machines.json names; else the type."""
    import copy

    if "acceleratorConfig" in overrides:
        body.pop("acceleratorType", None)
        return
    config = recorded.get("acceleratorConfig")
    wanted = overrides.get("acceleratorType") or recorded.get("acceleratorType")
    described = type_of_config(config) or recorded.get("acceleratorType")
    if config and (not wanted or described == wanted):
        body["acceleratorConfig"] = copy.deepcopy(config)
        body.pop("acceleratorType", None)
    else:
        body.pop("acceleratorConfig", None)


def for_zone(spec: dict[str, Any], recorded_in: str | None, zone: str) -> dict[str, Any]:
    """The recorded spec for a create in `zone`: disks are zonal and subnetworks regional, so a node
    moved to another zone leaves its data disks behind, and one moved to another region its subnetwork
    (machines.json's node_spec may name the one to use there)."""
    if not recorded_in or recorded_in == zone:
        return spec
    moved = {k: v for k, v in spec.items() if k != "dataDisks"}
    if _region(recorded_in) != _region(zone) and "subnetwork" in moved.get("networkConfig", {}):
        moved["networkConfig"] = {k: v for k, v in moved["networkConfig"].items() if k != "subnetwork"}
    return moved


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def provisioning(machine: Any, record: "MachineRecord") -> str:
    """spot, preemptible or on-demand: what the node is (its recorded spec), else what machines.json asks."""
    asked = {**(record.spec or {}).get("schedulingConfig", {}),
             **machine.node_overrides.get("schedulingConfig", {})} if machine.cloud_node else {}
    if asked.get("spot") or (machine.cloud_node and (machine.queued_resource or {}).get("tier") == "spot"):
        return "spot"
    return "preemptible" if asked.get("preemptible") else "on-demand"

"""machines.json as msgspec types (docs/reference/machines-json.md §3): their types say what each key
holds, and a key they do not name is refused, so a typo never passes silently. Each key's Meta
description ends the sentence "'key' ..." of the error a wrong value gets (schema/decode.py)."""

import re
from typing import Annotated, Literal

from jobtpu.schema.msgspec_lib import UNSET, Meta, Raw, Struct, UnsetType, msgspec
from jobtpu.schema.nodespec import NodeSpec, NonEmptyText

MAX_SLICES = 64  # slices one machines.json entry may declare (each becomes a machine of the fleet)
MACHINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")  # what a machine's name or alias may be


_Text = Annotated[str | None | UnsetType, Meta(description="must be a string")]
_OptionalText = Annotated[str | None, Meta(description="must be a string")]
_Flag = Annotated[bool | UnsetType, Meta(description="must be true or false")]
_Object = Meta(description="must be an object")


class _Keys(Struct, forbid_unknown_fields=True, frozen=True):
    """An object of machines.json: only the keys its class names (read, never changed)."""


class Connection(_Keys, frozen=True):
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


class QueuedResource(_Keys, frozen=True):
    tier: Annotated[Literal["spot", "guaranteed", "best-effort"], Meta(
        description="must be one of spot, guaranteed, best-effort")] = "spot"
    valid_for: Annotated[Annotated[int, Meta(gt=0)] | None, Meta(
        description="must be a number of seconds > 0")] = None  # how long the request may wait in a zone


class MachineEntry(Connection, frozen=True, kw_only=True):
    """One machine. Which keys each kind needs or refuses is checked after decoding (_check_kind).
    The runtime Machine (schema/fleet.py) is this entry, with the keys worked out from it redeclared."""

    kind: Annotated[Literal["local", "ssh", "tpu", "slurm"], Meta(description="must be one of local, ssh, tpu, slurm")]
    hosts: Annotated[tuple[str, ...] | UnsetType, Meta(
        description='must be a non-empty list of "addr" or "addr:port"')] = UNSET
    resources: Annotated[dict[str, int], Meta(description="must map resource names to counts")] = {}
    accelerator: _OptionalText = None
    preemptible: _Flag = UNSET
    node: _OptionalText = None
    zone: Annotated[str | list[str] | None, Meta(
        description="must be a zone, or a list of distinct zones in order of preference "
                    "(capacity errors move the node to the next)")] = None
    runtime_version: _OptionalText = None
    setup: Annotated[tuple[str, ...], Meta(description="must be a list of shell commands")] = ()
    use_external_ip: Annotated[bool, Meta(description="must be true or false")] = False
    labels: Annotated[dict[str, str] | UnsetType, Meta(description="must map strings to strings")] = UNSET
    spot: _Flag = UNSET
    node_spec: Annotated[NodeSpec | UnsetType, Meta(description="must be an object of TPU API create fields")] = UNSET
    queued_resource: Annotated[bool | QueuedResource | None, Meta(
        description='must be true or {"tier": "spot", "valid_for": 86400}')] = None
    aliases: Annotated[tuple[str, ...], Meta(description="must be a list of other names for the machine")] = ()
    peer_addresses: Annotated[tuple[str, ...] | UnsetType, Meta(
        description="must be a list of addresses, one per worker, where the other workers reach it")] = UNSET
    # A tpu entry of N slices: N machines <name>-0…, one multislice queued resource (home/slices.py).
    slices: Annotated[Annotated[int, Meta(ge=2, le=MAX_SLICES)] | UnsetType, Meta(
        description=f"must be a whole number of slices from 2 to {MAX_SLICES}")] = UNSET
    # A Slurm cluster's (kind slurm): its login host, and what each sbatch asks for, in Slurm's words.
    host: Annotated[str | UnsetType, Meta(description='must be the login host, "addr" or "addr:port"')] = UNSET
    partition: _OptionalText = None
    account: _OptionalText = None
    qos: _OptionalText = None
    constraint: _OptionalText = None


class Gcp(_Keys, frozen=True):
    project: _Text = UNSET
    api_endpoint: _Text = UNSET
    credentials: _Text = UNSET
    recreate_backoff: Annotated[int | float | UnsetType, Meta(
        description="must be a number of seconds ≥ 0 (the first retry's wait; it doubles)")] = UNSET


class ErrorPatterns(_Keys, frozen=True):
    """A class given replaces that class's default list, or adds to it with `"extend": true`."""

    grpc: Annotated[list[NonEmptyText] | UnsetType, Meta(description="must be a list of non-empty strings")] = UNSET
    oom: Annotated[list[NonEmptyText] | UnsetType, Meta(description="must be a list of non-empty strings")] = UNSET
    extend: Annotated[bool, Meta(description="must be true or false")] = False


_Limit = Annotated[Annotated[int, Meta(ge=0)] | None | UnsetType, Meta(description="must be a whole number ≥ 0, or null (no limit)")]


class UserLimitEntry(_Keys, frozen=True):
    """How much of the fleet one user's jobs may hold at once (launching, running or stopping)."""

    jobs: _Limit = UNSET
    machines: _Limit = UNSET
    tpu_machines: _Limit = UNSET


class LimitsEntry(_Keys, frozen=True):
    per_user: Annotated[UserLimitEntry, _Object] = msgspec.field(default_factory=UserLimitEntry)
    # Named users' own limits, key by key over per_user (a lead who may hold more TPUs).
    users: Annotated[dict[str, UserLimitEntry], Meta(description="must map user names to limits objects")] = {}


ResumeWord = Literal["zone", "region", "allowed"]  # the tiers of `resume.order` (schema/resume_policy.py)


class ResumeEntry(_Keys, frozen=True):
    """Where a job that lost its machine resumes at once (docs/reference/machines-json.md §3.12)."""

    order: Annotated[tuple[ResumeWord, ...], Meta(
        description="must be a list of zone, region, allowed (where a resuming job looks, nearest first)")] = (
            "zone", "region", "allowed")
    regions: Annotated[tuple[str, ...], Meta(description="must be a list of regions, like us-central2")] = ()
    wait_for_own: Annotated[bool, Meta(description="must be true or false")] = False


class MachinesFile(_Keys, frozen=True):
    defaults: Annotated[Connection, _Object] = msgspec.field(default_factory=Connection)
    gcp: Annotated[Gcp, _Object] = msgspec.field(default_factory=Gcp)
    # Each machine stays raw until it is decoded on its own, so that an error can name the machine.
    machines: Annotated[dict[str, Raw] | UnsetType, Meta(
        description="must be a non-empty object of name → machine")] = UNSET
    config_aliases: Annotated[dict[str, NonEmptyText], Meta(
        description="must map short names to config keys (non-empty strings)")] = {}
    error_patterns: Annotated[ErrorPatterns, _Object] = msgspec.field(default_factory=ErrorPatterns)
    # Where passes send notifications (decide/destinations.py checks each entry and says what is wrong in one line).
    notify: Raw | UnsetType = UNSET
    limits: Annotated[LimitsEntry, _Object] = msgspec.field(default_factory=LimitsEntry)
    # The team's spreadsheet: kept raw, checked by sheet.parse_config (its own one-line errors).
    sheet: Raw | UnsetType = UNSET
    resume: Annotated[ResumeEntry | UnsetType, _Object] = UNSET  # where a preempted or lost job resumes
    # Priority classes across users: kept raw, checked by schema/priority.py (its own one-line errors).
    priority_classes: Raw | UnsetType = UNSET


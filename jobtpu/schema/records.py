"""What state.json remembers of each machine: its record, and the words its state, its setup and
its saved TPU steps may be (enums: a typo in code or a hand edit is refused, and each compares equal
to its word, which is what the file holds)."""

from enum import StrEnum
from typing import Annotated, Any, Literal

from jobtpu.schema.msgspec_lib import Meta, msgspec
from jobtpu.schema.names import MAX_ATTEMPTS, MAX_PRIORITY, MAX_SECONDS, MAX_TIME, MAX_TRIES, MAX_WORKERS

# Every number jobtpu reads back as a time or a length of time: an integer stays one (a hand edit
# reads back as written), a fraction stays a float.
Number = int | float
# The same, bounded (docs/reference/state-json.md §4.2): a moment since 1970 and a length of time. A
# value past them (1e300, 10**30, a negative time) is one line naming the file and the field, never a
# traceback where a listing makes it a date or a pass adds to it. (A length of time and a count below
# 0 are schema/job_checks.py's to say, in its words.)
Time = Annotated[int, Meta(ge=0, le=MAX_TIME)] | Annotated[float, Meta(ge=0, le=MAX_TIME)]
Seconds = Annotated[int, Meta(le=MAX_SECONDS)] | Annotated[float, Meta(le=MAX_SECONDS)]
Tries = Annotated[int, Meta(le=MAX_TRIES)]
Attempts = Annotated[int, Meta(le=MAX_ATTEMPTS)]
Priority = Annotated[int, Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]


class MachineState(StrEnum):
    """What `machines` shows of a machine (record.state)."""

    UP = "up"
    UNREACHABLE = "unreachable"
    UNKNOWN = "unknown"
    SETTING_UP = "setting up"
    SETUP_FAILED = "setup failed"
    RECREATING = "recreating"
    DELETING = "deleting"
    DELETED = "deleted"
    REFUSED = "refused"
    BACKOFF = "backoff"
    PREEMPTED = "preempted"
    DOWN = "down"
    TRANSIENT = "transient"
    STUCK = "stuck"
    QUEUED = "queued"  # a queued resource waits for capacity
    NO_ADDRESS = "no address"
    NO_NODE = "no node"  # an on-demand TPU whose node does not exist (nothing preempted it)
    WAITING_FOR_HOST_KEYS = "waiting for host keys"


class SetupStatus(StrEnum):
    """Where a machine's setup commands are on its current incarnation."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class StepKind(StrEnum):
    """One thing a pass does to a TPU machine (tpu/flow.py plans them; the record saves them)."""

    DELETE = "delete"
    CREATE = "create"
    CREATE_QUEUED = "create-queued"
    DELETE_QUEUED = "delete-queued"
    FORGET_KEYS = "forget-keys"
    SETUP = "setup"


class Operation(msgspec.Struct, gc=False):
    """A TPU API operation in flight, followed by later passes."""

    kind: Literal["create", "delete"]
    name: str
    since: Time | None = None


class Setup(msgspec.Struct, omit_defaults=True, gc=False):
    """The machine's setup commands on its current incarnation."""

    status: SetupStatus
    tries: int = 0
    incarnation: str | None = None
    error: str | None = None


class Transient(msgspec.Struct, gc=False):
    """A transient node state first seen at `since` (how long a node looks stuck)."""

    state: str
    since: Time | None = None


class Refused(msgspec.Struct, gc=False):
    """A create the API refused as wrong, not asked again while machines.json asks the same (spec_key)."""

    message: str | None = None
    spec_key: str = ""


class Drained(msgspec.Struct, gc=False):
    """`jobtpu machines drain`: the machine takes no new job; what runs there goes on."""

    reason: str
    by: str  # the --user / JOBTPU_USER label of whoever drained it
    at: Time


class MachineRecord(msgspec.Struct, omit_defaults=True, gc=False):
    state: MachineState | None = None  # what `machines` shows
    detail: str | None = None
    since: Time | None = None  # when an ssh machine became unreachable
    api_error: str | None = None  # the TPU API could not be asked (credentials)
    # TPU node, as the last listing saw it
    tpu_state: str | None = None
    health: str | None = None
    health_description: str | None = None
    zone: str | None = None  # the zone the machine is in now (capacity errors move it)
    incarnation: str | None = None  # the node's create time: a new one is a new machine
    workers: int | None = None
    addresses: list[str] | None = None
    host_keys: list[list[str]] | None = None  # per worker, published through the TPU API
    host_keys_for: str | None = None  # the incarnation they belong to
    spec: dict[str, Any] | None = None  # the node's create fields, to recreate it as it was
    spec_zone: str | None = None
    setup: Setup | None = None
    transient: Transient | None = None
    # recreation
    want_recreate: bool = False
    kept_down: bool = False  # slices deleted by `jobtpu tpu delete`: passes leave them down until `tpu apply`
    operation: Operation | None = None
    create_sent: Time | None = None
    queue_asked: Time | None = None
    queued_state: str | None = None
    recreations: int = 0
    failures: int = 0
    next_try: Time | None = None
    last_error: str | None = None
    refused: Refused | None = None
    zone_capacity_failures: int = 0
    moved: str | None = None
    note: str | None = None  # a person's line about the machine (`jobtpu note --machine`)
    drained: Drained | None = None  # `jobtpu machines drain`: no new job goes there until `undrain`
    # TPU steps (delete, create, setup...) a pass saved before carrying them out; cleared once carried
    # out. Left behind only by a pass that died in between: the next one plans again from the listing.
    steps: list[StepKind] | None = None


def machine_problem(record: MachineRecord) -> str | None:
    """Why a decoded machine record cannot be used by a pass, or None."""
    for name in ("failures", "recreations", "workers", "zone_capacity_failures"):
        if (getattr(record, name) or 0) < 0:
            return f"{name} must be 0 or more"
    if len(record.addresses or ()) > MAX_WORKERS:
        return f"addresses must be a list of at most {MAX_WORKERS} addresses"
    return None


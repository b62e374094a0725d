"""What the Cloud TPU API answers, as plain values: a node (NodeInfo), an operation (OpInfo), a
queued resource (QueuedInfo), the errors its failures become, and the one table that maps a node's
state to a machine's health. Pure, so the TPU plans and outcomes read them without importing the
client (tpu/api.py) that asks."""

from typing import Any

from jobtpu.errors import RemoteError
from jobtpu.schema.msgspec_lib import msgspec

# Node state → (machine health, why). The API decides preemption; SSH failures never do.
# Transient states are waited on; decide/tpu_plan.py says in `machines` for how long, and past TRANSIENT_LIMIT
# that the node looks stuck (`jobtpu tpu reapply` recreates it). jobtpu never deletes a node on its
# own for being slow: only the API saying it was preempted or is gone recreates one.
UP, PREEMPTED, TRANSIENT, DOWN = "up", "preempted", "transient", "down"
TRANSIENT_LIMIT = 1800.0
HEALTH: dict[str | None, tuple[str, str]] = {
    "READY": (UP, "the node is ready"),
    "PREEMPTED": (PREEMPTED, "Google preempted the node"),
    "TERMINATED": (PREEMPTED, "the node was terminated"),
    # A hidden node is one its queued resource took away (suspended): it comes back only anew.
    "HIDDEN": (PREEMPTED, "the node is hidden (its queued resource was suspended)"),
    None: (PREEMPTED, "the node no longer exists"),
    "CREATING": (TRANSIENT, "the node is being created"),
    "STARTING": (TRANSIENT, "the node is starting"),
    "RESTARTING": (TRANSIENT, "the node is restarting"),
    "REPAIRING": (TRANSIENT, "the node is being repaired"),
    "REIMAGING": (TRANSIENT, "the node is being reimaged"),
    "DELETING": (TRANSIENT, "the node is being deleted"),
    "HIDING": (TRANSIENT, "the node is being hidden"),
    "UNHIDING": (TRANSIENT, "the node is being unhidden"),
    "UNKNOWN": (TRANSIENT, "the API says the node's state is UNKNOWN"),
    "STATE_UNSPECIFIED": (TRANSIENT, "the API gives the node no state"),
    "STOPPED": (DOWN, "someone stopped the node; jobtpu does not recreate it"),
    "STOPPING": (DOWN, "someone is stopping the node; jobtpu does not recreate it"),
}


def health_of(state: str | None) -> tuple[str, str]:
    """A state this client does not know (a newer enum value arrives as a number) is waited on."""
    return HEALTH.get(state, (TRANSIENT, f"the node is in state {state}, which this jobtpu does not know"))


class NodeInfo(msgspec.Struct, frozen=True):
    name: str  # the short node id
    state: str
    health: str | None = None  # the API's own health word (HEALTHY, UNHEALTHY_TENSORFLOW, ...)
    health_description: str | None = None
    accelerator: str | None = None
    internal: tuple[str, ...] = ()
    external: tuple[str, ...] = ()
    create_time: str = ""
    spec: dict[str, Any] = msgspec.field(default_factory=dict)  # its create fields (nodespec)

    def addresses(self, use_external_ip: bool) -> list[str]:
        """Where jobtpu's SSH reaches the workers, in worker order. External ones only when every worker
        has one: a worker without would shift the later workers' indices off their internal addresses."""
        if not use_external_ip:
            return list(self.internal)
        return list(self.external) if len(self.external) == len(self.internal) else []


class OpInfo(msgspec.Struct, frozen=True):
    name: str
    done: bool
    error_code: int | None = None  # google.rpc.Code: 8 is RESOURCE_EXHAUSTED
    error_message: str = ""

    @property
    def capacity(self) -> bool:
        """Google's capacity answer is code 8 ("There is no more capacity in the zone ..."), whose
        message does not say RESOURCE_EXHAUSTED; a spot create may also end 5 "Reservation not found"."""
        return self.error_code == 8 or (self.error_code == 5 and reservation_gone(self.error_message))

    @property
    def refused(self) -> bool:
        """The create itself is wrong (bad argument, no permission): asking again cannot help."""
        return self.error_code in (3, 7, 9) or (self.error_code == 5 and not reservation_gone(self.error_message))


class QueuedInfo(msgspec.Struct, frozen=True):
    """A queued resource: its state (WAITING_FOR_RESOURCES, ACCEPTED, PROVISIONING, ACTIVE,
    SUSPENDING, SUSPENDED, FAILED, DELETING, ...) and, when it failed, why."""

    name: str
    state: str
    error: str = ""


class ApiRefused(RemoteError):
    """HTTP 400, 403 or 404: the request is wrong for this project; the same request fails again."""


class ApiNotFound(ApiRefused):
    """The API has no such node, operation or zone (404). A pass survives it like any API failure;
    get_node, delete_node and operation read it as an answer."""


class ApiCapacity(RemoteError):
    """HTTP 429: quota or capacity; the same request may succeed later."""


class CredentialsFailed(RemoteError):
    """No usable credentials (missing ADC, a revoked key, a token endpoint that refuses us)."""


def reservation_gone(message: str) -> bool:
    # Spot capacity that went away answers code 5 "Reservation not found": capacity, not a typo.
    return "reservation" in message.lower()

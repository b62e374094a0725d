"""What the TPU API's and the workers' answers mean for a machine's record. Pure: no I/O.

Carrying out a machine's steps (tpu/flow.py) returns one `StepReport` per step, holding only what
came back (an operation name, an error, each worker's setup output). `settle` turns them into the
record's changes: operations to follow, back-off after a failed create, a move to the machine's next
zone after capacity errors, a refusal not asked again, the setup's outcome. A create operation that
finished (seen while planning) means the same through `create_finished`."""

from __future__ import annotations

import hashlib
import json

from jobtpu.errors import RemoteError
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import (
    MachineRecord,
    MachineState,
    Operation,
    Refused,
    Setup,
    SetupStatus,
    StepKind,
)
from jobtpu.schema.tpu_answers import ApiCapacity, ApiRefused, CredentialsFailed, OpInfo
from jobtpu.schema.worker_protocol import setup_outcome, setup_said

BACKOFF_FIRST, BACKOFF_MAX = 30.0, 900.0
SETUP_RETRIES = 3
ZONE_TRIES = 2  # capacity errors in a row in one zone before asking in the machine's next zone
# A queued resource fails only after waiting its whole valid_for: one is enough to move on.
QUEUED_ZONE_TRIES = 1


class Step(msgspec.Struct):
    """One thing to do for a machine, decided from its record and what the API said."""

    kind: StepKind
    detail: str = ""

    def __post_init__(self) -> None:
        self.kind = StepKind(self.kind)  # a word that is no step fails here, not in a live pass's act


class MachinePlan(msgspec.Struct):
    steps: list[Step] = msgspec.field(default_factory=list)
    state: MachineState = MachineState.UNKNOWN  # what `machines` shows
    detail: str = ""

    def __post_init__(self) -> None:
        self.state = MachineState(self.state)


class StepReport(msgspec.Struct, frozen=True):
    """What carrying out one step came to, as it came back: nothing here is decided yet."""

    step: Step
    operation: str | None = None  # the API's operation name; a delete's None: the node was gone already
    error: RemoteError | None = None  # the call failed (ApiRefused, ApiCapacity, CredentialsFailed, ...)
    # setup: each worker's last output of the setup script; None: the machine has no setup commands
    setup_outputs: list[str] | None = None


def backoff(failures: int, first: float = BACKOFF_FIRST) -> float:
    """Seconds to wait before the next create after `failures` failed ones: doubling, capped."""
    return min(BACKOFF_MAX, first * 2 ** max(0, failures - 1))


def short(message: str, limit: int = 200) -> str:
    line = " ".join(message.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def spec_key(machine: Machine) -> str:
    """What machines.json asks of this node; a change to it lifts a refusal."""
    text = json.dumps([machine.zones, machine.node, machine.node_overrides], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---- creates: done, refused, failed, moved ---------------------------------------------------------

def created(record: MachineRecord) -> None:
    """The node asked for is there: the recreation is over, its failures forgotten."""
    record.failures, record.next_try, record.last_error = 0, None, None
    record.want_recreate, record.zone_capacity_failures = False, 0
    record.create_sent = None
    record.refused = None


def refuse(record: MachineRecord, message: str, spec_key: str) -> None:
    """A create the API refused as wrong (400, 403, 404): not asked again for the same spec."""
    record.refused = Refused(short(message), spec_key)
    record.last_error = short(message)


def create_failed(record: MachineRecord, message: str, now: float, first_backoff: float) -> None:
    """A create was refused (at once, or by its operation): count it and wait before the next one."""
    record.failures += 1
    record.next_try = now + backoff(record.failures, first_backoff)
    record.last_error = short(message, 300)


def capacity_failed(record: MachineRecord, zones: tuple[str, ...], now: float, tries: int = ZONE_TRIES,
                    what: str = "capacity errors") -> None:
    """After `tries` capacity errors in a row in one zone, ask in the machine's next zone at once."""
    record.zone_capacity_failures += 1
    here = record.zone
    if len(zones) < 2 or record.zone_capacity_failures < tries:
        return
    following = zones[(zones.index(here) + 1) % len(zones)] if here in zones else zones[1]
    record.zone, record.zone_capacity_failures, record.failures, record.next_try = following, 0, 0, now
    record.moved = f"moved from {here} to {following} after {tries} {what}"


def create_finished(record: MachineRecord, op: OpInfo, now: float, first_backoff: float, spec_key: str,
                    zones: tuple[str, ...]) -> None:
    """A create operation the API says is done: the node is made, refused, or not made for now."""
    record.create_sent = None
    if not op.error_code:
        created(record)
    elif op.refused:
        refuse(record, op.error_message, spec_key)
    else:  # capacity (code 8, or 5 for a spot reservation) and anything else: back off and ask again
        create_failed(record, op.error_message, now, first_backoff)
        if op.capacity:
            capacity_failed(record, zones, now)


def create_call_failed(machine: Machine, record: MachineRecord, plan: MachinePlan, error: RemoteError,
                       now: float, first_backoff: float) -> None:
    """What a failed create call means: wrong (not asked again), capacity (back off), no
    credentials (nothing was sent), or unsure (timeout, 5xx: Google may have created it)."""
    if isinstance(error, ApiRefused | ApiCapacity | CredentialsFailed):
        record.create_sent = record.queue_asked = None  # a definite answer: no node was made
    if isinstance(error, ApiRefused):
        refuse(record, error.message, spec_key(machine))
        plan.state, plan.detail = MachineState.REFUSED, f"create refused: {short(error.message)}"
    elif isinstance(error, CredentialsFailed):
        plan.state, plan.detail = MachineState.UNKNOWN, error.message
    else:
        create_failed(record, error.message, now, first_backoff)
        plan.state, plan.detail = MachineState.BACKOFF, f"create failed: {short(error.message)}"
        if isinstance(error, ApiCapacity):
            capacity_failed(record, machine.zones, now)


# ---- setup ------------------------------------------------------------------------------------------

def setup_settled(record: MachineRecord, plan: MachinePlan, outputs: list[str] | None) -> None:
    """The setup commands' outcome on this incarnation, from each worker's last output: done once
    every worker says so, failed (counted) when one failed, else still running for the next pass."""
    incarnation = str(record.incarnation or "")
    if outputs is None:
        record.setup = Setup(SetupStatus.DONE, incarnation=incarnation)
        plan.state, plan.detail = MachineState.UP, "ready (no setup commands)"
        return
    setup = record.setup or Setup(SetupStatus.RUNNING)
    if setup.status == SetupStatus.FAILED:  # this pass ran it again
        setup = Setup(SetupStatus.RUNNING, tries=setup.tries)
    words = [setup_outcome(out) for out in outputs]
    if all(w == "done" for w in words):
        record.setup = Setup(SetupStatus.DONE, incarnation=incarnation)
        plan.state, plan.detail = MachineState.UP, "ready"
    elif any(w in ("failed", "error") for w in words):
        bad = next(i for i, w in enumerate(words) if w in ("failed", "error"))
        said = setup_said(outputs[bad])
        setup.status, setup.tries, setup.error = SetupStatus.FAILED, setup.tries + 1, said[-300:]
        record.setup = setup
        plan.state, plan.detail = MachineState.SETUP_FAILED, f"worker {bad}: {said[-200:]}"
    else:
        record.setup = setup
        plan.state, plan.detail = MachineState.SETTING_UP, "setup commands running"


# ---- every report of a machine ----------------------------------------------------------------------

def settle_step(machine: Machine, record: MachineRecord, plan: MachinePlan, report: StepReport, now: float,
                first_backoff: float) -> None:
    """What one carried-out step came to, in the record (and what `machines` shows)."""
    kind = report.step.kind
    if report.error is not None:
        record.last_error = short(report.error.message, 300)
        if kind in (StepKind.CREATE, StepKind.CREATE_QUEUED):
            create_call_failed(machine, record, plan, report.error, now, first_backoff)
        else:
            plan.detail = report.error.message
    elif kind == StepKind.DELETE:
        if report.operation is not None:
            record.operation = Operation("delete", report.operation, now)
        else:  # gone meanwhile: the next pass plans (and saves) the create
            plan.state, plan.detail = MachineState.RECREATING, "the old node is gone"
    elif kind == StepKind.CREATE:
        record.operation = Operation("create", str(report.operation), now)
        record.recreations += 1
    elif kind == StepKind.CREATE_QUEUED:
        record.recreations += 1
    elif kind == StepKind.DELETE_QUEUED and report.step.detail:
        # it failed (its valid_for ran out, or Google gave up): back off, then the next zone
        create_failed(record, report.step.detail, now, first_backoff)
        capacity_failed(record, machine.zones, now, QUEUED_ZONE_TRIES, "failed queued resource")
    elif kind == StepKind.SETUP:
        setup_settled(record, plan, report.setup_outputs)


def settle(machine: Machine, record: MachineRecord, plan: MachinePlan, reports: list[StepReport], now: float,
           first_backoff: float) -> None:
    """Every step's report in order; then the record no longer holds them as intents."""
    for report in reports:
        settle_step(machine, record, plan, report, now, first_backoff)
    record.steps = None
    record.state, record.detail = plan.state, plan.detail

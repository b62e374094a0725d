"""The TPU machines' pure rules, table by table: the steps a machine's sighting and record decide
(decide/tpu_plan.py) and what each carried-out step's report means for the record (decide/tpu_outcomes.py). No
I/O: records, nodes, operations and reports are built by hand."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from jobtpu.decide.core import MachineView
from jobtpu.decide.tpu_outcomes import MachinePlan, Step, StepReport, backoff, settle, spec_key
from jobtpu.decide.tpu_plan import (
    MachineWork,
    Sighting,
    credentials_line,
    decide_machine,
    intend,
    show,
    wants_host_keys,
)
from jobtpu.errors import RemoteError
from jobtpu.schema.fleet import Machine
from jobtpu.schema.records import MachineRecord, MachineState, Operation, Refused, Setup, StepKind
from jobtpu.tpu.api import ApiCapacity, ApiRefused, CredentialsFailed, NodeInfo, OpInfo, QueuedInfo

pytestmark = pytest.mark.fast

NOW = 1_700_000_000.0
ZONES = ("zone-a", "zone-b")
TPU = Machine(name="t", kind="tpu", node="n", zone="zone-a", zones=ZONES, accelerator="v3-8")
STRICT = Machine(name="t", kind="tpu", node="n", zone="zone-a", zones=ZONES, host_key_policy="strict")
QUEUED = Machine(name="t", kind="tpu", node="n", zone="zone-a", zones=ZONES, queued_resource={"tier": "spot"})
SETUP = Machine(name="t", kind="tpu", node="n", zone="zone-a", zones=ZONES, setup=("pip install x",))


def node(state: str = "READY", created: str = "c1", workers: int = 2) -> NodeInfo:
    return NodeInfo("n", state, internal=tuple(f"10.0.0.{i}" for i in range(workers)), create_time=created)


def decided(record: MachineRecord, machine: Machine = TPU, **seen: Any) -> tuple[list[str], str, str]:
    work = decide_machine(Sighting(machine, **seen), record, NOW, first_backoff=30.0)
    return [s.kind for s in work.plan.steps], work.plan.state, work.plan.detail


# ---- steps from a sighting and a record ---------------------------------------------------------------

@pytest.mark.parametrize(("record", "seen", "steps", "state"), [
    # a node seen for the first time is set up; one set up on this incarnation is up
    (MachineRecord(), {"node": node()}, ["setup"], "setting up"),
    (MachineRecord(incarnation="c1", setup=Setup("done", incarnation="c1")), {"node": node()}, [], "up"),
    # a new incarnation: the old host keys go, setup runs again
    (MachineRecord(incarnation="c0", setup=Setup("done", incarnation="c0")), {"node": node()},
     ["forget-keys", "setup"], "setting up"),
    (MachineRecord(incarnation="c1", setup=Setup("failed", tries=3, error="boom")), {"node": node()},
     [], "setup failed"),
    (MachineRecord(incarnation="c1", setup=Setup("failed", tries=1)), {"node": node()}, ["setup"], "setting up"),
    # not up: waited on, never recreated on its own
    (MachineRecord(), {}, [], "no node"),  # an on-demand node nobody made yet: nothing preempted it
    (MachineRecord(), {"node": node("PREEMPTED")}, [], "preempted"),
    (MachineRecord(), {"node": node("STOPPED")}, [], "down"),
    (MachineRecord(), {"node": node("REPAIRING")}, [], "transient"),
    # recreation: delete, then create, waiting on the node in between
    (MachineRecord(want_recreate=True), {"node": node("PREEMPTED")}, ["delete"], "recreating"),
    (MachineRecord(want_recreate=True), {"node": node("DELETING")}, [], "recreating"),
    (MachineRecord(want_recreate=True), {}, ["create"], "recreating"),
    (MachineRecord(want_recreate=True, next_try=NOW + 60, failures=1), {}, [], "backoff"),
    (MachineRecord(want_recreate=True, next_try=NOW - 1, failures=1), {}, ["create"], "recreating"),
    (MachineRecord(want_recreate=True, refused=Refused("bad", spec_key(TPU))), {}, [], "refused"),
    (MachineRecord(want_recreate=True, refused=Refused("bad", "an older spec")), {}, ["create"], "recreating"),
    # a create whose answer was lost but that Google carried out: that node is never deleted
    (MachineRecord(want_recreate=True, create_sent=NOW - 5), {"node": node()}, ["setup"], "setting up"),
    (MachineRecord(want_recreate=True, operation=Operation("create", "op1", NOW)),
     {"op": OpInfo("op1", done=False)}, [], "recreating"),
    (MachineRecord(want_recreate=True, operation=Operation("create", "op1", NOW)),
     {"node": node(), "op": OpInfo("op1", done=True)}, ["setup"], "setting up"),
    (MachineRecord(want_recreate=True, operation=Operation("create", "op1", NOW)),
     {"op": OpInfo("op1", done=True, error_code=3, error_message="bad type")}, [], "refused"),
    (MachineRecord(want_recreate=True, operation=Operation("create", "op1", NOW)),
     {"op": OpInfo("op1", done=True, error_code=8, error_message="no capacity")}, [], "backoff"),
])
def test_a_machine_s_steps_come_from_its_sighting_and_record(record: MachineRecord, seen: dict[str, Any],
                                                             steps: list[str], state: str) -> None:
    assert decided(record, **seen)[:2] == (steps, state)


def test_an_on_demand_tpu_with_no_node_says_so_and_how_to_make_it() -> None:
    """A preemptible node that is gone was preempted; an on-demand one that is not there never was."""
    _, state, detail = decided(MachineRecord())
    assert (state, detail) == ("no node", "no node n in zone-a: `jobtpu tpu apply t` creates it (a job whose rule "
                                          "is pre, reapply or rerun asks for it too)")
    preemptible = Machine(name="t", kind="tpu", node="n", zone="zone-a", zones=ZONES, preemptible=True)
    assert decided(MachineRecord(), preemptible)[1] == "preempted"


@pytest.mark.parametrize(("queued", "seen_node", "steps", "state"), [
    (None, node("PREEMPTED"), ["delete"], "recreating"),  # a node made without a queued resource
    (None, None, ["create-queued"], "queued"),
    (QueuedInfo("n", "WAITING_FOR_RESOURCES"), None, [], "queued"),
    (QueuedInfo("n", "FAILED", "valid_for ran out"), None, ["delete-queued"], "recreating"),
    (QueuedInfo("n", "SUSPENDED"), None, ["delete-queued"], "recreating"),
    (QueuedInfo("n", "ACTIVE"), node("PREEMPTED"), ["delete-queued"], "recreating"),
    (QueuedInfo("n", "ACTIVE"), node(), ["setup"], "setting up"),
])
def test_a_queued_resource_s_state_decides_its_machine_s_steps(queued: QueuedInfo | None, seen_node: NodeInfo | None,
                                                              steps: list[str], state: str) -> None:
    record = MachineRecord(want_recreate=True)
    assert decided(record, QUEUED, node=seen_node, queued=queued)[:2] == (steps, state)
    assert record.want_recreate is (state != "setting up")


def test_two_capacity_errors_in_a_row_move_the_machine_to_its_next_zone_at_once() -> None:
    record = MachineRecord(want_recreate=True, zone="zone-a", zone_capacity_failures=1, failures=1,
                           operation=Operation("create", "op1", NOW))
    work = decide_machine(Sighting(TPU, op=OpInfo("op1", True, 8, "no capacity")), record, NOW)
    assert (record.zone, record.zone_capacity_failures, record.next_try) == ("zone-b", 0, NOW)
    assert work.machine.zone == "zone-b" and record.moved == "moved from zone-a to zone-b after 2 capacity errors"


@pytest.mark.parametrize(("seen", "state", "detail"), [
    ({"host_keys": [["ssh-ed25519 A"], ["ssh-ed25519 B"]], "host_keys_read": True}, "setting up",
     "running setup commands"),
    ({"host_keys": [["ssh-ed25519 A"], []], "host_keys_read": True}, "waiting for host keys",
     "worker(s) 1 have not published"),
    ({"host_keys_error": "HTTP 503", "host_keys_read": True}, "unknown", "cannot read the node's host keys: HTTP 503"),
    ({}, "waiting for host keys", "the node's host keys are read in the next pass"),
])
def test_strict_host_keys_are_recorded_only_once_every_worker_published_one(seen: dict[str, Any], state: str,
                                                                            detail: str) -> None:
    record = MachineRecord()
    steps, got_state, got_detail = decided(record, STRICT, node=node(), **seen)
    assert (got_state, got_detail.startswith(detail)) == (state, True)
    assert (record.host_keys_for == "c1") is (state == "setting up")
    assert ("setup" in steps) is (state == "setting up")


@pytest.mark.parametrize(("machine", "record", "seen_node", "wanted"), [
    (STRICT, MachineRecord(), node(), True),
    (STRICT, MachineRecord(incarnation="c1", host_keys_for="c1", setup=Setup("done")), node(), False),
    (STRICT, MachineRecord(want_recreate=True), node(), False),  # it is deleted, not used
    (STRICT, MachineRecord(), node(workers=0), False),
    (STRICT, MachineRecord(), node("CREATING"), False),
    (TPU, MachineRecord(), node(), False),
])
def test_observing_asks_for_host_keys_exactly_when_deciding_uses_them(machine: Machine, record: MachineRecord,
                                                                    seen_node: NodeInfo, wanted: bool) -> None:
    before = msgspec.to_builtins(record)
    assert wants_host_keys(Sighting(machine, node=seen_node), record, NOW, 30.0) is wanted
    assert msgspec.to_builtins(record) == before  # decided on a copy


def test_a_ready_node_without_addresses_is_held_and_says_why() -> None:
    assert decided(MachineRecord(), node=node(workers=0)) == ([], "no address",
                                                            "the TPU API lists no worker address for the node")


INTERNAL, EXTERNAL = ("10.0.0.2", "10.0.0.3", "10.0.0.4"), ("34.0.0.2", "34.0.0.3", "34.0.0.4")


@pytest.mark.parametrize(("external", "use_external_ip", "addresses"), [
    (EXTERNAL, True, list(EXTERNAL)),
    (EXTERNAL, False, list(INTERNAL)),
    ((), True, []),  # enableExternalIps is false
    # One worker lists none (yet): the others' external addresses would take the wrong worker indices.
    (EXTERNAL[:1] + EXTERNAL[2:], True, []),
    (EXTERNAL[:1] + EXTERNAL[2:], False, list(INTERNAL)),
])
def test_a_node_is_reached_at_one_kind_of_address_for_every_worker(external: tuple[str, ...], use_external_ip: bool,
                                                                   addresses: list[str]) -> None:
    assert NodeInfo("n", "READY", internal=INTERNAL, external=external).addresses(use_external_ip) == addresses


def test_a_node_whose_workers_lack_some_external_addresses_is_held_and_says_why() -> None:
    seen = NodeInfo("n", "READY", internal=INTERNAL, external=EXTERNAL[:2], create_time="c1")
    outside = Machine(name="t", kind="tpu", node="n", zone="zone-a", zones=ZONES, use_external_ip=True)
    _, state, detail = decided(MachineRecord(), outside, node=seen)
    assert (state, detail) == ("no address", "1 of the 3 workers have no external IP and use_external_ip is true: "
                                             "wait for the node to list them all, or set it false")


@pytest.mark.parametrize(("record", "seen_node", "steps", "state"), [
    # forget-keys cannot be found again from the listing: a leftover one is done
    (MachineRecord(incarnation="c1", setup=Setup("done"), steps=["forget-keys"]), node(), ["forget-keys"], "up"),
    # `jobtpu tpu delete` saved its delete and died: the next pass carries it out
    (MachineRecord(steps=["delete"], state="deleting"), node(), ["delete"], "deleting"),
    (MachineRecord(steps=["delete-queued", "delete"]), node(), ["delete-queued", "delete"], "deleting"),
    (MachineRecord(steps=["delete"]), node("DELETING"), [], "transient"),  # it was sent after all
    (MachineRecord(steps=["delete"]), None, [], "no node"),  # deleted by hand: an on-demand node, gone
    # a pass's own leftover delete is planned again from the listing
    (MachineRecord(want_recreate=True, steps=["delete"]), None, ["create"], "recreating"),
])
def test_leftover_steps_that_planning_cannot_find_again_are_carried_out(record: MachineRecord,
                                                                        seen_node: NodeInfo | None,
                                                                        steps: list[str], state: str) -> None:
    assert decided(record, node=seen_node)[:2] == (steps, state)


def test_intents_mark_a_create_sent_before_it_is_sent_and_show_feeds_the_decisions() -> None:
    record = MachineRecord(want_recreate=True)
    work = decide_machine(Sighting(QUEUED, queued=None), record, NOW)
    intend(work, NOW)
    assert (record.steps, record.create_sent, record.queue_asked) == (["create-queued"], NOW, NOW)
    view = MachineView()
    show(work, view, setting_up=False)
    assert (view.ready, view.preempted, view.recovering, view.error) == (False, True, True, work.plan.detail)


def test_a_credentials_failure_is_one_line_however_many_zones_it_stops() -> None:
    failures = [CredentialsFailed("no credentials", hint="run gcloud auth"), CredentialsFailed("no credentials"),
                RemoteError("HTTP 503")]
    assert credentials_line(failures) == "jobtpu: no credentials; TPU machines wait (hint: run gcloud auth)"
    assert credentials_line([RemoteError("HTTP 503")]) is None


# ---- what a report means ------------------------------------------------------------------------------

def settled(kind: str, record: MachineRecord | None = None, detail: str = "", machine: Machine = TPU,
            **report: Any) -> tuple[MachineRecord, MachinePlan]:
    record = record or MachineRecord(zone="zone-a", want_recreate=True, steps=[kind], create_sent=NOW)
    plan = MachinePlan([Step(kind, detail)], "recreating", "planned")
    settle(machine, record, plan, [StepReport(Step(kind, detail), **report)], NOW, 30.0)
    assert record.steps is None and (record.state, record.detail) == (plan.state, plan.detail)
    return record, plan


def test_a_delete_is_followed_or_found_done_already() -> None:
    record, plan = settled("delete", operation="op-d")
    assert record.operation == Operation("delete", "op-d", NOW) and plan.state == "recreating"
    record, plan = settled("delete", operation=None)
    assert record.operation is None and plan.detail == "the old node is gone"


def test_a_create_sent_is_followed_and_counted() -> None:
    record, plan = settled("create", operation="op-c")
    assert (record.operation, record.recreations) == (Operation("create", "op-c", NOW), 1)
    record, _ = settled("create-queued", operation="qr")
    assert (record.operation, record.recreations) == (None, 1)


@pytest.mark.parametrize(("error", "state", "sent_kept", "failures", "refused"), [
    (ApiRefused("400 bad accelerator"), "refused", False, 0, True),
    (ApiCapacity("429 quota"), "backoff", False, 1, False),
    (CredentialsFailed("no credentials"), "unknown", False, 0, False),
    (RemoteError("timed out"), "backoff", True, 1, False),  # unsure: Google may have made it
])
def test_a_failed_create_call_means_refused_back_off_or_unsure(error: RemoteError, state: str, sent_kept: bool,
                                                              failures: int, refused: bool) -> None:
    for kind in ("create", "create-queued"):
        record, plan = settled(kind, error=error)
        assert (plan.state, record.create_sent is not None, record.failures) == (state, sent_kept, failures)
        assert (record.refused is not None, record.last_error) == (refused, error.message)
        assert record.next_try == (NOW + 30.0 if failures else None)


def test_capacity_answers_to_create_calls_move_the_machine_after_two() -> None:
    record = MachineRecord(zone="zone-a", want_recreate=True, failures=3, zone_capacity_failures=1)
    settled("create", record, error=ApiCapacity("429"))
    assert (record.zone, record.failures, record.next_try, record.zone_capacity_failures) == ("zone-b", 0, NOW, 0)


def test_a_failed_queued_resource_deleted_backs_off_and_moves_on_at_once() -> None:
    record, _ = settled("delete-queued", detail="valid_for ran out", machine=QUEUED)
    assert (record.zone, record.failures, record.last_error) == ("zone-b", 0, "valid_for ran out")
    record, _ = settled("delete-queued", machine=QUEUED)  # suspended: only deleted
    assert (record.zone, record.failures) == ("zone-a", 0)


def test_a_failed_step_other_than_a_create_only_says_why() -> None:
    record, plan = settled("delete", error=RemoteError("HTTP 500"))
    assert (plan.state, plan.detail, record.last_error, record.operation) == ("recreating", "HTTP 500",
                                                                              "HTTP 500", None)


# The setup script's last line: its report (schema/worker_protocol.py).
DONE, RUNNING, FAILED = (f'{{"kind": "setup", "outcome": "{word}"}}' for word in ("done", "running", "failed"))


@pytest.mark.parametrize(("before", "outputs", "state", "status", "tries"), [
    (None, None, "up", "done", 0),
    (None, [DONE, "x\n" + DONE], "up", "done", 0),
    (None, [DONE, RUNNING], "setting up", "running", 0),
    (None, [DONE, "pip: no such package\n" + FAILED], "setup failed", "failed", 1),
    (None, [DONE, "SETUP error ssh: connection refused"], "setup failed", "failed", 1),
    (Setup("failed", tries=1, error="old"), [RUNNING, RUNNING], "setting up", "running", 1),
    (Setup("failed", tries=1, error="old"), [DONE, FAILED], "setup failed", "failed", 2),
])
def test_the_setup_outcome_comes_from_every_worker_s_last_output(before: Setup | None, outputs: list[str] | None,
                                                                 state: str, status: str, tries: int) -> None:
    record = MachineRecord(incarnation="c1", setup=before, steps=["setup"])
    _, plan = settled("setup", record, machine=SETUP, setup_outputs=outputs)
    assert record.setup is not None
    assert (plan.state, record.setup.status, record.setup.tries) == (state, status, tries)
    assert (record.setup.incarnation == "c1") is (status == "done")
    if status == "failed":
        assert plan.detail.startswith("worker 1: ") and record.setup.error


def test_the_setup_outcome_is_said_for_the_first_worker_that_failed() -> None:
    record = MachineRecord(incarnation="c1")
    boom = '{"kind": "setup", "outcome": "failed", "code": 1, "detail": "boom"}'
    _, plan = settled("setup", record, machine=SETUP, setup_outputs=["pip\n" + boom, FAILED])
    assert plan.detail == "worker 0: SETUP failed 1: boom"


@pytest.mark.parametrize(("failures", "first", "wait"), [
    (0, 30.0, 30.0), (1, 30.0, 30.0), (2, 30.0, 60.0), (4, 30.0, 240.0), (9, 30.0, 900.0), (3, 0.5, 2.0)])
def test_creates_back_off_doubling_up_to_a_cap(failures: int, first: float, wait: float) -> None:
    assert backoff(failures, first) == wait


def test_work_knows_its_steps() -> None:
    work = MachineWork(TPU, MachineRecord(), MachinePlan([Step("setup")]))
    assert work.has("setup") and not work.has("delete")


def test_steps_and_states_are_their_enums_and_a_word_that_is_none_fails_at_once() -> None:
    """A typo in a step or a state is refused where the plan is made, never met as a KeyError in act."""
    record = MachineRecord(incarnation="c0", setup=Setup("done", incarnation="c0"))
    work = decide_machine(Sighting(TPU, node=node()), record, NOW, first_backoff=30.0)
    intend(work, NOW)
    assert [type(s.kind) for s in work.plan.steps] == [StepKind, StepKind] and type(work.plan.state) is MachineState
    assert [type(s) for s in record.steps or []] == [StepKind, StepKind]
    with pytest.raises(ValueError, match="reboot"):
        Step("reboot")
    with pytest.raises(ValueError, match="sleeping"):
        MachinePlan(state="sleeping")

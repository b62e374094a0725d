"""How a loop waits between its rounds (jobtpu/commands/cadence.py, docs/reference/commands.md §2.3):
a table of what counts as work in flight."""

from __future__ import annotations

import pytest

from jobtpu.commands.cadence import in_flight
from jobtpu.schema.records import MachineRecord, MachineState, Operation, Setup, SetupStatus, StepKind
from jobtpu.schema.state import Job, State, Status

pytestmark = pytest.mark.fast
NOW = 1_000_000.0


def job(status: Status) -> Job:
    return Job(id=1, user="u", cmd="true", archive="a.tar.gz", created=NOW, status=status)


@pytest.mark.parametrize(("jobs", "record", "busy"), [
    ([], None, False),
    ([job(Status.QUEUED), job(Status.RUNNING), job(Status.FINISHED)], None, False),
    ([job(Status.LAUNCHING)], None, True),
    ([job(Status.KILLING)], None, True),
    ([], MachineRecord(state=MachineState.UP), False),
    ([], MachineRecord(state=MachineState.PREEMPTED), False),  # its rule waits: nothing to follow
    ([], MachineRecord(state=MachineState.QUEUED), False),  # Google's capacity, not ours
    ([], MachineRecord(state=MachineState.DELETING, operation=Operation("delete", "op-1")), True),
    ([], MachineRecord(state=MachineState.DELETED), True),  # its create comes next
    ([], MachineRecord(state=MachineState.PREEMPTED, want_recreate=True), True),
    ([], MachineRecord(steps=[StepKind("create")]), True),
    ([], MachineRecord(state=MachineState.SETTING_UP, setup=Setup(SetupStatus.RUNNING)), True),
    ([], MachineRecord(state=MachineState.TRANSIENT), True),
    ([], MachineRecord(state=MachineState.BACKOFF, want_recreate=True, next_try=NOW + 600), False),
    ([], MachineRecord(state=MachineState.BACKOFF, want_recreate=True, next_try=NOW + 2), True),
])
def test_work_in_flight_is_what_a_pass_soon_takes_a_step_further(jobs: list[Job], record: MachineRecord | None,
                                                                    busy: bool) -> None:
    state = State(jobs=jobs, machines={"m": record} if record is not None else {})
    assert in_flight(state, NOW, 5.0) is busy

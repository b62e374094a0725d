"""The one row model every listing renders (views/rows.py, docs/design.md §5): a job's and a
machine's row made from records by pure functions, cell by cell. Needs no root, sshd or account."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from jobtpu.commands.machines import fleet_rows
from jobtpu.render.cells import JobRow, MachineCells
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.published import MachineRow as MachineJson
from jobtpu.schema.records import Drained, MachineRecord, MachineState
from jobtpu.schema.state import Attempt, Job, State, Status
from jobtpu.views.rows import ended_at, job_row, live_order, machine_rows, sweep_row

pytestmark = pytest.mark.fast

NOW = 1_000_000.0
ALIASES = {"lr": "config.training.lr"}
SHORT = {"gpu-box-number-one": "box1"}


def job(job_id: int = 1, **kw: Any) -> Job:
    return Job(id=job_id, user="ann", cmd="c", archive="a.tar.gz", **{"created": NOW - 3700, "name": "train", **kw})


def cells(row: JobRow) -> dict[str, Any]:
    return {f: getattr(row, f) for f in row.__struct_fields__ if getattr(row, f) not in ("", 0, None)}


JOB_ROWS = {
    "running, after a preemption and a retry, holding two GPUs of a box known by its alias": (
        job(status=Status.RUNNING, machine="gpu-box-number-one", alloc={"gpu": [0, 1], "slot": [0]}, attempt=2,
            preemptions=1, retries=2, tags=["a", "b"], note="n", last_line="step 5",
            overrides=["--config.training.lr=0.1", "--config.model.depth=3"],
            attempts=[Attempt(0, "gpu-box-number-one", "preempted", None, NOW - 3600, NOW - 3000),
                      Attempt(1, "local", "exit 1", 1, NOW - 2900, NOW - 2800),
                      Attempt(2, "gpu-box-number-one", started=NOW - 60)]),
        {"id": 1, "name": "train", "user": "ann", "status": "running", "attempt": "2 (1 pre, 0/2 retry)",
         "run": "12m", "age": "1h", "where": "box1 gpu=0,1", "overrides": "lr=0.1 config.model.depth=3",
         "tags": "a,b", "info": "note: n; step 5", "tries": 2, "machine": "box1", "last_line": "step 5"}),
    "queued and pinned, its pending reason naming machines by their short names": (
        job(req=["gpu=2"], pin="gpu-box-number-one", waiting="gpu-box-number-one busy; v3 fits"),
        {"id": 1, "name": "train", "user": "ann", "status": "queued", "age": "1h", "where": "gpu=2 @box1",
         "info": "box1 busy; v3 fits", "waiting": "box1 busy; v3 fits"}),
    "queued, no pass has tried it": (
        job(), {"id": 1, "name": "train", "user": "ann", "status": "queued", "age": "1h",
                "info": "no pass has tried it yet"}),
    "failed: where it last ran and why it ended": (
        job(status=Status.FAILED, reason="exit 3", last_line="Traceback",
            attempts=[Attempt(0, "gpu-box-number-one", "exit 3", 3, NOW - 100, NOW - 40)]),
        {"id": 1, "name": "train", "user": "ann", "status": "failed", "attempt": "0", "run": "1m", "age": "1h",
         "where": "box1", "info": "exit 3; Traceback", "reason": "exit 3", "last_line": "Traceback"}),
}


@pytest.mark.parametrize("case", JOB_ROWS)
def test_a_jobs_row_cell_by_cell(case: str) -> None:
    record, expected = JOB_ROWS[case]
    assert cells(job_row(record, NOW, ALIASES, short=SHORT, clocks=False)) == expected


def test_a_sweeps_queued_members_in_one_row_name_their_sweep() -> None:
    members = [job(10 + i, sweep=10, created=NOW - 40 + i, waiting="waits",
                   overrides=[f"--config.training.lr={i}", "--config.model.dropout=0.1"]) for i in range(3)]
    row = sweep_row(members, NOW, ALIASES)
    assert (row.id, row.age, row.overrides, row.info, row.apart, row.collapsed) == (
        "10-12", "40s", "lr=0…2 config.model.dropout=0.1", "3 queued: waits", 7, 10)
    assert job_row(members[0], NOW, ALIASES).collapsed is None  # one member's own row is a job's


def test_a_live_view_lists_active_then_queued_then_the_latest_ended() -> None:
    ended = [job(i, status=Status.FINISHED, attempts=[Attempt(0, "m", "finished", 0, NOW - 50, end)])
             for i, end in ((1, NOW - 30), (2, NOW - 10))]
    never = job(3, status=Status.KILLED, created=NOW - 20)  # killed while queued: ends when it was submitted
    jobs = [*ended, never, job(4), job(5, status=Status.RUNNING, machine="m")]
    assert ended_at(never) == NOW - 20 and ended_at(ended[0]) == NOW - 30
    assert [j.id for j in live_order(jobs)] == [5, 4, 2, 3, 1]


def machine(name: str, kind: str, **kw: Any) -> Machine:
    hosts = ("10.0.0.1",) if kind == "ssh" else ()
    return Machine(name=name, kind=kind, hosts=hosts, **kw)


FLEET = Fleet(machines={m.name: m for m in (
    machine("local", "local", resources={"slot": 2}),
    machine("gpu-box-number-one", "ssh", aliases=("box1", "b1"), resources={"gpu": 8}),
    machine("v3", "tpu", node="v3-p1", zone="europe-west4-a", accelerator="v3-32", preemptible=True),
)})
RECORDS = {
    "local": MachineRecord(note="disk <full>", drained=Drained(reason="disk full", by="ann", at=NOW - 5)),
    "gpu-box-number-one": MachineRecord(state=MachineState.UNREACHABLE, detail="connection refused", since=NOW - 500),
    "v3": MachineRecord(state=MachineState.PREEMPTED, tpu_state="PREEMPTED", failures=2, next_try=NOW + 600,
                        health="HEALTHY", zone="europe-west4-a"),
}
MACHINE_ROWS = {
    "local": {"short": "local", "kind": "local", "workers": "1", "state": "up", "running": "0", "free": "slot=2",
              "note": "disk <full>", "detail": "drained: disk full", "seen": "up", "doing": "idle"},
    "gpu-box-number-one": {"short": "box1", "other_names": "gpu-box-number-one, b1", "kind": "ssh", "workers": "1",
                           "state": "unreachable", "running": "1", "free": "slot=0 gpu=6",
                           "detail": "connection refused (since 01-12 13:38)", "seen": "unreachable",
                           "doing": "jobs 7  connection refused"},
    "v3": {"short": "v3", "kind": "tpu", "accelerator": "v3-32 (on-demand, europe-west4-a)", "state": "preempted",
           "health": "HEALTHY", "running": "0", "free": "slot=1", "detail": "(next try 01-12 13:56)",
           "seen": "preempted", "doing": "idle  node PREEMPTED  back-off 600 s after 2 failure(s)"},
}


@pytest.mark.parametrize("name", MACHINE_ROWS)
def test_a_machines_row_cell_by_cell(name: str) -> None:
    from datetime import UTC

    state = State(machines=dict(RECORDS), jobs=[job(7, status=Status.RUNNING, machine="gpu-box-number-one",
                                                    alloc={"gpu": [0, 1], "slot": [0]})])
    published = msgspec.convert(fleet_rows(FLEET, state), list[MachineJson])
    rows = {row.name: row for row in machine_rows(FLEET, state, published, NOW, UTC)}
    row: MachineCells = rows[name]
    assert {f: getattr(row, f) for f in row.__struct_fields__ if getattr(row, f) and f != "name"} == MACHINE_ROWS[name]

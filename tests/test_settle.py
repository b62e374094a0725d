"""The settle step of a pass over plain act reports, built by hand: what launches, launches held back by
a setup, and stops mean for the jobs and machines (decide/settle.py), once applied as a pass applies
them (tests/test_settle_values.py: settling itself changes nothing). No I/O: microseconds each."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from jobtpu.decide import rules
from jobtpu.decide.observation import Kill
from jobtpu.decide.outcomes import LaunchReport, NoAnswer
from jobtpu.decide.settle import ActReport, LaunchDone, LaunchHeld, StopDone, settle
from jobtpu.decide.workers import LaunchResult, WorkerRef
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Machine
from jobtpu.schema.state import Attempt, Ending, Job, State, Status

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast

T0 = 1_000_000.0
NOW = T0 + 100.0
JOB = 7
BOX = Machine(name="box", kind="ssh", hosts=("10.0.0.0", "10.0.0.1"), resources={"gpu": 4})
TPU = Machine(name="tpu", kind="tpu", node="node-tpu", zone="europe-west4-a", accelerator="v3-32", preemptible=True)


def job_on(machine: Machine, status: Status, ending: Ending | None = None) -> Job:
    """Job 7, two workers on `machine`, in `status` (a stopping one with the ending its stop gives)."""
    job = Job(id=JOB, user="u", cmd="python train.py", archive="a.tar.gz", created=T0)
    job.status, job.machine, job.alloc = status, machine.name, {"slot": [0]}
    job.attempts = [Attempt(n=0, machine=machine.name, started=T0, workers=2)]
    job.ending, job.reason = ending, ending.reason if ending else None
    return job


def ok(worker: int) -> LaunchResult:
    return LaunchResult(WorkerRef(JOB, 0, worker), "ok")


def failed(worker: int, why: str) -> LaunchResult:
    return LaunchResult(WorkerRef(JOB, 0, worker), "fail", detail=why)


UNREACHABLE = NoAnswer("box[0]: connection refused", unreachable=True)
HANG_RECREATE = Ending(Status.FAILED, model.HANG, None, rules.RECREATE_RESUME)


def launch(*reports: LaunchReport) -> LaunchDone:
    return LaunchDone(JOB, BOX, dict(enumerate(reports)))


@dataclass(frozen=True)
class Row:
    """One report on job 7, and what settling it leaves: the job's status and reason, the Kills it
    asks for, and whether each machine is asked back."""

    job: Job
    report: ActReport
    status: Status
    reason: str | None
    kills: list[Kill] = field(default_factory=list)
    asked_back: dict[str, bool] = field(default_factory=lambda: {"box": False, "tpu": False})


ROWS = {
    "every worker started: running": Row(
        job_on(BOX, Status.LAUNCHING), launch(ok(0), ok(1)), Status.RUNNING, None),
    "one failed, one started: stopping, its started worker to stop": Row(
        job_on(BOX, Status.LAUNCHING), launch(ok(0), failed(1, "no python3")), Status.KILLING, model.LAUNCH_FAILED,
        kills=[Kill(JOB, "box", (WorkerRef(JOB, 0, 0),))]),
    "every worker failed: failed at once, nothing to stop": Row(
        job_on(BOX, Status.LAUNCHING), launch(failed(0, "no python3"), failed(1, "no python3")),
        Status.FAILED, model.LAUNCH_FAILED),
    "no worker reached: back to the queue": Row(
        job_on(BOX, Status.LAUNCHING), launch(UNREACHABLE, UNREACHABLE), Status.QUEUED, None),
    "held back by its machine's setup: back to the queue": Row(
        job_on(TPU, Status.LAUNCHING), LaunchHeld(JOB, "tpu", "setting up"), Status.QUEUED, None),
    "a stop whose workers are all gone, with a recreate rule, on a TPU: the TPU asked back": Row(
        job_on(TPU, Status.KILLING, HANG_RECREATE), StopDone(JOB, TPU, all_gone=True), Status.QUEUED,
        model.RECOVERING, asked_back={"box": False, "tpu": True}),
    "the same stop on an ssh box: only TPUs come back": Row(
        job_on(BOX, Status.KILLING, HANG_RECREATE), StopDone(JOB, BOX, all_gone=True), Status.QUEUED,
        model.RECOVERING),
    "a stop with a worker left: still stopping, nothing asked back": Row(
        job_on(TPU, Status.KILLING, HANG_RECREATE), StopDone(JOB, TPU, all_gone=False), Status.KILLING, model.HANG),
    "a stop by hand: killed": Row(
        job_on(BOX, Status.KILLING, Ending(Status.KILLED, model.KILLED)), StopDone(JOB, BOX, all_gone=True),
        Status.KILLED, model.KILLED),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=list(ROWS))
def test_settling_a_report_moves_its_job_and_asks_for_what_it_needs(row: Row) -> None:
    job = copy.deepcopy(row.job)  # the table's job stays as built
    state = State(jobs=[job])
    settled = settle(state, [row.report], NOW)
    settled.apply_to(state)
    assert settled.kills == row.kills
    assert (job.status, job.reason) == (row.status, row.reason)
    assert {name: state.machine(name).want_recreate for name in ("box", "tpu")} == row.asked_back


def test_a_half_failed_launch_ends_launch_failed_once_its_started_workers_are_stopped() -> None:
    """As a pass runs it: act → settle → stop what settle asked → settle."""
    job = job_on(BOX, Status.LAUNCHING)
    state = State(jobs=[job])
    settled = settle(state, [launch(ok(0), failed(1, "no python3"))], NOW)
    settled.apply_to(state)
    assert [(k.job, k.machine) for k in settled.kills] == [(JOB, "box")]
    stopped = settle(state, [StopDone(k.job, BOX, all_gone=True) for k in settled.kills], NOW)
    stopped.apply_to(state)
    assert stopped.kills == []
    assert (job.status, job.reason, job.last_line) == (Status.FAILED, model.LAUNCH_FAILED,
                                                        "launch failed on worker 1: no python3")


def test_reports_settle_in_order_and_one_for_a_job_gone_meanwhile_moves_nothing() -> None:
    stopping = job_on(TPU, Status.KILLING, HANG_RECREATE)
    launching = job_on(BOX, Status.LAUNCHING)
    launching.id = 8
    state = State(jobs=[stopping, launching])
    reports: list[ActReport] = [StopDone(JOB, TPU, all_gone=True), LaunchDone(99, BOX, {0: ok(0)}),
                                LaunchDone(8, BOX, {0: ok(0), 1: ok(1)})]
    settled = settle(state, reports, NOW)
    settled.apply_to(state)
    assert settled.kills == []
    assert (stopping.status, launching.status) == (Status.QUEUED, Status.RUNNING)
    assert [j.id for j in state.jobs] == [JOB, 8] and state.machine("tpu").want_recreate

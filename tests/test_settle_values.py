"""Settling as values (docs/design.md §3): the settle step changes nothing it is given and returns what
changes (the new records of the jobs and machines, each status move with its cause); the pass applies
them, and the events of a settled pass are as they ever were. Pure: no I/O."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobtpu.decide.observation import Plan
from jobtpu.decide.outcomes import LaunchReport, NoAnswer, kill_asked
from jobtpu.decide.settle import ActReport, LaunchDone, LaunchHeld, Settled, StopDone, settle
from jobtpu.decide.workers import LaunchOutcome, LaunchResult, WorkerRef
from jobtpu.passes.changes import job_events
from jobtpu.schema import state as model
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import MachineRecord, Operation
from jobtpu.schema.state import ACTIVE, Cause, Ending, Job, State, Status, Transition
from jobtpu.timing import current
from tests.test_decide import active, queued
from tests.test_settle import BOX, HANG_RECREATE, JOB, NOW, ROWS, T0, TPU, job_on, launch, ok

pytestmark = pytest.mark.fast

MACHINES = {"box": BOX, "tpu": TPU}


def _holding(job: Job) -> Callable[[], State]:
    """A state holding a copy of `job` (the table's job stays as built)."""
    return lambda: State(jobs=[copy.deepcopy(job)])


def _in_order() -> State:
    stopping, launching, also = (job_on(TPU, Status.KILLING, HANG_RECREATE), job_on(BOX, Status.LAUNCHING),
                                 job_on(TPU, Status.KILLING, HANG_RECREATE))
    launching.id, also.id = 8, 9
    return State(jobs=[stopping, launching, also])


def _recovering_held() -> State:
    job = job_on(TPU, Status.LAUNCHING)
    job.reason = model.RECOVERING
    return State(jobs=[job])


def _tpu_being_recreated() -> State:
    state = State(jobs=[job_on(TPU, Status.KILLING, HANG_RECREATE)])
    state.machines["tpu"] = MachineRecord(operation=Operation("create", "op-1", T0))
    return state


# What a pass settles: the state it holds, the reports of its acts, and whether it settles them past
# the launch give-up (timing's, read when the test runs). test_settle.py's table, and a few more.
Scenario = tuple[Callable[[], State], list[ActReport], bool]
SCENARIOS: dict[str, Scenario] = {
    **{name: (_holding(row.job), [row.report], False) for name, row in ROWS.items()},
    "an unclear answer: still launching, saying why": (
        lambda: State(jobs=[job_on(BOX, Status.LAUNCHING)]), [launch(ok(0), NoAnswer("timed out"))], False),
    "no clear answer past the give-up: every worker stopped": (
        lambda: State(jobs=[job_on(BOX, Status.LAUNCHING)]), [launch(ok(0), NoAnswer("rsync: reset"))], True),
    "held back while recovering: queued again, still recovering": (
        _recovering_held, [LaunchHeld(JOB, "tpu", "setup failed")], False),
    "in order, one for a job gone meanwhile; two stops ask their TPU back once": (
        _in_order, [StopDone(JOB, TPU, all_gone=True), LaunchDone(99, BOX, {0: ok(0)}),
                    LaunchDone(8, BOX, {0: ok(0), 1: ok(1)}), StopDone(9, TPU, all_gone=True)], False),
    "a TPU being recreated already is not asked back again": (
        _tpu_being_recreated, [StopDone(JOB, TPU, all_gone=True)], False),
}


def _now(late: bool) -> float:
    return T0 + current().launch_give_up + 1 if late else NOW


def check_values(state: State, reports: list[ActReport], now: float) -> Settled:
    """Settle `reports` over `state`: nothing given changes, field for field; every record that
    changes is new in what settle returned, each job's with its moves; applying it gives exactly
    those records. The state is left applied, as a pass leaves it."""
    before = copy.deepcopy(state)
    settled = settle(state, reports, now)
    assert state == before
    assert all(new != old for old in before.jobs if (new := settled.jobs.changed.get(old.id)) is not None), \
        "only records that change are new"
    assert all(new != before.machines.get(name) for name, new in settled.machines.items())
    assert {move.job for move in settled.moves} <= set(settled.jobs.changed), "a job that moved has its new record"
    settled.apply_to(state)
    assert state.jobs == [settled.jobs.changed.get(job.id, job) for job in before.jobs]
    assert state.machines == {**before.machines, **settled.machines}
    return settled


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_settle_changes_nothing_it_is_given_and_returns_every_record_it_changes(name: str) -> None:
    make, reports, late = SCENARIOS[name]
    check_values(make(), reports, _now(late))


def test_applying_what_settle_returned_reaches_whoever_holds_the_records() -> None:
    """The pass's TPU work holds the machine's record; the pass and `jobtpu kill` hold the jobs'."""
    job = job_on(TPU, Status.KILLING, HANG_RECREATE)
    state = State(jobs=[job])
    held = state.machine("tpu")
    settled = settle(state, [StopDone(JOB, TPU, all_gone=True)], NOW)
    assert (job.status, held.want_recreate) == (Status.KILLING, False)
    settled.apply_to(state)
    assert (job.status, job.reason, held.want_recreate) == (Status.QUEUED, model.RECOVERING, True)
    assert [(m.cause, m.to) for m in settled.moves] == [(Cause.RECOVER, Status.QUEUED)]


WORKER_ANSWERS: list[LaunchReport] = [
    *(LaunchResult(WorkerRef(JOB, 0, 0), outcome, detail="why") for outcome in LaunchOutcome),
    NoAnswer("box[0]: timed out"), NoAnswer("box[0]: connection refused", unreachable=True)]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(ACTIVE)), st.lists(st.sampled_from(WORKER_ANSWERS), min_size=1, max_size=3),
       st.booleans(), st.booleans())
def test_whatever_the_workers_answered_settle_changes_nothing_it_is_given(
        status: Status, answers: list[LaunchReport], late: bool, gone: bool) -> None:
    state = State(jobs=[job_on(BOX, status, Ending(Status.KILLED, model.KILLED) if status is Status.KILLING else None)])
    reports: list[ActReport] = [LaunchDone(JOB, BOX, dict(enumerate(answers))), StopDone(JOB, BOX, all_gone=gone)]
    check_values(state, reports, _now(late))


def test_kill_asked_changes_nothing_it_is_given() -> None:
    """`jobtpu kill` (passes/act.kill_jobs): the jobs' new records are in the plan, applied by the command."""
    jobs = [queued(1), active(2, machine="box", workers=2), active(3, Status.KILLING, machine="box")]
    jobs[2].ending = Ending(Status.FAILED, model.TIMEOUT)
    before = copy.deepcopy(jobs)
    plan = Plan()
    kills = [kill_asked(job, plan) for job in jobs]
    assert jobs == before
    assert [[k.job for k in ks] for ks in kills] == [[], [2], [3]]
    assert [(m.job, m.cause) for m in plan.moves] == [(1, Cause.KILL), (2, Cause.STOP)]
    plan.apply_to(jobs)
    assert [(j.status, j.ending) for j in jobs] == [
        (Status.KILLED, None), (Status.KILLING, Ending(Status.KILLED, model.KILLED)),
        (Status.KILLING, Ending(Status.FAILED, model.TIMEOUT))]


def as_a_pass(state: State, reports: list[ActReport], now: float) -> list[Transition]:
    """run_pass's act → settle → stop what it asked (every worker gone) → settle, applying each."""
    settled = check_values(state, reports, now)
    stopped = check_values(state, [StopDone(k.job, MACHINES[k.machine], all_gone=True) for k in settled.kills], now)
    return settled.moves + stopped.moves


# The events each scenario's pass made, as encoded, from the code before settle returned values.
ENDED_LAUNCH_FAILED = (b'{"time":%s,"kind":"job_ended","job":7,"machine":"box","user":"u","attempt":0,'
                       b'"detail":{"status":"failed","reason":"launch_failed","exit_code":null}}')
RECOVERING = (b'{"time":1000100.0,"kind":"job_recovering","job":%d,"machine":"%s","user":"u","attempt":0,'
              b'"detail":{"reason":"hang","recover":"resume"}}')
EVENTS: dict[str, bytes] = {
    "every worker started: running":
        b'[{"time":1000101.0,"kind":"job_running","job":7,"machine":"box","user":"u","attempt":0}]',
    "one failed, one started: stopping, its started worker to stop": b"[" + ENDED_LAUNCH_FAILED % b"1000100.0" + b"]",
    "every worker failed: failed at once, nothing to stop": b"[" + ENDED_LAUNCH_FAILED % b"1000100.0" + b"]",
    "no worker reached: back to the queue": b"[]",
    "held back by its machine's setup: back to the queue": b"[]",
    "a stop whose workers are all gone, with a recreate rule, on a TPU: the TPU asked back":
        b"[" + RECOVERING % (7, b"tpu") + b"]",
    "the same stop on an ssh box: only TPUs come back": b"[" + RECOVERING % (7, b"box") + b"]",
    "a stop with a worker left: still stopping, nothing asked back": b"[]",
    "a stop by hand: killed": b'[{"time":1000100.0,"kind":"job_ended","job":7,"machine":"box","user":"u",'
                              b'"attempt":0,"detail":{"status":"killed","reason":"killed","exit_code":null}}]',
    "an unclear answer: still launching, saying why": b"[]",
    "no clear answer past the give-up: every worker stopped": b"[" + ENDED_LAUNCH_FAILED % b"%r" + b"]",
    "held back while recovering: queued again, still recovering": b"[]",
    "in order, one for a job gone meanwhile; two stops ask their TPU back once":
        b"[" + RECOVERING % (7, b"tpu") + b',{"time":1000101.0,"kind":"job_running","job":8,"machine":"box",'
        b'"user":"u","attempt":0},' + RECOVERING % (9, b"tpu") + b"]",
    "a TPU being recreated already is not asked back again": b"[" + RECOVERING % (7, b"tpu") + b"]",
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_events_of_a_settled_pass_are_as_they_were(name: str) -> None:
    make, reports, late = SCENARIOS[name]
    state, now = make(), _now(late)
    moves = as_a_pass(state, reports, now)
    expected = EVENTS[name].replace(b"%r", repr(now).encode())
    assert msgspec.json.encode(job_events(moves, state.jobs, acted=now, now=now + 1)) == expected

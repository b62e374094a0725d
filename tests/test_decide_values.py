"""Decisions as values (docs/design.md §3): decide changes nothing it is given and returns what
changes (new records, status moves each with its cause); the pass applies them; a job's events are
made from the causes of its moves. Pure: no I/O."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings

from jobtpu.decide import core
from jobtpu.decide.events import JOB_ENDED, JOB_LAUNCHED, JOB_RECOVERING, JOB_RESUMED, JOB_RUNNING, PREEMPTED
from jobtpu.decide.observation import MachineView, Observation, Plan
from jobtpu.decide.outcomes import launched
from jobtpu.decide.workers import LaunchOutcome, LaunchResult, WorkerRef
from jobtpu.passes.changes import job_events, job_events_told
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.state import Attempt, Cause, Job, Status, Transition
from tests.test_decide import (
    MACHINES,
    NOW,
    T0,
    active,
    fleet,
    gpu_box,
    local,
    queued,
    scenario,
    seen,
    tpu,
    ws,
)

pytestmark = pytest.mark.fast

Case = tuple[Callable[[], list[Job]], list[Machine], Callable[[list[Job]], Observation]]


def _failed_first() -> list[Job]:
    first = queued(1)
    first.status, first.reason = Status.FAILED, "exit 1"
    return [first, queued(2, after=[1])]


def _stalled() -> list[Job]:
    job = active(stall=30.0, rule="resume")
    job.log_size, job.log_grew = 10, NOW - 31
    return [job]


def _back_to_recover() -> list[Job]:
    return [queued(1, attempt=1, reason=model.RECOVERING, resume=True,
                   attempts=[Attempt(n=0, machine="m", outcome=model.LOST, started=T0, ended=T0 + 1)])]


# The table tests' cases (tests/test_decide.py), with their causes, and a few more: every kind of
# record decide writes (a move, a pending reason, a log's growth, a recovery's count, a new attempt).
CASES: dict[str, tuple[Case, list[Cause]]] = {
    "queued to launching": (
        (lambda: [queued(1)], [local("m", slot=1)], lambda jobs: seen("m")), [Cause.LAUNCH]),
    "running to killing on timeout": (
        (lambda: [active(workers=2, timeout=60.0)], [gpu_box("m", hosts=2)],
         lambda jobs: seen("m", ws(jobs[0], 0, log=5), ws(jobs[0], 1, log=5))), [Cause.STOP]),
    "preempted, queued to resume": (
        (lambda: [active(status=Status.LAUNCHING, machine="tpu", workers=4)], [tpu()],
         lambda jobs: seen("tpu", preempted=True, ready=False)), [Cause.RECOVER]),
    "its dependency failed": (
        (_failed_first, [local("m", slot=1)], lambda jobs: seen("m")), [Cause.REFUSE]),
    "every worker exited 0": (
        (lambda: [active()], [local("m", slot=1)],
         lambda jobs: seen("m", ws(jobs[0], 0, alive=False, exit_code=0))), [Cause.END]),
    "lost, recovered and launched again in the same pass": (
        (lambda: [active(rule="resume")], [gpu_box("m")], lambda jobs: seen("m", ws(jobs[0], 0, alive=False))),
        [Cause.RECOVER, Cause.RELAUNCH]),
    "queued to recover, launched again": (
        (_back_to_recover, [gpu_box("m")], lambda jobs: seen("m")), [Cause.RELAUNCH]),
    "stalled: stopped as hang": ((_stalled, [gpu_box("m")], lambda jobs: seen("m", ws(jobs[0], 0, log=10))),
                                 [Cause.STOP]),
    "its log grew: still running": (
        (lambda: [active()], [gpu_box("m")], lambda jobs: seen("m", ws(jobs[0], 0, log=99))), []),
    "a cycle fails all of it": (
        (lambda: [queued(1, after=[2]), queued(2, after=[1])], [local("m", slot=1)], lambda jobs: seen("m")),
        [Cause.REFUSE, Cause.REFUSE]),
    "no room: each waits, saying why": (
        (lambda: [active(alloc={"slot": [0]}), queued(2), queued(3)], [local("m", slot=1)],
         lambda jobs: seen("m", ws(jobs[0], 0))), []),
    "a queued job asks for its preempted TPU back": (
        (lambda: [queued(1, req=["v3-32"])], [tpu("t1")],
         lambda jobs: Observation(now=NOW, machines={"t1": MachineView(preempted=True, ready=False)})), []),
    "its machine does not answer": (
        (lambda: [active()], [gpu_box("m")],
         lambda jobs: Observation(now=NOW, machines={"m": MachineView(reachable=False)})), []),
}


def _given(case: Case) -> tuple[list[Job], Fleet, Observation]:
    make, machines, observe = case
    jobs = make()
    return jobs, fleet(*machines), observe(jobs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_decide_changes_nothing_it_is_given(name: str) -> None:
    """decide's jobs, fleet and observation are equal, field for field, after it as before; what it
    decided is in its plan, and applying the plan gives the jobs a pass leaves (a dry run does not)."""
    jobs, machines, observed = _given(CASES[name][0])
    before = copy.deepcopy((jobs, machines, observed))
    plan = core.decide(jobs, machines, observed)
    assert (jobs, machines, observed) == before
    assert all(new != old for old in before[0] if (new := plan.changed.get(old.id)) is not None), \
        "only records that change are new"
    plan.apply_to(jobs)
    assert jobs == [plan.changed.get(job.id, job) for job in before[0]]


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_whatever_was_observed_decide_changes_nothing_it_is_given(case: tuple[list[Job], Observation]) -> None:
    jobs, observed = case
    machines = fleet(*MACHINES)
    before = copy.deepcopy((jobs, machines, observed))
    core.decide(jobs, machines, observed)
    assert (jobs, machines, observed) == before


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_move_names_its_cause(name: str) -> None:
    jobs, machines, observed = _given(CASES[name][0])
    assert [m.cause for m in core.decide(jobs, machines, observed).moves] == CASES[name][1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_event_carries_a_cause_taken_from_a_move_of_its_job(name: str) -> None:
    """Each job event a pass tells comes from one move of that job, of the same attempt where it has one."""
    jobs, machines, observed = _given(CASES[name][0])
    plan = core.decide(jobs, machines, observed)
    plan.apply_to(jobs)
    settled = Plan()
    for job in jobs:  # the pass's act and settle: every launch's workers report they started
        if job.status is Status.LAUNCHING:
            workers = range(job.current.workers if job.current else 1)
            ok = {w: LaunchResult(WorkerRef(job.id, job.attempt, w), LaunchOutcome.OK) for w in workers}
            launched(job, machines.machines[job.machine or ""], dict(ok), NOW, settled)
    settled.apply_to(jobs)
    moves = plan.moves + settled.moves
    told = job_events_told(moves, jobs, acted=NOW, now=NOW + 1)
    assert [t.event for t in told] == job_events(moves, jobs, acted=NOW, now=NOW + 1)
    assert bool(told) == any(m.cause is not Cause.STOP for m in moves), "a move of a job's status is news"
    for t in told:
        assert t.cause in {m.cause for m in moves if m.job == t.event.job
                           and (t.event.attempt is None or m.attempt == t.event.attempt)}, t


def _job(**kw: Any) -> Job:
    return Job(id=7, user="ann", cmd="train", archive="a.tar.gz", created=1.0, **{"machine": "tpu", **kw})


@pytest.mark.parametrize(("cause", "kinds"), [
    (Cause.RELAUNCH, [JOB_LAUNCHED, JOB_RESUMED]),
    (Cause.LAUNCH, [JOB_LAUNCHED]),  # a person's resume: its launch is no recovery, whatever the reason said
])
def test_a_launch_is_told_as_a_resume_by_its_cause_alone(cause: Cause, kinds: list[str]) -> None:
    """passes/changes.py: whether a job resumed is the launch's cause, never read from the reasons
    of its record or its moves (both are the same here, only the cause differs)."""
    job = _job(status=Status.LAUNCHING, attempt=1, resume=True, reason=model.RECOVERING,
               attempts=[Attempt(n=0, machine="tpu", started=10.0, ended=50.0, outcome=model.PREEMPTED),
                         Attempt(n=1, machine="tpu", started=60.0, resume=True)])
    move = Transition(7, Status.QUEUED, Status.LAUNCHING, model.RECOVERING, model.RECOVERING, 1, cause)
    assert [e.kind for e in job_events([move], [job], acted=55.0, now=70.0)] == kinds


def test_started_workers_end_and_recover_are_each_told_from_their_move() -> None:
    running = _job(status=Status.RUNNING, attempts=[Attempt(n=0, machine="tpu", started=10.0)])
    started = Transition(7, Status.LAUNCHING, Status.RUNNING, None, None, 0, Cause.STARTED)
    assert [(t.cause, t.event.kind) for t in job_events_told([started], [running], 5.0, 20.0)] == [
        (Cause.STARTED, JOB_RUNNING)]
    ended = _job(status=Status.FAILED, reason=model.PREEMPTED,
                 attempts=[Attempt(n=0, machine="tpu", started=10.0, ended=15.0, outcome=model.PREEMPTED)])
    end = Transition(7, Status.RUNNING, Status.FAILED, model.PREEMPTED, None, 0, Cause.END)
    assert [(t.cause, t.event.kind) for t in job_events_told([end], [ended], 5.0, 20.0)] == [
        (Cause.END, PREEMPTED), (Cause.END, JOB_ENDED)]
    queued_again = _job(status=Status.QUEUED, reason=model.RECOVERING, attempt=1, machine=None, resume=True,
                        attempts=[Attempt(n=0, machine="tpu", started=10.0, ended=15.0, outcome=model.LOST)])
    recover = Transition(7, Status.RUNNING, Status.QUEUED, model.RECOVERING, None, 0, Cause.RECOVER)
    assert [(t.cause, t.event.kind) for t in job_events_told([recover], [queued_again], 5.0, 20.0)] == [
        (Cause.RECOVER, JOB_RECOVERING)]

"""The pure heart of a pass, with jobs and observations built by hand: decide, endings, rules,
requests and the transition table. No I/O."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobtpu.decide import core, rules
from jobtpu.decide.core import apply_ending, requeue, wants_recreate
from jobtpu.decide.dispatch import used_resources
from jobtpu.decide.fit import allocate, parse_request, why_not
from jobtpu.decide.observation import Kill, Launch, MachineView, Observation, Plan, Recreate
from jobtpu.decide.outcomes import (
    LaunchReport,
    NoAnswer,
    goes_ahead,
    kill_asked,
    killed,
    launched,
    not_launched,
)
from jobtpu.decide.workers import LaunchResult, WorkerRef, WorkerState
from jobtpu.errors import JobtpuError
from jobtpu.schema import state as model
from jobtpu.schema.fleet import DEFAULT_ERROR_PATTERNS, Fleet, Machine, UserLimit
from jobtpu.schema.state import (
    ACTIVE,
    ENDED,
    STATUS_FIELDS,
    TRANSITIONS,
    Attempt,
    Cause,
    Ending,
    IllegalTransition,
    Job,
    Status,
)
from jobtpu.timing import current

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


T0 = 1_000_000.0
NOW = T0 + 100.0
_T = TypeVar("_T")  # what an outcome function answers


# ---- builders ---------------------------------------------------------------------------------------

def decide(jobs: list[Job], fleet: Fleet, seen: Observation) -> Any:
    """A pass's decision and its applying (passes/manage.py): the jobs as the pass leaves them. decide
    itself changes nothing it is given (test_decide_changes_nothing_it_is_given)."""
    plan = core.decide(jobs, fleet, seen)
    plan.apply_to(jobs)
    return plan


def local(name: str = "local", **resources: int) -> Machine:
    return Machine(name=name, kind="local", resources=dict(resources))


def gpu_box(name: str = "box", gpus: int = 4, hosts: int = 1) -> Machine:
    return Machine(name=name, kind="ssh", hosts=tuple(f"10.0.0.{i}" for i in range(hosts)), resources={"gpu": gpus})


def tpu(name: str = "tpu", accelerator: str = "v3-32", preemptible: bool = True) -> Machine:
    return Machine(name=name, kind="tpu", node=f"node-{name}", zone="europe-west4-a", accelerator=accelerator,
                   preemptible=preemptible)


def fleet(*machines: Machine, patterns: dict[str, tuple[str, ...]] | None = None) -> Fleet:
    return Fleet(machines={m.name: m for m in machines},
                 error_patterns=dict(DEFAULT_ERROR_PATTERNS) if patterns is None else patterns)


def queued(job_id: int = 1, **kw: Any) -> Job:
    return Job(id=job_id, user="u", cmd="python train.py", archive="a.tar.gz", created=T0, **kw)


def active(job_id: int = 1, status: Status = Status.RUNNING, machine: str = "m", workers: int = 1,
           attempt: int = 0, alloc: dict[str, list[int]] | None = None, **kw: Any) -> Job:
    """A job on `machine` in `status`, with its attempts 0..attempt (earlier ones ended)."""
    attempts = [Attempt(n=n, machine=machine, outcome=model.LOST, started=T0 - 50, ended=T0 - 40)
                for n in range(attempt)]
    attempts.append(Attempt(n=attempt, machine=machine, started=T0, workers=workers))
    job = queued(job_id, **kw)
    job.status, job.machine, job.attempt, job.attempts = status, machine, attempt, attempts
    job.alloc = {"slot": [0]} if alloc is None else alloc
    job.log_grew = job.log_grew if job.log_grew is not None else T0
    return job


def ws(job: Job, worker: int, alive: bool = True, exit_code: int | None = None, log: int = 0) -> WorkerState:
    return WorkerState(WorkerRef(job.id, job.attempt, worker), pid=100 + worker, alive=alive, exit_code=exit_code,
                       log_size=log, claimed=True)


def seen(machine: str = "m", *states: WorkerState, now: float = NOW, tails: dict[WorkerRef, str] | None = None,
         **view: Any) -> Observation:
    v = MachineView(reachable=True, workers={s.ref: s for s in states}, **view)
    return Observation(now=now, machines={machine: v}, log_tails=tails or {})


def ref(job: Job, worker: int) -> WorkerRef:
    return WorkerRef(job.id, job.attempt, worker)


def kills(plan: Any) -> list[Kill]:
    return [a for a in plan.actions if isinstance(a, Kill)]


def launches(plan: Any) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch)]


def recreates(plan: Any) -> list[Recreate]:
    return [a for a in plan.actions if isinstance(a, Recreate)]


# ---- launching ----------------------------------------------------------------------------------------

def test_launching_job_is_launched_again_idempotently() -> None:
    job = active(status=Status.LAUNCHING, workers=3)
    plan = decide([job], fleet(gpu_box("m", hosts=3)), seen("m"))
    assert plan.actions == [Launch(job.id, "m", 0, 3)]
    assert job.status is Status.LAUNCHING


def test_launching_on_an_unreachable_machine_waits() -> None:
    job = active(status=Status.LAUNCHING)
    plan = decide([job], fleet(gpu_box("m")), Observation(NOW, {"m": MachineView(reachable=False)}))
    assert plan.actions == [] and job.status is Status.LAUNCHING


def test_launching_on_a_machine_removed_from_machines_json_fails() -> None:
    job = active(status=Status.LAUNCHING, machine="gone")
    plan = decide([job], fleet(local()), Observation(NOW))
    assert (job.status, job.reason, job.alloc) == (Status.FAILED, model.LAUNCH_FAILED, {})
    assert job.attempts[-1].outcome == model.LAUNCH_FAILED and job.attempts[-1].ended == NOW
    assert plan.actions == []


def test_launching_on_a_preempted_tpu_recovers_under_pre() -> None:
    job = active(status=Status.LAUNCHING, machine="tpu", workers=4)
    plan = decide([job], fleet(tpu()), seen("tpu", preempted=True, ready=False))
    assert (job.status, job.reason, job.attempt, job.resume) == (Status.QUEUED, model.RECOVERING, 1, True)
    assert recreates(plan) == [Recreate("tpu")]


# ---- running: exits -------------------------------------------------------------------------------------

def test_all_workers_exit_zero_is_finished() -> None:
    job = active(workers=3)
    plan = decide([job], fleet(gpu_box("m", hosts=3)), seen("m", *(ws(job, w, False, 0) for w in range(3))))
    assert (job.status, job.reason, job.exit_code) == (Status.FINISHED, None, 0)
    a = job.attempts[-1]
    assert (a.outcome, a.exit_code, a.ended) == (model.FINISHED, 0, NOW)
    assert job.alloc == {} and plan.actions == []


def test_some_workers_finished_others_running_keeps_running() -> None:
    job = active(workers=2)
    decide([job], fleet(gpu_box("m", hosts=2)), seen("m", ws(job, 0, False, 0), ws(job, 1, True)))
    assert job.status is Status.RUNNING and job.reason is None


def test_one_worker_fails_the_others_are_stopped_at_once() -> None:
    job = active(workers=4)
    states = [ws(job, 0), ws(job, 1, False, 3), ws(job, 2), ws(job, 3, False, 0)]
    plan = decide([job], fleet(gpu_box("m", hosts=4)), seen("m", *states))
    assert (job.status, job.reason) == (Status.KILLING, "exit 3")
    assert kills(plan) == [Kill(job.id, "m", (ref(job, 0), ref(job, 2)))]
    assert job.ending == Ending(Status.FAILED, "exit 3", 3, None)
    # The next pass keeps stopping every worker (idempotent) and does not re-classify.
    plan = decide([job], fleet(gpu_box("m", hosts=4)), seen("m", ws(job, 0, False, 143), ws(job, 2, True)))
    assert kills(plan) == [Kill(job.id, "m", tuple(ref(job, w) for w in range(4)))]
    assert job.ending == Ending(Status.FAILED, "exit 3", 3, None)
    # Once they are gone, the job ends with the first failure's exit code, not the stopped workers'.
    apply_ending(job, job.ending, NOW + 5)
    assert (job.status, job.reason, job.exit_code) == (Status.FAILED, "exit 3", 3)
    assert (job.attempts[-1].outcome, job.attempts[-1].exit_code) == ("exit 3", 3)


def test_lowest_failed_worker_wins_a_tie() -> None:
    job = active(workers=4)
    states = [ws(job, 0), ws(job, 3, False, 9), ws(job, 2, False, 4), ws(job, 1)]
    plan = decide([job], fleet(gpu_box("m", hosts=4)), seen("m", *states))
    assert job.ending is not None and (job.ending.reason, job.ending.exit_code) == ("exit 4", 4)
    assert kills(plan) == [Kill(job.id, "m", (ref(job, 0), ref(job, 1)))]


def test_the_worker_that_failed_first_gives_the_exit_code() -> None:
    # Worker 2 crashed; worker 0 died a moment later of the broken collective: worker 2's code counts.
    job = active(workers=3)
    states = [msgspec.structs.replace(ws(job, 0, False, 1), exited_at=NOW - 1.0), ws(job, 1),
              msgspec.structs.replace(ws(job, 2, False, 7), exited_at=NOW - 1.5)]
    decide([job], fleet(gpu_box("m", hosts=3)), seen("m", *states))
    assert job.ending is not None and (job.ending.reason, job.ending.exit_code) == ("exit 7", 7)


def test_failure_with_nothing_left_alive_ends_at_once() -> None:
    job = active(workers=2)
    plan = decide([job], fleet(gpu_box("m", hosts=2)), seen("m", ws(job, 0, False, 0), ws(job, 1, False, 2)))
    assert (job.status, job.reason, job.exit_code) == (Status.FAILED, "exit 2", 2)
    assert plan.actions == []


@pytest.mark.parametrize(("tail", "reason"), [
    ("step 10\nE0101 GRPC error: peer went away\n", model.GRPC),
    ("DEADLINE_EXCEEDED: barrier timed out", model.GRPC),
    ("jax.errors: RESOURCE_EXHAUSTED: Out of memory while allocating", model.OOM),
    ("CUDA out of memory. Then: Socket closed", model.OOM),  # oom first: RPC errors follow an OOM
    ("Traceback ... ValueError: bad shape", "exit 1"),
])
def test_failure_is_classified_from_the_log_tail(tail: str, reason: str) -> None:
    job = active(workers=1, rule="pass")
    decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0, False, 1), tails={ref(job, 0): tail}))
    assert (job.status, job.reason, job.exit_code) == (Status.FAILED, reason, 1)


def test_user_error_patterns_replace_the_defaults() -> None:
    patterns = {"grpc": ("coordination service lost",), "oom": ("HBM full",)}
    job1, job2, job3 = active(1, rule="pass"), active(2, rule="pass"), active(3, rule="pass")
    obs = seen("m", ws(job1, 0, False, 1), ws(job2, 0, False, 1), ws(job3, 0, False, 1),
               tails={ref(job1, 0): "x: coordination service lost", ref(job2, 0): "HBM full",
                      ref(job3, 0): "GRPC error"})
    decide([job1, job2, job3], fleet(gpu_box("m", gpus=8), patterns=patterns), obs)
    assert [j.reason for j in (job1, job2, job3)] == [model.GRPC, model.OOM, "exit 1"]


def test_grpc_failure_under_resume_is_resumed_but_oom_never_is() -> None:
    grpc = active(1, rule="resume")
    oom = active(2, rule="resume")
    obs = seen("m", ws(grpc, 0, False, 1), ws(oom, 0, False, 1),
               tails={ref(grpc, 0): "GRPC error", ref(oom, 0): "RESOURCE_EXHAUSTED"}, ready=False)
    decide([grpc, oom], fleet(gpu_box("m", gpus=8)), obs)
    assert (grpc.status, grpc.reason, grpc.attempt, grpc.resume) == (Status.QUEUED, model.RECOVERING, 1, True)
    assert grpc.attempts[0].outcome == model.GRPC and grpc.recoveries == 1
    assert (oom.status, oom.reason, oom.exit_code) == (Status.FAILED, model.OOM, 1)


# ---- running: lost, unreachable, timeout, stall -------------------------------------------------------

@pytest.mark.parametrize(("rule", "status", "resume", "recreate"), [
    ("pass", Status.FAILED, False, False),
    ("resume", Status.QUEUED, True, False),
    ("pre", Status.QUEUED, True, False),
    ("rerun", Status.QUEUED, False, False),
    ("reapply", Status.QUEUED, True, True),
])
def test_lost_worker_goes_through_the_rule(rule: str, status: Status, resume: bool, recreate: bool) -> None:
    job = active(rule=rule, attempt=2, alloc={"gpu": [1]}, machine="m")
    plan = decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0, alive=False, exit_code=None), ready=False))
    assert job.status is status and job.attempts[-1].outcome == model.LOST
    if status is Status.FAILED:
        assert (job.reason, job.exit_code, job.attempt) == (model.LOST, None, 2)
    else:
        assert (job.reason, job.attempt, job.resume, job.machine) == (model.RECOVERING, 3, resume, None)
        assert job.recoveries == 1
    assert job.alloc == {}
    assert recreates(plan) == ([Recreate("m")] if recreate else [])


def test_a_worker_missing_from_the_probe_is_lost_and_the_others_stopped() -> None:
    job = active(workers=2, rule="resume")
    plan = decide([job], fleet(gpu_box("m", hosts=2)), seen("m", ws(job, 0)))
    assert (job.status, job.reason) == (Status.KILLING, model.LOST)
    assert job.ending == Ending(Status.FAILED, model.LOST, None, rules.RESUME)
    assert kills(plan) == [Kill(job.id, "m", (ref(job, 0),))]
    apply_ending(job, job.ending, NOW)
    assert (job.status, job.reason, job.attempt, job.resume) == (Status.QUEUED, model.RECOVERING, 1, True)


def test_unreachable_machine_marks_running_jobs_and_changes_nothing_else() -> None:
    job = active()
    plan = decide([job], fleet(gpu_box("m")), Observation(NOW, {"m": MachineView(reachable=False, error="timed out")}))
    assert (job.status, job.reason) == (Status.RUNNING, model.UNREACHABLE)
    assert plan.actions == [] and any("timed out" in n for n in plan.notes)
    decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0)))
    assert (job.status, job.reason) == (Status.RUNNING, None)


def test_running_on_a_machine_removed_from_machines_json_is_unreachable() -> None:
    job = active(machine="gone")
    plan = decide([job], fleet(local()), Observation(NOW))
    assert (job.status, job.reason) == (Status.RUNNING, model.UNREACHABLE) and plan.actions == []


def test_timeout_stops_the_job_and_is_never_retried() -> None:
    job = active(workers=2, timeout=60.0, rule="resume")
    plan = decide([job], fleet(gpu_box("m", hosts=2)), seen("m", ws(job, 0, log=5), ws(job, 1, log=5)))
    assert (job.status, job.reason) == (Status.KILLING, model.TIMEOUT)
    assert job.ending == Ending(Status.FAILED, model.TIMEOUT, None, None)
    assert kills(plan) == [Kill(job.id, "m", (ref(job, 0), ref(job, 1)))]
    apply_ending(job, job.ending, NOW)
    assert (job.status, job.reason, job.attempts[-1].outcome) == (Status.FAILED, model.TIMEOUT, model.TIMEOUT)


def test_no_timeout_before_the_limit() -> None:
    job = active(timeout=200.0)
    decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0)))
    assert job.status is Status.RUNNING


def test_stall_stops_the_job_as_hang_and_its_rule_applies() -> None:
    job = active(stall=30.0, rule="resume")
    job.log_size, job.log_grew = 10, NOW - 31
    plan = decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0, log=10)))
    assert (job.status, job.reason) == (Status.KILLING, model.HANG)
    assert job.ending == Ending(Status.FAILED, model.HANG, None, rules.RESUME)
    assert kills(plan) == [Kill(job.id, "m", (ref(job, 0),))]
    apply_ending(job, job.ending, NOW)
    assert (job.status, job.reason, job.resume, job.attempt) == (Status.QUEUED, model.RECOVERING, True, 1)


def test_a_growing_log_is_not_a_stall() -> None:
    job = active(stall=30.0)
    job.log_size, job.log_grew = 10, NOW - 31
    decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0, log=11)))
    assert job.status is Status.RUNNING and (job.log_size, job.log_grew) == (11, NOW)


# ---- preemption --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rule", "status", "resume", "recreate"), [
    (None, Status.QUEUED, True, True),  # a preemptible TPU's default rule is pre
    ("pre", Status.QUEUED, True, True),
    ("reapply", Status.QUEUED, True, True),
    ("rerun", Status.QUEUED, False, True),
    ("pass", Status.FAILED, False, False),
    ("resume", Status.FAILED, False, False),
])
def test_preemption_goes_through_the_rule(rule: str | None, status: Status, resume: bool, recreate: bool) -> None:
    job = active(machine="tpu", workers=4, rule=rule)
    plan = decide([job], fleet(tpu()), seen("tpu", preempted=True, ready=False))
    assert job.status is status and job.attempts[-1].outcome == model.PREEMPTED
    if status is Status.QUEUED:
        # a preemption is counted apart, never against --max-recoveries (docs/reference/requests-and-rules.md §7.3)
        assert (job.reason, job.resume, job.attempt, job.preemptions, job.recoveries) == (model.RECOVERING, resume, 1, 1, 0)
    else:
        assert (job.reason, job.exit_code, job.preemptions, job.recoveries) == (model.PREEMPTED, None, 0, 0)
    assert recreates(plan) == ([Recreate("tpu")] if recreate else [])
    assert kills(plan) == [] and launches(plan) == []  # a preempted TPU takes no launch this pass


def test_default_rules() -> None:
    assert tpu(preemptible=True).default_rule() == "pre"
    assert tpu(preemptible=False).default_rule() == "pass"
    assert gpu_box().default_rule() == "pass" and local().default_rule() == "pass"
    job = active(machine="m")  # rule None on an ssh box: pass
    decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0, alive=False)))
    assert (job.status, job.reason) == (Status.FAILED, model.LOST)


def test_killing_job_on_a_preempted_tpu_ends_without_a_kill() -> None:
    job = active(status=Status.KILLING, machine="tpu")
    job.ending = Ending(Status.KILLED, model.KILLED)
    plan = decide([job], fleet(tpu()), seen("tpu", preempted=True))
    assert (job.status, job.reason) == (Status.KILLED, model.KILLED) and plan.actions == []


def test_killing_job_waits_for_an_unreachable_machine() -> None:
    job = active(status=Status.KILLING)
    job.ending = Ending(Status.KILLED, model.KILLED)
    plan = decide([job], fleet(gpu_box("m")), Observation(NOW, {"m": MachineView(reachable=False)}))
    assert job.status is Status.KILLING and plan.actions == []


def test_killing_job_without_an_ending_ends_killed() -> None:
    job = active(status=Status.KILLING, machine="gone")
    decide([job], fleet(gpu_box("m")), Observation(NOW))
    assert (job.status, job.reason) == (Status.KILLED, model.KILLED)


# ---- max recoveries ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("machine", "view", "reason", "budget", "spent"), [
    (tpu("m"), {"preempted": True}, model.PREEMPTED, {"max_preemptions": 3, "preemptions": 3},
     "3 preemptions used, the most --max-preemptions allows"),
    (gpu_box("m"), {}, model.LOST, {"max_recoveries": 3, "recoveries": 3},
     "3 infrastructure recoveries used, the most --max-recoveries allows"),
])
def test_a_spent_budget_marks_failed_with_the_reason(machine: Machine, view: dict[str, Any], reason: str,
                                                     budget: dict[str, int], spent: str) -> None:
    job = active(rule="reapply", attempt=3, **budget)
    states = () if view else (ws(job, 0, alive=False),)
    plan = decide([job], fleet(machine), seen("m", *states, **view))
    assert (job.status, job.reason, job.attempt) == (Status.FAILED, reason, 3)
    assert recreates(plan) == [] and any(n == f"job {job.id}: {reason} ({spent})" for n in plan.notes), plan.notes
    assert [m.spent for m in plan.moves] == [spent]  # what the job_ended event says


def test_recoveries_count_up_to_the_limit() -> None:
    job = active(rule="resume", max_recoveries=2)
    for n in (1, 2):
        decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0, alive=False)))
        # queued again and, in the same pass, dispatched again to m
        assert (job.status, job.attempt, job.recoveries, job.reason) == (Status.LAUNCHING, n, n, model.RECOVERING)
        assert job.attempts[-1].resume
        job.move(Status.RUNNING, cause=Cause.STARTED)
    decide([job], fleet(gpu_box("m")), seen("m", ws(job, 0, alive=False)))
    assert (job.status, job.reason, job.recoveries, job.attempt) == (Status.FAILED, model.LOST, 2, 2)
    assert [a.outcome for a in job.attempts] == [model.LOST] * 3


def test_rules_recovery_table() -> None:
    table = {
        ("pre", model.PREEMPTED): rules.RECREATE_RESUME, ("pass", model.PREEMPTED): None,
        ("reapply", model.PREEMPTED): rules.RECREATE_RESUME, ("rerun", model.PREEMPTED): rules.RECREATE_RERUN,
        ("resume", model.PREEMPTED): None,
    }
    for retriable in (model.GRPC, model.LOST, model.HANG):
        table.update({("pre", retriable): rules.RESUME, ("pass", retriable): None,
                      ("reapply", retriable): rules.RECREATE_RESUME, ("rerun", retriable): rules.RERUN,
                      ("resume", retriable): rules.RESUME})
    for never in ("exit 1", "exit 137", model.OOM, model.TIMEOUT, model.LAUNCH_FAILED, model.KILLED):
        table.update({(rule, never): None for rule in rules.RULES})
    for (rule, reason), expected in table.items():
        assert rules.recovery(rule, reason, 0, 20) == expected, (rule, reason)
        assert rules.recovery(rule, reason, 20, 20) is None


def test_recovery_words_are_their_enum_from_the_rules_to_the_ending() -> None:
    said = {rules.recovery(rule, reason, 0, 20) for rule in rules.RULES for reason in (model.PREEMPTED, model.GRPC)}
    said |= {rules.retry(rule, "exit 1", 0, 1) for rule in rules.RULES}
    assert said - {None} == set(model.Recovery) and all(type(w) is model.Recovery for w in said - {None})
    decoded = msgspec.json.decode(b'{"status": "failed", "recover": "recreate-rerun"}', type=Ending)
    assert decoded.recovery is model.Recovery.RECREATE_RERUN and Ending(Status.KILLED).recovery is None


def test_classify() -> None:
    p = DEFAULT_ERROR_PATTERNS
    assert rules.classify(3, "", p) == "exit 3"
    assert rules.classify(137, "killed by the kernel", p) == "exit 137"
    assert rules.classify(1, "StatusCode.UNAVAILABLE", p) == model.GRPC
    assert rules.classify(1, "Ran out of memory in memory space hbm", p) == model.OOM
    assert rules.classify(1, "GRPC error", {"grpc": (), "oom": ()}) == "exit 1"


@pytest.mark.parametrize(("tail", "reason"), [
    ("jax.errors.JaxRuntimeError: GRPC Error received", model.GRPC),  # any case, as the old manager
    ("grpc error: connection reset", model.GRPC),
    ("Fatal Python error: Attempt to free invalid pointer 0x7f", model.GRPC),
    ("bash: line 1: /opt/conda/bin/python: No such file or directory", model.GRPC),
    ("deadline_exceeded while waiting for peers", model.GRPC),
    ("Allocation type: HLO temp\n==========", model.OOM),
    ("RuntimeError: CUDA Out Of Memory. Tried to allocate", model.OOM),
    ("Ran out of memory in memory space hbm; GRPC error follows", model.OOM),  # oom wins over its cascade
    ("python3: can't open file 'train.py': No such file", "exit 1"),
    ("", "exit 1"),
])
def test_classify_default_words(tail: str, reason: str) -> None:
    assert rules.classify(1, tail, DEFAULT_ERROR_PATTERNS) == reason


# ---- endings and requeue -------------------------------------------------------------------------------------

def test_resume_sets_the_flag_and_next_attempt_rerun_clears_it() -> None:
    job = active(rule="resume", attempt=1, alloc={"gpu": [0, 1]})
    job.exit_code = None
    apply_ending(job, Ending(Status.FAILED, model.GRPC, 1, rules.RESUME), NOW)
    assert (job.status, job.reason, job.attempt, job.resume, job.machine, job.alloc, job.exit_code) == \
        (Status.QUEUED, model.RECOVERING, 2, True, None, {}, None)
    assert (job.attempts[1].outcome, job.attempts[1].exit_code, job.attempts[1].ended) == (model.GRPC, 1, NOW)
    # the user reruns a failed job: a fresh start, one attempt on, pinned where asked
    job.status, job.machine = Status.FAILED, None
    requeue(job, resume=False, reason=None, cause=Cause.REQUEUE, machine="other")
    assert (job.status, job.reason, job.attempt, job.resume, job.pin) == (Status.QUEUED, None, 2, False, "other")


def test_apply_ending_does_not_rewrite_an_attempt_that_already_ended() -> None:
    job = active()
    job.attempts[-1].ended, job.attempts[-1].outcome = T0 + 1, model.LOST
    apply_ending(job, Ending(Status.KILLED, model.KILLED), NOW)
    assert (job.attempts[-1].outcome, job.attempts[-1].ended) == (model.LOST, T0 + 1)
    assert (job.status, job.reason) == (Status.KILLED, model.KILLED)


def test_requeue_of_a_queued_job_is_illegal() -> None:
    with pytest.raises(IllegalTransition):
        requeue(queued(), resume=True, reason=None, cause=Cause.REQUEUE)


# ---- dispatch ---------------------------------------------------------------------------------------------

def test_dispatch_in_submission_order() -> None:
    jobs = [queued(3), queued(1), queued(2)]
    plan = decide(jobs, fleet(local()), Observation(NOW))
    assert [a.job for a in launches(plan)] == [1]
    by_id = {j.id: j for j in jobs}
    assert by_id[1].status is Status.LAUNCHING and by_id[1].alloc == {"slot": [0]}
    assert by_id[2].status is Status.QUEUED and by_id[3].status is Status.QUEUED
    a = by_id[1].attempts[-1]
    assert (a.n, a.machine, a.started, a.workers, a.outcome) == (0, "local", NOW, 1, None)


def test_dispatch_respects_a_pin() -> None:
    job = queued(pin="b")
    plan = decide([job], fleet(local("a"), local("b")), Observation(NOW))
    assert launches(plan) == [Launch(1, "b", 0, 1)] and job.machine == "b"


def test_pinned_to_an_unknown_machine_stays_queued() -> None:
    job = queued(pin="nope")
    assert decide([job], fleet(local()), Observation(NOW)).actions == [] and job.status is Status.QUEUED


def test_four_gpus_five_jobs_four_launches_lowest_indices() -> None:
    jobs = [queued(i, req=["gpu=1"]) for i in range(1, 6)]
    plan = decide(jobs, fleet(gpu_box("m", gpus=4)), Observation(NOW))
    assert [a.job for a in launches(plan)] == [1, 2, 3, 4]
    assert [j.alloc for j in jobs[:4]] == [{"gpu": [0]}, {"gpu": [1]}, {"gpu": [2]}, {"gpu": [3]}]
    assert jobs[4].status is Status.QUEUED and jobs[4].alloc == {}
    # job 2 finishes: its gpu is the one job 5 gets, in the same pass
    obs = Observation(NOW + 1, {"m": MachineView(reachable=True, workers={ref(jobs[1], 0): ws(jobs[1], 0, False, 0)})})
    for j in jobs[:4]:
        j.move(Status.RUNNING, cause=Cause.STARTED)
    obs.machines["m"].workers.update({ref(j, 0): ws(j, 0) for j in (jobs[0], jobs[2], jobs[3])})
    plan = decide(jobs, fleet(gpu_box("m", gpus=4)), obs)
    assert jobs[1].status is Status.FINISHED and jobs[4].alloc == {"gpu": [1]}


def test_allocation_takes_the_lowest_free_indices() -> None:
    holder = active(1, machine="m", alloc={"gpu": [0, 2]})
    job = queued(2, req=["gpu=2"])
    decide([holder, job], fleet(gpu_box("m", gpus=4)), seen("m", ws(holder, 0)))
    assert job.alloc == {"gpu": [1, 3]}
    assert allocate({"gpu": 4}, {"gpu": {1}}, {"gpu": 3}) == {"gpu": [0, 2, 3]}
    assert allocate({"gpu": 4}, {"gpu": {1}}, {"gpu": 4}) is None


def test_slots_count_jobs_that_ask_nothing_and_resource_jobs_take_no_slot() -> None:
    jobs = [queued(1), queued(2), queued(3, req=["gpu=1"]), queued(4)]
    plan = decide(jobs, fleet(local("m", slot=2, gpu=1)), Observation(NOW))
    assert [a.job for a in launches(plan)] == [1, 2, 3]
    assert [j.alloc for j in jobs] == [{"slot": [0]}, {"slot": [1]}, {"gpu": [0]}, {}]
    used = used_resources(jobs)
    assert used == {"m": {"slot": {0, 1}, "gpu": {0}}}


def test_dispatch_skips_machines_not_ready_unreachable_or_preempted() -> None:
    machines = [local("a"), local("b"), local("c"), local("d")]
    obs = Observation(NOW, {"a": MachineView(ready=False), "b": MachineView(reachable=False),
                            "c": MachineView(preempted=True)})
    job = queued()
    decide([job], fleet(*machines), obs)
    assert job.machine == "d"


def test_dispatch_uses_the_machines_worker_count_and_keeps_recovering() -> None:
    job = active(machine="tpu", rule="pre")
    decide([job], fleet(tpu()), seen("tpu", preempted=True))
    assert (job.status, job.reason) == (Status.QUEUED, model.RECOVERING)
    plan = decide([job], fleet(tpu()), seen("tpu", n_workers=4))  # recreated, ready again
    assert launches(plan) == [Launch(job.id, "tpu", 1, 4)]
    assert (job.status, job.reason, job.attempts[-1].resume, job.attempts[-1].workers) == \
        (Status.LAUNCHING, model.RECOVERING, True, 4)


def test_dispatch_honours_accelerator_requests() -> None:
    f = fleet(tpu("a", "v2-32"), tpu("b", "v3-8", preemptible=False), tpu("c", "v3-32"), tpu("d", "v4-8"))
    obs = Observation(NOW)
    jobs = [queued(1, req=["v3-32"]), queued(2, req=["v3", "on-demand"]), queued(3, req=["v4+"]),
            queued(4, req=["v2-32,v3-32"])]
    decide(jobs, f, obs)
    assert [j.machine for j in jobs] == ["c", "b", "d", "a"]


# ---- requests ---------------------------------------------------------------------------------------------

ACCELS = ["v2-8", "v2-32", "v3-8", "v3-32", "v4-8", "v5litepod-8", None]


@pytest.mark.parametrize(("tokens", "fits"), [
    (["v3-32"], {"v3-32"}),
    (["v3"], {"v3-8", "v3-32"}),
    (["v2-32,v3-32"], {"v2-32", "v3-32"}),
    (["v3+"], {"v3-8", "v3-32", "v4-8", "v5litepod-8"}),
    (["v2+", "v3"], {"v3-8", "v3-32"}),  # every token must match
    ([], set(ACCELS)),
])
def test_accelerator_patterns(tokens: list[str], fits: set[str | None]) -> None:
    request = parse_request(tokens)
    for accel in ACCELS:
        m = tpu(f"m-{accel}", accel) if accel else local("plain")
        assert (why_not(m, request) is None) == (accel in fits), (tokens, accel, why_not(m, request))


def test_preemptible_and_on_demand() -> None:
    pre, ondemand, box = tpu("p", preemptible=True), tpu("o", preemptible=False), gpu_box("g")
    assert why_not(pre, parse_request(["preemptible"])) is None
    assert why_not(ondemand, parse_request(["preemptible"])) == "is on-demand"
    assert why_not(box, parse_request(["preemptible"])) == "is on-demand"
    assert why_not(ondemand, parse_request(["on-demand"])) is None
    assert why_not(pre, parse_request(["on-demand"])) == "is preemptible"
    assert why_not(pre, parse_request(["v3-32", "preemptible"])) is None


def test_why_not_says_why() -> None:
    assert why_not(gpu_box("g", gpus=8), parse_request(["gpu=99"])) == "offers gpu=8, the job asks 99"
    assert why_not(local(), parse_request(["gpu=1"])) == "offers gpu=0, the job asks 1"
    assert why_not(local(), parse_request(["v3-32"])) == "has no accelerator, the job asks v3-32"
    assert why_not(tpu("t", "v2-8"), parse_request(["v3-32,v4-8"])) == "has v2-8, the job asks v3-32,v4-8"
    assert why_not(local("a"), parse_request([]), pin="b") == "the job is pinned to b"
    assert why_not(local(slot=0), parse_request([])) == "offers slot=0, the job asks 1"
    assert parse_request(["gpu=0"]).needs() == {"slot": 1}
    assert parse_request(["gpu=1", "gpu=2", "tpu_chip=4"]).needs() == {"gpu": 3, "tpu_chip": 4}


@pytest.mark.parametrize("token", ["gpu=x", "GPU=1", "gpu=-1", "v3-32+", "x3", "v", "v3-", "3", "gpu=1=2"])
def test_bad_request_tokens_are_refused(token: str) -> None:
    with pytest.raises(JobtpuError, match="--req"):
        parse_request([token])


# ---- the transition table -----------------------------------------------------------------------------

@pytest.mark.parametrize(("frm", "to"), list(itertools.product(Status, Status)))
def test_transition_table_is_enforced(frm: Status, to: Status) -> None:
    job = queued()
    job.status = frm
    if to in TRANSITIONS[frm]:
        job.move(to, "recovering", cause=Cause.END)
        assert (job.status, job.reason) == (to, "recovering")
    else:
        with pytest.raises(IllegalTransition):
            job.move(to, cause=Cause.END)
        assert job.status is frm


@pytest.mark.parametrize(("frm", "to"), [(f, t) for f in Status for t in sorted(TRANSITIONS[f])])
def test_a_move_keeps_only_the_fields_of_the_status_it_moves_to(frm: Status, to: Status) -> None:
    """docs/reference/state-json.md §4.3: why a job waits, how a stopping job ends, what it holds and
    its exit code each belong to some statuses; every allowed move resets those of the others."""
    job = queued()
    job.status = frm
    job.waiting, job.ending, job.alloc, job.exit_code = "no room", Ending(Status.FAILED, "exit 3", 3), {"slot": [0]}, 3
    job.machine, job.log_size = "box", 7  # where it ran and how much it logged are no status's own
    job.move(to, "why", cause=Cause.END)
    kept = {name for name in STATUS_FIELDS if to in STATUS_FIELDS[name]}
    assert (job.waiting is not None) == ("waiting" in kept)
    assert (job.ending is not None) == ("ending" in kept)
    assert bool(job.alloc) == ("alloc" in kept)
    assert (job.exit_code is not None) == ("exit_code" in kept)
    assert (job.machine, job.log_size) == ("box", 7)


def test_every_status_field_is_a_job_field_and_names_statuses_it_can_be_in() -> None:
    assert set(STATUS_FIELDS) <= set(Job.__struct_fields__)
    assert all(statuses and statuses <= set(Status) for statuses in STATUS_FIELDS.values())


def test_key_illegal_moves() -> None:
    for frm, to in [(Status.QUEUED, Status.RUNNING), (Status.QUEUED, Status.FINISHED), (Status.QUEUED, Status.QUEUED),
                    (Status.FINISHED, Status.RUNNING), (Status.KILLED, Status.FINISHED),
                    (Status.FAILED, Status.KILLED), (Status.LAUNCHING, Status.LAUNCHING)]:
        assert to not in TRANSITIONS[frm]
    assert all(TRANSITIONS[s] == {Status.QUEUED} for s in ENDED)


# ---- a property: whatever a pass observes, decide keeps the books straight --------------------------------

MACHINES = (local("loc", slot=2), gpu_box("box", gpus=3, hosts=2), tpu("tp", "v3-32"))


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[Job], Observation]:
    f = fleet(*MACHINES)
    jobs: list[Job] = []
    obs = Observation(NOW)
    for name in f.machines:
        obs.machines[name] = MachineView(reachable=draw(st.sampled_from([True, False, None])),
                                         preempted=draw(st.booleans()) if name == "tp" else False,
                                         n_workers=2 if name == "box" else 1)
    submitted = [queued(i, req=draw(st.sampled_from([[], ["gpu=1"], ["gpu=2"], ["v3"]])),
                        rule=draw(st.sampled_from([None, *rules.RULES])),
                        stall=draw(st.sampled_from([None, 10.0])), timeout=draw(st.sampled_from([None, 50.0])),
                        max_recoveries=draw(st.integers(0, 2)))
                 for i in range(1, draw(st.integers(1, 7)) + 1)]
    # A real earlier dispatch places them, so allocations start disjoint; then the world moves on.
    decide(submitted, f, Observation(T0))
    for job in submitted:
        if job.status is Status.LAUNCHING:
            job.status = draw(st.sampled_from([Status.LAUNCHING, Status.RUNNING, Status.KILLING]))
            if job.status is Status.KILLING:
                job.ending = draw(st.sampled_from([None, Ending(Status.KILLED, model.KILLED),
                                                   Ending(Status.FAILED, model.LOST, None, rules.RESUME)]))
            view = obs.machines[job.machine or ""]
            for w in range(job.attempts[-1].workers):
                if draw(st.booleans()):
                    alive = draw(st.booleans())
                    code = None if alive else draw(st.sampled_from([None, 0, 1, 3]))
                    r = WorkerRef(job.id, job.attempt, w)
                    view.workers[r] = WorkerState(r, 1, alive, code, draw(st.integers(0, 3)), True)
                    if code:
                        obs.log_tails[r] = draw(st.sampled_from(["", "GRPC error", "out of memory"]))
        jobs.append(job)
    return jobs, obs


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_decide_keeps_the_books_straight(case: tuple[list[Job], Observation]) -> None:
    jobs, obs = case
    f = fleet(*MACHINES)
    before = {j.id: j.status for j in jobs}
    plan = decide(jobs, f, obs)  # never an IllegalTransition, whatever was observed
    by_id = {j.id: j for j in jobs}
    for job in jobs:
        if job.status in ACTIVE:
            assert job.machine in f.machines and job.current is not None and job.alloc
        else:
            assert job.alloc == {}
        if job.status is Status.QUEUED:
            assert job.machine is None
        if job.status in ENDED:
            assert job.current is None or job.current.ended is not None
            assert job.reason is None if job.status is Status.FINISHED else job.reason is not None
        if job.status is Status.KILLING:
            assert job.ending is not None or before[job.id] is Status.KILLING
        assert model.is_valid_reason(job.reason)
    for action in plan.actions:
        if isinstance(action, Launch):
            assert by_id[action.job].status is Status.LAUNCHING and by_id[action.job].machine == action.machine
        elif isinstance(action, Kill):
            assert by_id[action.job].status is Status.KILLING
            assert all(r.job == action.job and r.attempt == by_id[action.job].attempt for r in action.refs)
    # no resource index is held twice on a machine, none beyond capacity
    for name, m in f.machines.items():
        for resource, count in m.capacity.items():
            held = [i for j in jobs if j.active and j.machine == name for i in j.alloc.get(resource, [])]
            assert len(held) == len(set(held)) and all(0 <= i < count for i in held)
    # every killing job's ending can be applied (what the pass does once its workers are gone)
    for job in jobs:
        if job.status is Status.KILLING:
            apply_ending(job, job.ending or Ending(Status.KILLED, model.KILLED), NOW + 1)
            assert job.status in ENDED or job.status is Status.QUEUED


def test_a_queued_job_asks_for_its_preempted_tpu_back() -> None:
    job = queued(req=["v3-32"])
    view = MachineView(preempted=True, ready=False)
    plan = decide([job], fleet(tpu("t1")), Observation(now=NOW, machines={"t1": view}))
    assert plan.actions == [Recreate("t1")] and job.status is Status.QUEUED
    # ... once: while it is being recreated, nothing more is asked.
    view.recovering = True
    assert decide([job], fleet(tpu("t1")), Observation(now=NOW, machines={"t1": view})).actions == []


def test_a_queued_job_whose_rule_never_recreates_just_waits() -> None:
    on_demand = tpu("t1", preemptible=False)  # default rule there: pass
    job = queued(req=["v3-32"])
    view = MachineView(preempted=True, ready=False)
    assert decide([job], fleet(on_demand), Observation(now=NOW, machines={"t1": view})).actions == []
    job.rule = "reapply"
    assert decide([job], fleet(on_demand), Observation(now=NOW, machines={"t1": view})).actions == [Recreate("t1")]


def test_doctor_accounts_for_a_live_worker_through_its_job_s_active_attempt() -> None:
    from jobtpu.fleet.doctor import _why_stray
    from jobtpu.schema.state import State

    running = Job(id=1, user="u", cmd="c", archive="a", created=0.0, status=Status.RUNNING, machine="box", attempt=2)
    ended = msgspec.structs.replace(running, id=2, status=Status.FAILED)
    state = State(jobs=[running, ended])
    assert _why_stray(state, WorkerRef(1, 2, 3)) is None  # whichever machine entry it runs through
    assert _why_stray(state, WorkerRef(1, 1, 0)) == "state.json is at the job's attempt 2"
    assert _why_stray(state, WorkerRef(2, 2, 0)) == "state.json has the job failed"
    assert _why_stray(state, WorkerRef(9, 0, 0)) == "state.json no longer has job 9"


def test_a_tpu_the_rule_recreates_takes_no_launch_in_the_same_pass() -> None:
    # A GRPC failure under reapply on a node that is still READY: the node is deleted in this pass's
    # act, so the requeued job must not be launched onto it now.
    job = active(machine="tpu", rule="reapply")
    failed = ws(job, 0, alive=False, exit_code=1)
    plan = decide([job], fleet(tpu()), seen("tpu", failed, tails={failed.ref: "GRPC error: Socket closed"}))
    assert (job.status, job.reason, job.attempt) == (Status.QUEUED, model.RECOVERING, 1)
    assert recreates(plan) == [Recreate("tpu")] and launches(plan) == []


def test_a_stopped_job_whose_rule_recreates_asks_for_its_tpu_once_stopped() -> None:
    # A hang under reapply: the live workers are stopped first; the ending they carry asks for the TPU.
    job = active(machine="tpu", workers=2, rule="reapply", stall=60.0)
    job.log_grew = NOW - 120
    plan = decide([job], fleet(tpu()), seen("tpu", ws(job, 0), ws(job, 1)))
    assert job.status is Status.KILLING and job.ending is not None and wants_recreate(job.ending)
    assert kills(plan) == [Kill(job.id, "tpu", (ref(job, 0), ref(job, 1)))] and recreates(plan) == []


@pytest.mark.parametrize(("node_state", "health"), [
    ("READY", "up"), ("PREEMPTED", "preempted"), ("TERMINATED", "preempted"), (None, "preempted"),
    ("CREATING", "transient"), ("REPAIRING", "transient"), ("STOPPED", "down"), ("STOPPING", "down"),
    ("SOMETHING_NEW", "transient"),  # an unknown state never recreates a node
])
def test_node_state_decides_the_machine_s_health(node_state: str | None, health: str) -> None:
    from jobtpu.schema.tpu_answers import health_of

    assert health_of(node_state)[0] == health


def test_a_missing_node_is_preempted_and_recreated_when_a_job_wants_it() -> None:
    from jobtpu.decide.tpu_plan import plan_machine
    from jobtpu.schema.records import MachineRecord

    plan = plan_machine(MachineRecord(want_recreate=True), None, None, NOW)
    assert [s.kind for s in plan.steps] == ["create"] and plan.state == "recreating"
    assert plan_machine(MachineRecord(), None, None, NOW).state == "preempted"


def test_the_probe_reports_when_each_worker_exited_for_the_multi_host_exit_code() -> None:
    from jobtpu.remote.scripts import parse_probe

    def worker(n: int, pid: int | None, code: int | None, at: float | None) -> str:
        return json.dumps({"kind": "worker", "job": 4, "attempt": 0, "worker": n, "pid": pid, "alive": False,
                           "exit": code, "size": 10 if pid else 0, "claimed": pid is not None, "at": at})

    out = "\n".join(['{"kind":"host","boot":"boot","now":1}', worker(0, 100, 1, 1700000002.5),
                     worker(1, 101, 7, 1700000001.25), worker(2, None, None, None)]) + "\n"
    states = parse_probe(out)
    assert [(s.exit_code, s.exited_at) for s in states.values()] == [(1, 1700000002.5), (7, 1700000001.25),
                                                                    (None, None)]
    job = active(workers=3, machine="m", rule="pass")
    job.id = 4
    plan = decide([job], fleet(local("m")), seen("m", *states.values()))
    assert (job.status, job.exit_code) == (Status.FAILED, 7)  # worker 1 failed first, not worker 0
    assert plan.actions == []


# ---- fair dispatch and per-user limits ------------------------------------------------------------------

def by(user: str, job_id: int, **kw: Any) -> Job:
    return Job(id=job_id, user=user, cmd="python train.py", archive="a.tar.gz", created=T0, **kw)


def launch_order(jobs: list[Job], machines: Fleet) -> list[int]:
    return [a.job for a in launches(decide(jobs, machines, Observation(NOW)))]


def test_users_take_turns_so_a_long_queue_delays_another_users_job_by_one_turn() -> None:
    sweep = [by("ann", i) for i in range(1, 201)]
    single = by("bob", 201)
    assert launch_order([*sweep, single], fleet(local("m", slot=2))) == [1, 201]
    # Three users, and a fourth whose jobs came first: each round gives every user one job.
    jobs = [by("cat", 1), by("cat", 2), by("cat", 3), by("ann", 4), by("bob", 5), by("bob", 6)]
    assert launch_order(jobs, fleet(local("m", slot=6))) == [1, 4, 5, 2, 6, 3]


def test_the_user_whose_last_launch_is_oldest_goes_first() -> None:
    """Across passes too: with one free slot per pass, ann's queue does not win every pass because
    her jobs were submitted first."""
    ann_ran = by("ann", 1, status=Status.FINISHED, attempts=[Attempt(0, "m", "finished", 0, NOW - 10, NOW - 5)])
    jobs = [ann_ran, by("ann", 2), by("ann", 3), by("bob", 4)]
    assert launch_order(jobs, fleet(local("m"))) == [4]
    bob_ran = by("bob", 5, status=Status.FINISHED, attempts=[Attempt(0, "m", "finished", 0, NOW - 1, NOW)])
    jobs = [ann_ran, by("ann", 2), bob_ran, by("bob", 6)]
    assert launch_order(jobs, fleet(local("m"))) == [2]


def test_priority_orders_a_users_own_jobs_only() -> None:
    jobs = [by("ann", 1), by("ann", 2, priority=5), by("ann", 3, priority=-1), by("ann", 4, priority=5),
            by("bob", 5)]
    # ann's turns go 2, 4 (priority 5, in submission order), 1, 3; bob still gets the second launch.
    assert launch_order(jobs, fleet(local("m", slot=5))) == [2, 5, 4, 1, 3]


def test_a_per_user_job_limit_holds_jobs_back_and_says_so() -> None:
    limits = msgspec.structs.replace(fleet(local("m", slot=8)), per_user=UserLimit(jobs=2))
    running = by("ann", 1, status=Status.RUNNING, machine="m", attempts=[Attempt(0, "m", started=T0)],
                 alloc={"slot": [0]})
    jobs = [running, by("ann", 2), by("ann", 3), by("bob", 4)]
    obs = seen("m", ws(running, 0))
    plan = decide(jobs, limits, obs)
    assert [a.job for a in launches(plan)] == [4, 2]  # bob never launched: his turn first
    assert jobs[2].status is Status.QUEUED and jobs[2].waiting == "held by the per-user limit (2 running jobs)"


def test_a_sheet_claim_keeps_other_users_off_but_not_the_users_it_names() -> None:
    """`Ann` in a machine's user cell is ann at work there (docs/reference/machines-json.md §3.8): her jobs
    may start on it, bob's wait; bob's finding no room says nothing of ann's (same request)."""
    machines = fleet(local("m", slot=8))
    jobs = [by("bob", 1), by("ann", 2), by("bob", 3)]
    claimed = Observation(NOW, {"m": MachineView(reachable=True)}, claims={"m": "Ann"},
                          claimants={"m": frozenset({"ann"})})
    plan = decide(jobs, machines, claimed)
    assert [(a.job, a.machine) for a in launches(plan)] == [(2, "m")]
    assert [j.status for j in jobs] == [Status.QUEUED, Status.LAUNCHING, Status.QUEUED]
    assert all(j.waiting and j.waiting.startswith("no machine can run it now: m is claimed by Ann in the sheet;")
               for j in (jobs[0], jobs[2]))
    down = Observation(NOW, {"m": MachineView(reachable=False)}, claims={"m": "Ann"},
                       claimants={"m": frozenset({"ann"})})
    assert launches(decide([by("ann", 4)], machines, down)) == []  # a claim is no way past an unreachable machine


def test_per_user_machine_limits_count_machines_held_and_name_the_limit() -> None:
    tpus = [tpu("t1"), tpu("t2")]
    machines = msgspec.structs.replace(fleet(*tpus, local("m", slot=4)), per_user=UserLimit(tpu_machines=1),
                                   user_limits={"lead": UserLimit(tpu_machines=2)})
    jobs = [by("ann", 1, req=["v3-32"]), by("ann", 2, req=["v3-32"]), by("ann", 3), by("lead", 4, req=["v3-32"]),
            by("lead", 5, req=["v3-32"])]
    view = {name: MachineView(reachable=True) for name in ("t1", "t2", "m")}
    plan = decide(jobs, machines, Observation(NOW, view))
    assert {a.job: a.machine for a in launches(plan)} == {1: "t1", 3: "m", 4: "t2"}
    assert jobs[1].waiting == "held by the per-user limit (1 TPU machine)"
    assert jobs[4].waiting != jobs[1].waiting  # lead's limit is 2: job 5 waits only for a free TPU
    # A machine a user already holds adds nothing: two jobs of ann share one machine under machines=1.
    one_box = msgspec.structs.replace(fleet(local("a", slot=2), local("b", slot=2)), per_user=UserLimit(machines=1))
    jobs = [by("ann", 1), by("ann", 2), by("ann", 3)]
    plan = decide(jobs, one_box, Observation(NOW))
    assert {a.job: a.machine for a in launches(plan)} == {1: "a", 2: "a"}
    assert jobs[2].waiting == "held by the per-user limit (1 machine)"

# ---- pending reasons ------------------------------------------------------------------------------------

def test_pending_reason_names_the_busy_machines_and_the_queue_ahead() -> None:
    a, b = gpu_box("a", gpus=1), gpu_box("b", gpus=1)
    holders = [active(1, machine="a", alloc={"gpu": [0]}), active(2, machine="b", alloc={"gpu": [0]})]
    waiting = [queued(i, req=["gpu=1"]) for i in (3, 4, 5, 6)]
    obs = seen("a", ws(holders[0], 0))
    obs.machines["b"] = MachineView(reachable=True, workers={ref(holders[1], 0): ws(holders[1], 0)})
    decide([*holders, *waiting], fleet(a, b), obs)
    assert [j.waiting for j in waiting] == [
        "2 machines fit, both busy; next in line", "2 machines fit, both busy; 1 job ahead of it",
        "2 machines fit, both busy; 2 jobs ahead of it", "2 machines fit, both busy; 3 jobs ahead of it"]


def test_pending_reason_of_one_busy_machine_and_of_several() -> None:
    holder = active(1, machine="m", alloc={"gpu": [0]})
    job = queued(2, req=["gpu=1"])
    decide([holder, job], fleet(gpu_box("m", gpus=1)), seen("m", ws(holder, 0)))
    assert job.waiting == "m fits, busy; next in line"
    boxes = [gpu_box(n, gpus=1) for n in "xyz"]
    holders = [active(i, machine=m.name, alloc={"gpu": [0]}) for i, m in enumerate(boxes, 10)]
    obs = Observation(NOW, {m.name: MachineView(reachable=True, workers={ref(h, 0): ws(h, 0)})
                            for m, h in zip(boxes, holders, strict=True)})
    job = queued(2, req=["gpu=1"])
    decide([*holders, job], fleet(*boxes), obs)
    assert job.waiting == "3 machines fit, all busy; next in line"


def test_pending_reason_says_which_machine_is_being_recreated() -> None:
    job = queued(req=["v3-32"])
    view = MachineView(preempted=True, ready=False)
    plan = decide([job], fleet(tpu("v3-32-p1")), Observation(NOW, {"v3-32-p1": view}))
    assert recreates(plan) == [Recreate("v3-32-p1")]  # this pass asks for it back: it is on its way
    assert job.waiting == "no machine can run it now: v3-32-p1 is being recreated; next in line"
    view.recovering = True  # the next passes, while the TPU API recreates it
    decide([job], fleet(tpu("v3-32-p1")), Observation(NOW, {"v3-32-p1": view}))
    assert job.waiting == "no machine can run it now: v3-32-p1 is being recreated; next in line"
    # A job whose failure has its TPU recreated queues behind the one already waiting.
    other = active(3, machine="v3-32-p1", rule="reapply")
    failed = ws(other, 0, alive=False, exit_code=1)
    decide([other, job], fleet(tpu("v3-32-p1")),
           seen("v3-32-p1", failed, tails={failed.ref: "GRPC error: Socket closed"}))
    assert other.status is Status.QUEUED
    assert other.waiting == "no machine can run it now: v3-32-p1 is being recreated; 1 job ahead of it"


def test_pending_reason_of_a_preempted_tpu_nobody_recreates() -> None:
    job = queued(req=["v3-32"])  # an on-demand TPU defaults to the rule `pass`: it is not recreated
    view = MachineView(preempted=True, ready=False)
    decide([job], fleet(tpu("t1", preemptible=False)), Observation(NOW, {"t1": view}))
    assert job.waiting == "no machine can run it now: t1 is preempted; next in line"


def test_pending_reason_mixes_busy_and_unavailable_machines() -> None:
    holder = active(1, machine="a", alloc={"gpu": [0]})
    job = queued(2, req=["gpu=1"])
    obs = seen("a", ws(holder, 0))
    obs.machines["b"] = MachineView(reachable=False)
    decide([holder, job], fleet(gpu_box("a", gpus=1), gpu_box("b", gpus=1)), obs)
    assert job.waiting == "2 machines fit: 1 busy, b is unreachable; next in line"


def test_pending_reason_when_no_machine_offers_the_request() -> None:
    job, pinned, gone = queued(1, req=["v5p-8"]), queued(2, pin="box", req=["gpu=8"]), queued(3, pin="nope")
    decide([job, pinned, gone], fleet(local(), gpu_box("box", gpus=4)), Observation(NOW))
    assert job.waiting == "no machine offers v5p-8"
    assert pinned.waiting == "it is pinned to box, which cannot run it: offers gpu=4, the job asks 8"
    assert gone.waiting == "it is pinned to nope, which machines.json no longer has"
    assert all(j.status is Status.QUEUED for j in (job, pinned, gone))


def test_queue_ahead_counts_only_jobs_waiting_for_the_same_machines() -> None:
    holders = [active(1, machine="a"), active(2, machine="b")]
    obs = seen("a", ws(holders[0], 0))
    obs.machines["b"] = MachineView(reachable=True, workers={ref(holders[1], 0): ws(holders[1], 0)})
    v3_jobs = [queued(i, req=["v3"]) for i in (3, 4)]
    v4_job, any_job = queued(5, req=["v4"]), queued(6, req=["v3+"])
    decide([*holders, *v3_jobs, v4_job, any_job], fleet(tpu("a", "v3-8"), tpu("b", "v4-8")), obs)
    assert v3_jobs[1].waiting == "a fits, busy; 1 job ahead of it"
    assert v4_job.waiting == "b fits, busy; next in line"
    assert any_job.waiting == "2 machines fit, both busy; 3 jobs ahead of it"


# ---- what launches and kills reported ----------------------------------------------------------------

def launching(workers: int = 2, machine: str = "box") -> Job:
    return active(7, Status.LAUNCHING, machine=machine, workers=workers)


def report(job: Job, worker: int, outcome: str, detail: str = "") -> LaunchResult:
    return LaunchResult(WorkerRef(job.id, job.attempt, worker), outcome, detail=detail)


def applied(job: Job, outcome: Callable[[Plan], _T]) -> _T:
    """An outcome function's answer, its job's new record applied to `job` as the pass applies what
    settle returns (the function itself changes nothing it is given: tests/test_settle_values.py)."""
    plan = Plan()
    answer = outcome(plan)
    plan.apply_to([job])
    return answer


def test_a_launch_every_worker_started_runs_and_an_ssh_machine_is_up() -> None:
    job = launching()  # the machine's record is up by the contacts alone (test_reach)
    reports: dict[int, LaunchReport] = {0: report(job, 0, "ok"), 1: report(job, 1, "ok")}
    assert applied(job, lambda plan: launched(job, gpu_box(hosts=2), reports, NOW, plan)) == []
    assert (job.status, job.current.started if job.current else None) == (Status.RUNNING, NOW)


def test_a_launch_no_worker_could_be_reached_goes_back_to_the_queue_as_it_was() -> None:
    job = launching()  # the machine's record is unreachable by the contacts alone (test_reach)
    gone = NoAnswer("box[0]: connection refused", unreachable=True)
    assert applied(job, lambda plan: launched(job, gpu_box(hosts=2), {0: gone, 1: gone}, NOW, plan)) == []
    assert (job.status, job.machine, job.alloc, job.attempts) == (Status.QUEUED, None, {}, [])
    assert job.last_line == "could not launch: box[0]: connection refused"


def test_a_launch_that_failed_on_one_worker_stops_the_workers_that_started() -> None:
    job = launching()
    reports: dict[int, LaunchReport] = {0: report(job, 0, "ok"), 1: report(job, 1, "fail", "no python3")}
    kill = applied(job, lambda plan: launched(job, gpu_box(hosts=2), reports, NOW, plan))
    assert kill == [Kill(7, "box", (WorkerRef(7, 0, 0),))]
    assert (job.status, job.reason, job.last_line) == (Status.KILLING, model.LAUNCH_FAILED,
                                                        "launch failed on worker 1: no python3")
    assert applied(job, lambda plan: killed(job, "box", gone=True, now=NOW, plan=plan)) is None
    assert (job.status, job.reason) == (Status.FAILED, model.LAUNCH_FAILED)


def test_a_launch_with_an_unclear_answer_stays_launching_and_says_why() -> None:
    job = launching()
    reports: dict[int, LaunchReport] = {0: report(job, 0, "ok"), 1: NoAnswer("timed out")}
    applied(job, lambda plan: launched(job, gpu_box(hosts=2), reports, NOW, plan))
    assert (job.status, job.last_line) == (Status.LAUNCHING, "launch: timed out")


def test_a_launch_without_a_clear_answer_for_an_hour_stops_every_worker_and_fails() -> None:
    job = launching()
    unclear: dict[int, LaunchReport] = {0: report(job, 0, "ok"), 1: NoAnswer("rsync: connection reset")}
    give_up = current().launch_give_up
    assert applied(job, lambda plan: launched(job, gpu_box(hosts=2), unclear, T0 + give_up - 1, plan)) == []
    assert job.status is Status.LAUNCHING
    kill = applied(job, lambda plan: launched(job, gpu_box(hosts=2), unclear, T0 + give_up + 1, plan))
    assert kill == [Kill(7, "box", (WorkerRef(7, 0, 0), WorkerRef(7, 0, 1)))]  # worker 1 may have started too
    assert (job.status, job.reason) == (Status.KILLING, model.LAUNCH_FAILED)
    assert job.last_line == "gave up launching after 60 min: rsync: connection reset"
    assert applied(job, lambda plan: killed(job, "box", gone=True, now=T0 + give_up + 2, plan=plan)) is None
    assert (job.status, job.reason) == (Status.FAILED, model.LAUNCH_FAILED)


def test_a_launch_not_tried_because_setup_did_not_finish_is_queued_again() -> None:
    job = launching(machine="tpu")
    applied(job, lambda plan: not_launched(job, "tpu is setting up", plan))
    assert (job.status, job.waiting, job.attempts) == (Status.QUEUED, "tpu is setting up", [])


@pytest.mark.parametrize(("setup", "goes", "waiting"), [
    (None, True, None),  # no setup ran on its machine in this pass
    ("up", True, None),  # the setup this pass ran is done
    ("setting up", False, "tpu is setting up"),  # it did not finish in time: back to the queue
    ("setup failed", False, "tpu is setup failed"),
])
def test_a_launch_goes_ahead_only_when_its_machine_ran_no_setup_or_that_setup_is_done(
        setup: str | None, goes: bool, waiting: str | None) -> None:
    job = launching(machine="tpu")
    assert applied(job, lambda plan: goes_ahead(job, "tpu", setup, plan)) is goes
    assert (job.status, job.waiting) == ((Status.LAUNCHING, None) if goes else (Status.QUEUED, waiting))
    assert goes_ahead(None, "tpu", setup, Plan()) is goes  # a job gone from state.json meanwhile: nothing to move


def test_a_stop_ends_only_once_every_worker_is_gone_and_may_want_the_tpu_back() -> None:
    job = active(3, Status.KILLING, machine="tpu")
    job.ending = Ending(Status.FAILED, model.HANG, None, rules.RECREATE_RESUME)
    assert applied(job, lambda plan: killed(job, "tpu", gone=False, now=NOW, plan=plan)) is None
    assert job.status is Status.KILLING
    assert applied(job, lambda plan: killed(job, "tpu", gone=True, now=NOW, plan=plan)) == Recreate("tpu")
    assert (job.status, job.reason, job.resume) == (Status.QUEUED, model.RECOVERING, True)


def test_kill_asked_ends_a_queued_job_and_stops_an_active_one_keeping_an_ending_it_has() -> None:
    waiting = queued(1)
    assert applied(waiting, lambda plan: kill_asked(waiting, plan)) == [] and waiting.status is Status.KILLED
    running = active(2, machine="box", workers=2)
    assert applied(running, lambda plan: kill_asked(running, plan)) == [Kill(2, "box", (WorkerRef(2, 0, 0),
                                                                                        WorkerRef(2, 0, 1)))]
    assert running.ending == Ending(Status.KILLED, model.KILLED)
    stopping = active(3, Status.KILLING, machine="box")
    stopping.ending = Ending(Status.FAILED, model.TIMEOUT)
    assert applied(stopping, lambda plan: kill_asked(stopping, plan)) == [Kill(3, "box", (WorkerRef(3, 0, 0),))]
    assert stopping.ending == Ending(Status.FAILED, model.TIMEOUT)


# ---- dependency cycles (made by hand in state.json; submit refuses them) ---------------------------------

@pytest.mark.parametrize(("edges", "rings"), [
    ({1: [2], 2: [1]}, {1: (1, 2), 2: (1, 2)}),
    ({1: [1]}, {1: (1,)}),
    ({1: [2], 2: [3], 3: [1], 4: [1]}, {1: (1, 2, 3), 2: (1, 2, 3), 3: (1, 2, 3)}),  # 4 waits on the ring
    ({1: [2], 2: [3]}, {}),  # a chain is no ring
    ({1: [2], 2: [1], 3: [4], 4: [3, 5], 5: []}, {1: (1, 2), 2: (1, 2), 3: (3, 4), 4: (3, 4)}),
])
def test_dependency_cycles_are_the_rings_of_queued_jobs(edges: dict[int, list[int]],
                                                        rings: dict[int, tuple[int, ...]]) -> None:
    jobs = [queued(i, after=list(deps)) for i, deps in edges.items()]
    assert rules.dependency_cycles(jobs) == rings


def test_a_ring_through_a_job_that_already_started_is_no_cycle() -> None:
    jobs = [queued(1, after=[2]), active(2, after=[1])]
    assert rules.dependency_cycles(jobs) == {}


def test_a_long_chain_costs_no_recursion() -> None:
    jobs = [queued(i, after=[i + 1]) for i in range(1, 20_001)] + [queued(20_001, after_any=[1])]
    assert len(rules.dependency_cycles(jobs)) == 20_001


def test_a_pass_fails_every_job_of_a_cycle_with_reason_dependency_naming_it() -> None:
    jobs = [queued(1, after=[2]), queued(2, after_any=[3]), queued(3, after=[1]), queued(4, after=[3])]
    plan = decide(jobs, fleet(local(slot=4)), Observation(now=NOW, machines={"local": MachineView(reachable=True)}))
    for job in jobs[:3]:
        assert job.status is Status.FAILED and job.reason == model.DEPENDENCY
        assert job.last_line == "a dependency cycle: jobs 1, 2 and 3 wait for each other (--after)"
    assert not launches(plan)
    assert sum("dependency cycle" in n for n in plan.notes) == 3
    # 4 waited for a ring member (--after): it fails as that one ended failed, naming it
    assert jobs[3].status is Status.FAILED and jobs[3].reason == model.DEPENDENCY
    assert jobs[3].last_line == "job 3 it waited for (--after) ended failed (dependency)"


def test_a_request_is_parsed_once_per_distinct_tokens() -> None:
    """decide/fit.parse_request: every read of state.json checks each job's request and each pass
    places every queued job, so 10,000 jobs of one sweep parse their request once, not 10,000 times;
    a bad request is refused every time it is met."""
    from jobtpu.decide.fit import parse_request

    first = parse_request(["v3-32", "gpu=2"])
    assert parse_request(("v3-32", "gpu=2")) is first and parse_request(["gpu=2", "v3-32"]) is not first
    assert first.resources == {"gpu": 2} and first.accelerators == (("v3-32",),)
    with pytest.raises(TypeError):  # shared by every job that asks the same: no caller may change it
        first.resources["gpu"] = 8  # type: ignore[index]
    assert parse_request(["v3-32", "gpu=2"]).needs() == {"gpu": 2}
    for _ in range(2):
        with pytest.raises(JobtpuError, match="a resource request is NAME=COUNT"):
            parse_request(["gpu=two"])


# ---- what a pass decided, as values ------------------------------------------------------------------

def _failed_first() -> list[Job]:
    first = queued(1)
    first.status, first.reason = Status.FAILED, "exit 1"
    return [first, queued(2, after=[1])]


@pytest.mark.parametrize(("jobs", "machines", "observed", "moves"), [
    pytest.param(lambda: [queued(1)], [local("m", slot=1)], lambda jobs: seen("m"),
                 [(1, Status.QUEUED, Status.LAUNCHING, None, None, 0)], id="queued to launching"),
    pytest.param(lambda: [active(workers=2, timeout=60.0)], [gpu_box("m", hosts=2)],
                 lambda jobs: seen("m", ws(jobs[0], 0, log=5), ws(jobs[0], 1, log=5)),
                 [(1, Status.RUNNING, Status.KILLING, model.TIMEOUT, None, 0)], id="running to killing on timeout"),
    pytest.param(lambda: [active(status=Status.LAUNCHING, machine="tpu", workers=4)], [tpu()],
                 lambda jobs: seen("tpu", preempted=True, ready=False),
                 [(1, Status.LAUNCHING, Status.QUEUED, model.RECOVERING, None, 0)], id="preempted, queued to resume"),
    pytest.param(_failed_first, [local("m", slot=1)], lambda jobs: seen("m"),
                 [(2, Status.QUEUED, Status.FAILED, model.DEPENDENCY, None, 0)], id="its dependency failed"),
    pytest.param(lambda: [active()], [local("m", slot=1)],
                 lambda jobs: seen("m", ws(jobs[0], 0, alive=False, exit_code=0)),
                 [(1, Status.RUNNING, Status.FINISHED, None, None, 0)], id="every worker exited 0"),
])
def test_decide_returns_the_moves_it_made(jobs: Any, machines: list[Machine], observed: Any,
                                          moves: list[tuple[Any, ...]]) -> None:
    """docs/design.md §3: decide returns each status change it made as a value (the job, from, to,
    why, the reason before, the attempt), in order; the pass's events are made from these."""
    made = jobs()
    plan = decide(made, fleet(*machines), observed(made))
    assert [(m.job, m.was, m.to, m.reason, m.was_reason, m.attempt) for m in plan.moves] == moves

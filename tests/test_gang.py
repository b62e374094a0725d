"""Multislice gangs (`submit --slices N`, docs/reference/commands.md §2.2.10), as values: a gang's
dispatch (all N machines in one pass or none, one kind, its pending reason), its recovery as one
(a slice preempted or failed stops every other; the survivors are kept), the `keeps` claim, the
variables that join the slices, and submit's checks. No I/O."""

from __future__ import annotations

from typing import Any

import pytest

from jobtpu.decide import core
from jobtpu.decide.gang import gang_view, kills, machine_of, slice_refs
from jobtpu.decide.observation import Kill, Launch, MachineView, Observation, Plan, Recreate
from jobtpu.decide.outcomes import killed
from jobtpu.decide.placement import gang_env
from jobtpu.decide.workers import WorkerRef, WorkerState
from jobtpu.errors import JobtpuError
from jobtpu.schema import state as model
from jobtpu.schema.fleet import DEFAULT_ERROR_PATTERNS, Fleet, Machine, UserLimit
from jobtpu.schema.state import Attempt, Ending, Job, Status

pytestmark = pytest.mark.fast

T0 = 1_000_000.0
NOW = T0 + 100.0


def box(name: str, hosts: int = 2, accelerator: str | None = None) -> Machine:
    return Machine(name=name, kind="ssh", hosts=tuple(f"10.0.{name}.{i}" for i in range(hosts)),
                   accelerator=accelerator)


def tpu(name: str, accelerator: str = "v4-32", group: str | None = None, index: int | None = None) -> Machine:
    return Machine(name=name, kind="tpu", node=f"node-{name}", zone="us-central2-b", accelerator=accelerator,
                   preemptible=True, slice_group=group, slice_index=index)


def fleet(*machines: Machine, limits: dict[str, UserLimit] | None = None) -> Fleet:
    return Fleet(machines={m.name: m for m in machines}, error_patterns=dict(DEFAULT_ERROR_PATTERNS),
                 user_limits=limits or {})


def queued(job_id: int = 1, slices: int = 2, **kw: Any) -> Job:
    return Job(id=job_id, user=kw.pop("user", "u"), cmd="python train.py", archive="a.tar.gz", created=T0,
               slices=slices, **kw)


def running_gang(job_id: int = 1, gang: tuple[str, ...] = ("a", "b"), per: int = 2, **kw: Any) -> Job:
    job = queued(job_id, slices=len(gang), **kw)
    job.status, job.machine, job.gang, job.alloc = Status.RUNNING, gang[0], list(gang), {"slot": [0]}
    job.attempts = [Attempt(n=0, machine=gang[0], started=T0, workers=per * len(gang), gang=list(gang))]
    job.log_grew = T0
    return job


def ws(job: Job, worker: int, alive: bool = True, exit_code: int | None = None) -> WorkerState:
    return WorkerState(WorkerRef(job.id, job.attempt, worker), pid=100 + worker, alive=alive, exit_code=exit_code,
                       log_size=0, claimed=True)


def seen(views: dict[str, MachineView]) -> Observation:
    return Observation(now=NOW, machines=views)


def up(*states: WorkerState, workers: int = 2) -> MachineView:
    return MachineView(reachable=True, workers={s.ref: s for s in states}, n_workers=workers)


def decide(jobs: list[Job], f: Fleet, o: Observation) -> Plan:
    plan = core.decide(jobs, f, o)
    plan.apply_to(jobs)
    return plan


def launches(plan: Plan) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch)]


# ---- dispatch: all or nothing, one kind ----------------------------------------------------------------

def test_a_gang_starts_on_every_machine_at_once_with_global_worker_indices() -> None:
    job = queued(slices=2)
    plan = decide([job], fleet(box("a"), box("b")), seen({"a": up(), "b": up()}))
    assert launches(plan) == [Launch(1, "a", 0, 4, gang=("a", "b"))]
    assert (job.status, job.machine, job.gang, job.attempts[-1].gang, job.attempts[-1].workers) == (
        Status.LAUNCHING, "a", ["a", "b"], ["a", "b"], 4)
    assert slice_refs(job, 1) == (WorkerRef(1, 0, 2), WorkerRef(1, 0, 3))
    assert [machine_of(job, w) for w in range(4)] == ["a", "a", "b", "b"]


def test_no_slice_starts_while_the_gang_cannot_be_completed_and_the_reason_says_how_far_it_is() -> None:
    other = running_gang(9, gang=("c",), per=2)  # holds c's slot
    other.gang, other.slices, other.attempts[-1].gang = [], 1, []
    job = queued(slices=3)
    machines = fleet(box("a", accelerator="gpu8"), box("b", accelerator="gpu8"), box("c", accelerator="gpu8"))
    plan = decide([other, job], machines, seen({"a": up(), "b": up(), "c": up(ws(other, 0), ws(other, 1))}))
    assert launches(plan) == [] and job.status is Status.QUEUED
    assert job.waiting == "needs 3 slices of gpu8: 2 ready, 1 busy"


def test_req_alternatives_pick_one_kind_for_the_whole_gang() -> None:
    job = queued(slices=2, req=["v3-32,v4-32"])
    machines = fleet(tpu("v3a", "v3-32"), tpu("v4a"), tpu("v4b"))
    plan = decide([job], machines, seen({n: up(workers=4) for n in ("v3a", "v4a", "v4b")}))
    assert [a.gang for a in launches(plan)] == [("v4a", "v4b")]


def test_a_gang_prefers_one_multislice_entry_s_slices_in_slice_order() -> None:
    job = queued(slices=2)
    machines = fleet(tpu("lone"), tpu("ms-1", group="ms", index=1), tpu("ms-0", group="ms", index=0))
    plan = decide([job], machines, seen({n: up(workers=4) for n in ("lone", "ms-1", "ms-0")}))
    assert [a.gang for a in launches(plan)] == [("ms-0", "ms-1")]


def test_a_gang_waiting_for_a_preempted_tpu_asks_for_it_back() -> None:
    job = queued(slices=2)
    views = {"t0": up(workers=4), "t1": MachineView(reachable=None, preempted=True, ready=False)}
    plan = decide([job], fleet(tpu("t0"), tpu("t1")), seen(views))
    assert launches(plan) == [] and Recreate("t1") in plan.actions
    assert job.waiting == "needs 2 slices of v4-32: 1 ready, 1 recreating"


def test_per_user_limits_count_every_machine_of_a_gang() -> None:
    job = queued(slices=2)
    machines = fleet(box("a"), box("b"), limits={"u": UserLimit(machines=1)})
    plan = decide([job], machines, seen({"a": up(), "b": up()}))
    assert launches(plan) == [] and job.waiting == "held by the per-user limit (1 machine)"


# ---- recovered as one ------------------------------------------------------------------------------

def test_one_slice_preempted_stops_the_job_on_the_others_then_it_resumes_keeping_them() -> None:
    job = running_gang(gang=("t0", "t1"), rule="pre")
    views = {"t0": up(ws(job, 0), ws(job, 1), workers=4),
             "t1": MachineView(reachable=None, preempted=True, ready=False)}
    plan = decide([job], fleet(tpu("t0"), tpu("t1")), seen(views))
    assert [a for a in plan.actions if isinstance(a, Kill)] == [Kill(1, "t0", (WorkerRef(1, 0, 0), WorkerRef(1, 0, 1)))]
    assert (job.status, job.reason) == (Status.KILLING, model.PREEMPTED)
    settled = Plan()
    assert killed(job, "t0", gone=True, now=NOW, plan=settled) is None  # the lost slice is asked back by dispatch
    settled.apply_to([job])
    assert (job.status, job.resume, job.keeps, job.gang) == (Status.QUEUED, True, ["t0", "t1"], [])


def test_the_surviving_slice_is_never_given_to_another_job_and_the_gang_resumes_on_its_machines() -> None:
    keeper = queued(1, slices=2, keeps=["t0", "t1"], reason=model.RECOVERING, resume=True, attempt=1)
    keeper.attempts = [Attempt(n=0, machine="t0", started=T0, ended=T0 + 1, workers=8, gang=["t0", "t1"])]
    other = queued(2, slices=1, user="v")
    machines = fleet(tpu("t0"), tpu("t1"), tpu("t2"))
    views = {"t0": up(workers=4), "t1": MachineView(reachable=None, preempted=True, ready=False),
             "t2": MachineView(reachable=None, preempted=True, ready=False)}
    plan = decide([keeper, other], machines, seen(views))
    assert launches(plan) == [] and other.status is Status.QUEUED
    assert "t0 kept for job 1's resume" in (other.waiting or "")
    assert Recreate("t1") in plan.actions
    back = {"t0": up(workers=4), "t1": up(workers=4), "t2": up(workers=4)}
    plan = decide([keeper, other], machines, seen(back))
    assert sorted((a.job, a.machine, a.gang) for a in launches(plan)) == [(1, "t0", ("t0", "t1")), (2, "t2", ())]
    assert keeper.keeps == [] and keeper.resume


def test_a_failed_worker_on_one_slice_stops_every_slice_and_decides_the_exit_code() -> None:
    job = running_gang(gang=("a", "b"))
    views = {"a": up(ws(job, 0), ws(job, 1)), "b": up(ws(job, 2, alive=False, exit_code=3), ws(job, 3))}
    plan = decide([job], fleet(box("a"), box("b")), seen(views))
    assert sorted((k.machine, k.refs) for k in plan.actions if isinstance(k, Kill)) == [
        ("a", (WorkerRef(1, 0, 0), WorkerRef(1, 0, 1))), ("b", (WorkerRef(1, 0, 3),))]
    assert (job.status, job.reason, job.ending and job.ending.exit_code) == (Status.KILLING, "exit 3", 3)


def test_a_gang_is_one_view_preempted_or_unreachable_when_any_slice_is() -> None:
    job = running_gang(gang=("a", "b"))
    o = seen({"a": up(ws(job, 0)), "b": MachineView(reachable=False, error="timed out")})
    view = gang_view(job, o)
    assert (view.reachable, view.error, list(view.workers)) == (False, "b: timed out", [WorkerRef(1, 0, 0)])
    assert kills(job, (WorkerRef(1, 0, 1), WorkerRef(1, 0, 2))) == [
        Kill(1, "a", (WorkerRef(1, 0, 1),)), Kill(1, "b", (WorkerRef(1, 0, 2),))]


# ---- keeps: one TPU, and when the claim ends ------------------------------------------------------------

def test_a_one_slice_tpu_job_recreated_keeps_its_tpu() -> None:
    job = running_gang(gang=("t0",), per=4, rule="pre")
    job.gang, job.attempts[-1].gang, job.slices = [], [], 1
    views = {"t0": MachineView(reachable=None, preempted=True, ready=False), "t1": up(workers=4)}
    plan = decide([job], fleet(tpu("t0"), tpu("t1")), seen(views))
    assert Recreate("t0") in plan.actions and launches(plan) == []  # it waits for its own TPU, not t1
    assert (job.status, job.keeps) == (Status.QUEUED, ["t0"])


@pytest.mark.parametrize("ending, keeps", [
    (Ending(Status.FAILED, model.PREEMPTED, None, "recreate-resume"), ["a", "b"]),
    (Ending(Status.FAILED, model.LOST, None, "resume"), ["a", "b"]),
    (Ending(Status.FAILED, "exit 1", 1, "resume", retry=True), []),  # a --retries retry may go elsewhere
    (Ending(Status.FAILED, model.LOST, None, "rerun"), []),
])
def test_which_recoveries_keep_a_gang_s_machines(ending: Ending, keeps: list[str]) -> None:
    job = running_gang(gang=("a", "b"))
    job.status = Status.KILLING
    core.apply_ending(job, ending, NOW)
    assert job.keeps == keeps


def test_a_kept_machine_leaving_machines_json_ends_the_claim() -> None:
    job = queued(slices=2, keeps=["a", "gone"], reason=model.RECOVERING)
    plan = decide([job], fleet(box("a"), box("b")), seen({"a": up(), "b": up()}))
    assert job.keeps == [] and [a.gang for a in launches(plan)] == [("a", "b")]


def test_kept_machines_are_dropped_on_launch_and_on_a_move_out_of_queued() -> None:
    assert "keeps" in model.STATUS_FIELDS and model.STATUS_FIELDS["keeps"] == frozenset({Status.QUEUED})
    assert model.STATUS_FIELDS["gang"] == frozenset({Status.LAUNCHING, Status.RUNNING, Status.KILLING})


# ---- the environment and submit's checks -----------------------------------------------------------------

@pytest.mark.parametrize("slice_id, slices, expected", [
    (0, 1, {}),
    (1, 2, {"JOBTPU_SLICE": "1", "JOBTPU_SLICES": "2", "MEGASCALE_COORDINATOR_ADDRESS": "10.1.0.2:8081",
            "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1", "MEGASCALE_PORT": "8081"}),
])
def test_the_variables_that_join_a_gang_s_slices(slice_id: int, slices: int, expected: dict[str, str]) -> None:
    assert gang_env(slice_id, slices, "10.1.0.2") == expected


@pytest.mark.parametrize("slices, pin, fitting, said", [
    (0, None, [box("a")], "--slices 0: a job runs on at least one slice"),
    (2, "a", [box("a"), box("b")], "--machine a names one machine, and --slices 2 asks for 2"),
    (3, None, [box("a"), box("b"), box("c", hosts=4)], "--slices 3: the fleet could never form that gang"),
    (2, None, [tpu("x", "v4-32"), tpu("y", "v5p-64")], "--slices 2: the fleet could never form that gang"),
])
def test_submit_refuses_a_gang_it_could_never_run(slices: int, pin: str | None, fitting: list[Machine],
                                                   said: str) -> None:
    from jobtpu.commands.submit import check_slices

    with pytest.raises(JobtpuError) as e:
        check_slices(slices, pin, fitting)
    assert e.value.message.startswith(said) and "\n" not in e.value.message


def test_submit_takes_a_gang_the_fleet_can_form() -> None:
    from jobtpu.commands.submit import check_slices

    check_slices(2, None, [box("a"), box("b"), box("c", hosts=4)])
    check_slices(1, "a", [box("a")])


def test_a_resuming_gang_whose_launch_was_held_back_keeps_its_machines() -> None:
    from jobtpu.decide.outcomes import not_launched

    job = running_gang(gang=("t0", "t1"))
    job.status, job.reason, job.resume = Status.LAUNCHING, model.RECOVERING, True
    plan = Plan()
    not_launched(job, "t1 is setting up", plan)
    plan.apply_to([job])
    assert (job.status, job.keeps, job.attempts) == (Status.QUEUED, ["t0", "t1"], [])


# ---- report: slice-hours, an interruption split per slice --------------------------------------------

def test_report_counts_slice_hours_and_splits_an_interruption_per_slice() -> None:
    from jobtpu.decide import events as ev
    from jobtpu.decide.events import Event
    from jobtpu.decide.goodput import AttemptRecord, job_report
    from jobtpu.views.report import render_text

    gang = ["t0", "t1"]
    attempts = [AttemptRecord.from_json({"n": 0, "machine": "t0", "started": T0, "ended": T0 + 3600,
                                         "outcome": "preempted", "workers": 8, "gang": gang}, chips=4),
                AttemptRecord.from_json({"n": 1, "machine": "t0", "started": T0 + 4200, "ended": T0 + 7800,
                                         "outcome": "finished", "workers": 8, "gang": gang, "resume": True}, chips=4)]
    log = [Event(T0 + 3600, ev.PREEMPTED, machine="t1"), Event(T0 + 4000, ev.TPU_CREATE_DONE, machine="t1"),
           Event(T0 + 4100, ev.TPU_SETUP_DONE, machine="t1")]
    report = job_report(1, "", attempts, log, {}, now=T0 + 9000)
    first = report.attempts[0]
    assert (first.slices, first.slice_hours, first.accelerator) == (2, 2.0, 3600 * 8)
    gap = report.interruptions[0]
    assert [(s.machine, s.lost, s.ready_at - T0) for s in gap.slices] == [("t0", False, 3600), ("t1", True, 4100)]
    assert (gap.recreate, gap.setup, gap.slice_hours_lost) == (400, 100, 2 * 600 / 3600)
    text = render_text([report])
    assert "attempt 0 on 2 slices from t0 (2.00 slice-hours)" in text
    assert "2 slices, 0.33 slice-hours lost: t0 kept, ready after 0s, t1 lost, back after 8m" in text


@pytest.mark.parametrize("edit", [{"slices": 0}, {"gang": ["b", "a"]}, {"gang": ["a"]}, {"gang": ["a", "a"]}])
def test_a_hand_edit_that_breaks_a_gang_s_record_is_refused(edit: dict[str, Any]) -> None:
    from jobtpu.schema.job_checks import job_problem

    job = running_gang(gang=("a", "b"))
    assert job_problem(job) is None
    for name, value in edit.items():
        setattr(job, name, value)
    assert "field 'slices' must be 1 or more" in (job_problem(job) or "")


def test_the_local_machine_is_never_a_slice_of_a_gang() -> None:
    from jobtpu.commands.submit import check_slices

    here = Machine(name="here", kind="local")
    with pytest.raises(JobtpuError):
        check_slices(2, None, [here, box("a", hosts=1)])
    job = queued(slices=2)
    plan = decide([job], fleet(here, box("a", hosts=1), box("b", hosts=1)), seen({"a": up(workers=1), "b": up(workers=1)}))
    assert [a.gang for a in launches(plan)] == [("a", "b")]


def test_an_ended_gang_s_logs_are_caught_up_from_each_slice_s_own_machine() -> None:
    from jobtpu.fleet.pulls import ended_since

    job = running_gang(gang=("a", "b"))
    job.attempts[-1].ended = NOW
    assert ended_since([job], {(1, 0)}) == {"a": [WorkerRef(1, 0, 0), WorkerRef(1, 0, 1)],
                                            "b": [WorkerRef(1, 0, 2), WorkerRef(1, 0, 3)]}


def test_a_one_slice_job_may_still_run_on_the_local_machine_alone() -> None:
    from jobtpu.commands.submit import check_slices

    check_slices(1, None, [Machine(name="here", kind="local")])


def test_a_resuming_gang_keeps_its_slices_in_their_order() -> None:
    job = queued(slices=2, keeps=["ms-1", "ms-0"], reason=model.RECOVERING)
    machines = fleet(tpu("ms-0", group="ms", index=0), tpu("ms-1", group="ms", index=1))
    plan = decide([job], machines, seen({n: up(workers=4) for n in ("ms-0", "ms-1")}))
    assert [a.gang for a in launches(plan)] == [("ms-1", "ms-0")]


# ---- a hand-edited state.json: the runner's own file, edited wrongly (docs/reference/state-json.md §4.3) ---------

@pytest.mark.parametrize("keeps, slices", [
    (["a", "c"], 2),  # a gang of mixed kinds could never form
    (["a", "a"], 2),  # one machine twice
    (["a"], 2),  # fewer machines than slices
    (["c"], 1),  # a machine its request does not fit
])
def test_a_hand_edited_keeps_that_could_never_take_the_job_back_keeps_nothing(keeps: list[str], slices: int) -> None:
    """A claim no resume can ever use would keep machines from everyone for good (or, naming one
    machine twice, start a gang twice on it): it ends, the job waits as any other, and the machines
    go to whoever fits now, never two launches on one machine."""
    keeper = queued(1, slices=slices, keeps=keeps, reason=model.RECOVERING, req=["v4-16"])
    other = queued(2, slices=1, req=["v4-16"])
    boxes = fleet(*(box(n, accelerator="v4-16") for n in "abd"), box("c", accelerator="v5-8"))
    plan = decide([keeper, other], boxes, seen({n: up() for n in "abcd"}))
    assert keeper.keeps == [], keeper
    launched = [name for launch in launches(plan) for name in (launch.gang or (launch.machine,))]
    assert len(launched) == len(set(launched)) and other.status is Status.LAUNCHING, plan.notes


def test_a_gang_whose_slice_left_machines_json_is_still_stopped_on_the_slices_that_remain() -> None:
    """Its slice 1 taken out of machines.json, the gang is killed: its workers on slice 0 are
    stopped there before the job ends (else they would run on beside the next job there), and the
    line names the slice that left."""
    job = running_gang(gang=("a", "b"))
    views = {"a": up(ws(job, 0), ws(job, 1))}
    plan = decide([job], fleet(box("a")), seen(views))
    assert (job.status, plan.notes) == (Status.RUNNING, ["job 1: machine b is no longer in machines.json"])
    job.status, job.ending = Status.KILLING, Ending(Status.KILLED, model.KILLED)
    plan = decide([job], fleet(box("a")), seen(views))
    assert job.status is Status.KILLING and Kill(1, "a", slice_refs(job, 0)) in plan.actions, plan.actions


def test_watch_shows_a_gang_as_one_job_on_its_slices() -> None:
    from jobtpu.commands.watch import job_rows

    lines = [line.plain for line in job_rows([running_gang(gang=("a", "b"))], room=5, now=NOW)]
    assert len(lines) == 1 and "2 slices: a,b" in lines[0], lines


def test_the_sheet_shows_a_gang_as_one_job_of_n_slices_on_each_machine_it_runs_on_or_keeps() -> None:
    from jobtpu.passes.sheet_hook import sheet_rows
    from jobtpu.schema.records import MachineRecord, MachineState
    from jobtpu.schema.state import State

    boxes = fleet(box("a"), box("b"), box("c"))
    ups = {n: MachineRecord(state=MachineState.UP) for n in "abc"}
    gang = running_gang(gang=("a", "b"), name="train")
    rows = {r.name: r for r in sheet_rows(boxes, State(jobs=[gang], machines=ups))}
    assert [(rows[n].jobs, rows[n].recovering) for n in "abc"] == [
        (("1 train (2 slices)",), False), (("1 train (2 slices)",), False), ((), False)]
    resuming = queued(slices=2, name="train", keeps=["a", "b"], reason=model.RECOVERING,
                      attempts=[Attempt(n=0, machine="a", started=T0, ended=T0 + 1, workers=4, gang=["a", "b"])])
    rows = {r.name: r for r in sheet_rows(boxes, State(jobs=[resuming], machines=ups))}
    assert [(rows[n].jobs, rows[n].recovering) for n in "abc"] == [  # its surviving slices are up, and held
        (("1 train (2 slices)",), True), (("1 train (2 slices)",), True), ((), False)]


def test_rule_reapply_on_a_grpc_failure_brings_back_the_slice_that_failed_once_the_gang_has_stopped() -> None:
    """As for one TPU (its rule reapply recreates it on grpc): the slice whose worker failed first is
    recreated, after the stop on every slice; the gang keeps both and resumes on them."""
    job = running_gang(gang=("t0", "t1"), rule="reapply")
    failed = ws(job, 2, alive=False, exit_code=1)
    views = {"t0": up(ws(job, 0), ws(job, 1)), "t1": up(failed, ws(job, 3))}
    o = seen(views)
    o.log_tails[failed.ref] = "jax.errors: DEADLINE_EXCEEDED: GRPC error"
    tpus = fleet(tpu("t0"), tpu("t1"))
    plan = decide([job], tpus, o)
    assert job.status is Status.KILLING and not [a for a in plan.actions if isinstance(a, Recreate)], plan.actions
    from jobtpu.decide.outcomes import killed

    after = Plan()
    back = killed(job, "t0", True, NOW, after)
    after.apply_to([job])
    assert (back, job.status, job.keeps) == (Recreate("t1"), Status.QUEUED, ["t0", "t1"]), job


@pytest.mark.parametrize("setups, held", [
    ({}, None),
    ({"a": "up", "b": "up"}, None),
    ({"a": "up", "b": "setup failed"}, ("b", "setup failed")),  # slice 1's setup holds the whole gang
    ({"b": "setting up"}, ("b", "setting up")),
])
def test_a_gang_s_launch_is_held_by_the_setup_of_any_of_its_slices(setups: dict[str, str],
                                                                   held: tuple[str, str] | None) -> None:
    from jobtpu.decide.settle import held_by_setup

    got = held_by_setup(Launch(1, "a", 0, 4, gang=("a", "b")), setups)
    assert (None if got is None else (got.machine, got.setup)) == held

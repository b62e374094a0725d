"""What Slurm and jittens users asked of a scheduler at scale, as pure decisions: a sweep's cap on its
running jobs (--max-running), a drained machine, a sweep's values in the environment, and `update`'s
changes to a queued job (docs/reference/commands.md §2.2.3, §2.9.2, §2.10; job-environment.md §8.2)."""

from __future__ import annotations

import msgspec
import pytest

from jobtpu.commands.table import RELAYED
from jobtpu.commands.update import Changes, apply_changes
from jobtpu.decide.observation import Launch, MachineView, Observation, Recreate
from jobtpu.decide.placement import Place
from jobtpu.errors import JobtpuError
from jobtpu.passes.act import job_env, literal_names
from jobtpu.schema import state as model
from jobtpu.schema.spool import ActRequest
from jobtpu.schema.state import Attempt, Job, Status
from jobtpu.sweeps import check_env_names, env_name, sweep_env
from tests.test_decide import NOW, T0, active, decide, fleet, gpu_box, local, queued, seen, tpu, ws

pytestmark = pytest.mark.fast


def _sweep(n: int, cap: int | None, first: int = 10) -> list[Job]:
    return [queued(first + i, sweep=first, sweep_index=i, max_running=cap) for i in range(n)]


def _launched(plan: object) -> list[int]:
    return [a.job for a in plan.actions if isinstance(a, Launch)]  # type: ignore[attr-defined]


# ---- --max-running ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("cap", "already", "starts", "reason"), [
    (None, 0, 6, None),  # no cap: every job the machine has room for
    (2, 0, 2, "sweep 10: 2 of 2 running (--max-running)"),
    (4, 3, 1, "sweep 10: 4 of 4 running (--max-running)"),  # three run already: one more may start
    (2, 2, 0, "sweep 10: 2 of 2 running (--max-running)"),
    (1, 0, 1, "sweep 10: 1 of 1 running (--max-running)"),
])
def test_a_sweep_runs_at_most_max_running_jobs_at_once(cap: int | None, already: int, starts: int,
                                                       reason: str | None) -> None:
    running = [active(10 + i, machine="m", sweep=10, sweep_index=i, max_running=cap, alloc={"slot": [i]})
               for i in range(already)]
    waiting = [queued(10 + already + i, sweep=10, sweep_index=already + i, max_running=cap) for i in range(6)]
    jobs = running + waiting
    plan = decide(jobs, fleet(local("m", slot=12)), seen("m", *(ws(j, 0) for j in running)))
    assert len(_launched(plan)) == starts
    assert _launched(plan) == [j.id for j in waiting[:starts]], "in submission order"
    left = [j for j in waiting if j.status is Status.QUEUED]
    assert all(j.waiting == reason for j in left) if reason else not left


def test_the_cap_is_per_sweep_and_other_jobs_pass_a_capped_sweep_by() -> None:
    jobs = [*_sweep(3, 1, first=10), *_sweep(3, None, first=20), queued(30)]
    plan = decide(jobs, fleet(local("m", slot=12)), Observation(now=NOW))
    assert _launched(plan) == [10, 20, 21, 22, 30]


# ---- drain ---------------------------------------------------------------------------------------------

def test_a_drained_machine_takes_no_new_job_and_says_why() -> None:
    jobs = [queued(1), active(2, machine="box", alloc={"gpu": [0]}, req=["gpu=1"])]
    box = Observation(now=NOW, machines={"box": MachineView(reachable=True)}, drained={"box": "maintenance"})
    box.machines["box"].workers = {w.ref: w for w in [ws(jobs[1], 0)]}
    plan = decide(jobs, fleet(gpu_box("box")), box)
    assert _launched(plan) == []
    assert jobs[0].waiting == "no machine can run it now: box drained: maintenance; next in line"
    assert jobs[1].status is Status.RUNNING, "what runs there goes on"


def test_jobs_go_to_the_machines_not_drained_and_a_drain_without_reason_says_so() -> None:
    jobs = [queued(1), queued(2)]
    plan = decide(jobs, fleet(local("a"), local("b")), Observation(now=NOW, drained={"a": ""}))
    assert [(a.job, a.machine) for a in plan.actions if isinstance(a, Launch)] == [(1, "b")]
    assert jobs[1].waiting == "2 machines fit: 1 busy, a drained; next in line"


def test_a_job_taken_off_a_drained_machine_to_recover_goes_back_to_it() -> None:
    """A drain keeps new jobs away: one the pass took off the machine to recover it is not new."""
    back = queued(1, attempt=1, reason=model.RECOVERING, resume=True,
                  attempts=[Attempt(n=0, machine="v3", outcome=model.PREEMPTED, started=T0, ended=T0 + 1)])
    new = queued(2)
    plan = decide([new, back], fleet(tpu("v3")), Observation(now=NOW, drained={"v3": "maintenance"}))
    assert _launched(plan) == [1]
    assert new.waiting is not None and "v3 drained: maintenance" in new.waiting


def test_a_preempted_drained_tpu_is_recreated_for_its_own_job_only() -> None:
    preempted = {"v3": MachineView(reachable=False, preempted=True)}
    new = queued(2, rule="pre")
    plan = decide([new], fleet(tpu("v3")), Observation(now=NOW, machines=dict(preempted), drained={"v3": "x"}))
    assert not [a for a in plan.actions if isinstance(a, Recreate)], "not brought back for new work"
    back = queued(1, attempt=1, reason=model.RECOVERING, rule="pre",
                  attempts=[Attempt(n=0, machine="v3", outcome=model.PREEMPTED, started=T0, ended=T0 + 1)])
    plan = decide([back, queued(2, rule="pre")], fleet(tpu("v3")),
                  Observation(now=NOW, machines=dict(preempted), drained={"v3": "x"}))
    assert [a.machine for a in plan.actions if isinstance(a, Recreate)] == ["v3"]


# ---- a sweep's values in the environment ------------------------------------------------------------

@pytest.mark.parametrize(("key", "name"), [
    ("lr", "JOBTPU_SWEEP_LR"),
    ("model.depth", "JOBTPU_SWEEP_MODEL_DEPTH"),
    ("warm-up", "JOBTPU_SWEEP_WARM_UP"),
    ("Batch_Size", "JOBTPU_SWEEP_BATCH_SIZE"),
])
def test_a_sweep_key_names_its_variable(key: str, name: str) -> None:
    assert env_name(key) == name


@pytest.mark.parametrize("keys", [("lr-x", "lr_x"), ("LR", "lr"), ("a.b", "a_b")])
def test_two_keys_that_would_be_one_variable_are_refused(keys: tuple[str, str]) -> None:
    with pytest.raises(JobtpuError, match="would both be"):
        check_env_names([{keys[0]: "1", keys[1]: "2"}])


def test_a_key_named_index_stays_an_argument_only() -> None:
    assert check_env_names([{"index": "3", "lr": "0.1"}]) == ["index"]
    assert sweep_env({"index": "3", "lr": "0.1"}) == {"JOBTPU_SWEEP_LR": "0.1"}


def test_the_job_gets_its_sweep_values_taken_literally() -> None:
    job = active(12, machine="local", sweep=10, sweep_index=2, sweep_values={"lr": "0.1", "tag": "$HOME"})
    place = Place(zone="", node="h", accelerator="", hosts=("h",), peers=("h",))
    env = job_env(job, local(), 0, place, {})
    assert env["JOBTPU_SWEEP"] == "10" and env["JOBTPU_SWEEP_INDEX"] == "2"
    assert env["JOBTPU_SWEEP_LR"] == "0.1" and env["JOBTPU_SWEEP_TAG"] == "$HOME"
    assert literal_names(job, {"API_KEY": "s"}) == {"API_KEY", "JOBTPU_SWEEP_LR", "JOBTPU_SWEEP_TAG"}
    assert "JOBTPU_SWEEP_LR" not in job_env(msgspec.structs.replace(job, sweep=None), local(), 0, place, {})


# ---- update ----------------------------------------------------------------------------------------------

LR = "--config.training.learning_rate"  # lr, through the built-in aliases
UPDATES = [
    (Changes(priority=5), {"priority": [0, 5]}),
    (Changes(req=("gpu=2",)), {"req": ["", "gpu=2"]}),
    (Changes(machine="box"), {"pin": [None, "box"]}),
    (Changes(set=("lr=0.2",)), {"overrides": [f"{LR}=0.1 --depth=8", f"--depth=8 {LR}=0.2"]}),
    (Changes(set=("wd=1",)), {"overrides": [f"{LR}=0.1 --depth=8",
                                             f"{LR}=0.1 --depth=8 --config.training.weight_decay=1"]}),
    (Changes(unset=("depth",)), {"overrides": [f"{LR}=0.1 --depth=8", f"{LR}=0.1"]}),
    (Changes(max_running=3), {"max_running": [None, 3]}),
    (Changes(priority=0), {}),  # the same value: nothing changes
]


@pytest.mark.parametrize(("changes", "changed"), UPDATES)
def test_update_changes_what_it_is_asked_and_says_so(changes: Changes, changed: dict[str, list[object]]) -> None:
    job = queued(11, overrides=[f"{LR}=0.1", "--depth=8"], sweep=10, sweep_index=1, sweep_values={"lr": "0.1"})
    assert apply_changes(job, changes, fleet(gpu_box("box"), local("m")), {}, {}) == changed
    if "lr=0.2" in changes.set:
        assert job.sweep_values == {"lr": "0.2"}, "its JOBTPU_SWEEP_LR follows its argument"


@pytest.mark.parametrize(("changes", "job", "words"), [
    (Changes(req=("gpu=9",)), queued(1), "no machine could ever run gpu=9"),
    (Changes(machine="m"), queued(1, req=["gpu=1"]), "no machine could ever run gpu=1 on m"),
    (Changes(max_running=2), queued(1), "job 1 is in no sweep"),
    (Changes(unset=("lr",)), queued(1), "job 1 has no override 'lr'"),
    (Changes(machine="nowhere"), queued(1), "nowhere"),
])
def test_update_refuses_what_could_never_run_and_changes_nothing(changes: Changes, job: Job, words: str) -> None:
    before = msgspec.json.encode(job)
    with pytest.raises(JobtpuError, match=words):
        apply_changes(job, changes, fleet(gpu_box("box"), local("m")), {}, {})
    assert msgspec.json.encode(job) == before


def test_update_goes_through_a_shared_homes_relay() -> None:
    assert "update" in RELAYED
    from jobtpu.commands.act_request import decode, encode, namespace, parse_act

    act = parse_act(["update", "--sweep", "12", "--max-running", "4"])
    sent = msgspec.json.decode(encode(act, "ann", 1 << 16), type=ActRequest)
    parsed = namespace(decode(sent))
    assert parsed.sweeps == [12] and parsed.max_running == 4


@pytest.mark.parametrize(("fields", "problem"), [
    ({"sweep": 10, "sweep_index": 0, "max_running": 4}, None),
    ({"max_running": 4}, "field 'max_running' must be 1 or more, in a sweep's job (null: no cap)"),
    ({"sweep": 10, "sweep_index": 0, "max_running": 0}, "field 'max_running' must be 1 or more"),
])
def test_a_hand_edited_max_running_is_checked(fields: dict[str, int], problem: str | None) -> None:
    from jobtpu.schema.job_checks import job_problem

    job = msgspec.structs.replace(queued(11, **fields), archive="0" * 64 + ".tar.gz")
    found = job_problem(job)
    assert found == problem if problem is None else found is not None and found.startswith(problem)

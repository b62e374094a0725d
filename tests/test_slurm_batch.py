"""The sbatch options a job becomes on a Slurm cluster, machines.json's slurm keys, and what a pass
decides from Slurm's word, as tables (docs/reference/machines-json.md §3.3.1). End to end: tests/test_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jobtpu.decide import rules
from jobtpu.decide.fit import allocate
from jobtpu.decide.observation import Observation
from jobtpu.decide.slurm_after import handover, still_holds
from jobtpu.decide.workers import WorkerRef
from jobtpu.errors import ConfigError
from jobtpu.fleet.drivers import driver_for
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet
from jobtpu.schema import state as model
from jobtpu.schema import worker_protocol as protocol
from jobtpu.schema.fleet import Machine
from jobtpu.schema.state import Job, Status
from jobtpu.slurm.batch import sbatch_options, slurm_minutes
from jobtpu.slurm.checks import judge
from tests.test_decide import NOW, active, decide, fleet, kills, launches, queued, seen, ws

pytestmark = pytest.mark.fast


def slurm(tmp_path: Path, **keys: Any) -> Machine:
    home = Home(tmp_path)
    entry = {k: v for k, v in {"kind": "slurm", "host": "login", **keys}.items() if v is not None}  # host=None: none
    home.machines_file.write_text(json.dumps({"machines": {"hpc": entry}}))
    return load_fleet(home).machines["hpc"]


def job(**fields: Any) -> Job:
    return Job(id=1, user="u", cmd="true", archive="a.tar.gz", created=0.0, **fields)


@pytest.mark.parametrize(("keys", "fields", "options"), [
    ({}, {}, ("--nodes=1", "--ntasks=1")),
    ({"partition": "gpu", "account": "lab", "qos": "high", "constraint": "a100&ib"}, {},
     ("--partition=gpu", "--account=lab", "--qos=high", "--constraint=a100&ib", "--nodes=1", "--ntasks=1")),
    ({}, {"req": ["gpu=2"]}, ("--nodes=1", "--ntasks=1", "--gres=gpu:2")),
    ({}, {"req": ["cpu=8", "gpu=1"]}, ("--nodes=1", "--ntasks=1", "--cpus-per-task=8", "--gres=gpu:1")),
    # --timeout 1 h, grace 5 s: Slurm's --time is the backstop past the wrapper's own stop, in whole minutes.
    ({}, {"timeout": 3600.0}, ("--nodes=1", "--ntasks=1", "--time=61")),
])
def test_sbatch_options(tmp_path: Path, keys: dict[str, Any], fields: dict[str, Any], options: tuple[str, ...]) -> None:
    assert sbatch_options(slurm(tmp_path, **keys), job(**fields), grace=5.0) == options


@pytest.mark.parametrize(("seconds", "minutes"), [(0.0, 1), (60.0, 1), (60.5, 2), (3635.0, 61)])
def test_slurm_minutes_never_shorten_the_limit(seconds: float, minutes: int) -> None:
    assert slurm_minutes(seconds) == minutes


def test_a_slurm_machine_is_reached_at_its_login_host_and_hands_every_job_over(tmp_path: Path) -> None:
    machine = slurm(tmp_path, host="login:2222", resources={"gpu": 8}, root="/shared/jobtpu")
    assert (machine.hosts, machine.root, machine.known_workers, machine.default_rule()) == (
        ("login:2222",), "/shared/jobtpu", 1, "pre")
    # Slurm counts the GPUs: jobtpu's fit says whether one job could ever run there, never whether it fits now.
    assert machine.scheduled and allocate(machine.capacity, {}, {"gpu": 8}) is not None


def test_a_slurm_machine_without_a_host_is_reached_here(tmp_path: Path) -> None:
    # jobtpu on the login node itself: no host to log in to, the root in this account's home.
    machine = slurm(tmp_path, host=None)
    assert (machine.hosts, machine.root, machine.known_workers) == ((), str(Path.home() / "jobtpu"), 1)
    local = driver_for(machine).endpoints(machine, None)
    assert [(ep.index, ep.addr) for ep in local] == [(0, None)]


@pytest.mark.parametrize(("entry", "said"), [
    ({"kind": "slurm", "host": " "}, "a slurm machine's 'host' must be its login host"),
    ({"kind": "slurm", "host": "login", "partition": "a b"}, "'partition' 'a b' must be a Slurm name"),
    ({"kind": "slurm", "host": "login", "hosts": ["x"]}, "'hosts' is only for kind ssh"),
    ({"kind": "ssh", "hosts": ["x"], "partition": "gpu"}, "'partition' is only for kind slurm"),
    ({"kind": "ssh", "hosts": ["x"], "host": "login"}, "'host' is only for kind slurm"),
])
def test_a_wrong_slurm_entry_is_one_line(tmp_path: Path, entry: dict[str, Any], said: str) -> None:
    home = Home(tmp_path)
    home.machines_file.write_text(json.dumps({"machines": {"hpc": entry}}))
    with pytest.raises(ConfigError) as info:
        load_fleet(home)
    assert said in info.value.message and "\n" not in info.value.message


# ---- what a pass decides from Slurm's word (decide/core.py) ----------------------------------------

def cluster() -> Machine:
    return Machine(name="m", kind="slurm", hosts=("login",), resources={"gpu": 8})


def test_every_job_that_fits_is_handed_to_slurm_at_once_holding_nothing() -> None:
    jobs = [queued(i, req=["gpu=8"]) for i in (1, 2, 3)]
    plan = decide(jobs, fleet(cluster()), Observation(now=NOW))
    assert [(j.status, j.machine, j.alloc) for j in jobs] == [(Status.LAUNCHING, "m", {})] * 3
    assert sorted(launch.job for launch in launches(plan)) == [1, 2, 3]
    too_big = queued(4, req=["gpu=9"])  # more than one job may ask there: never sent
    decide([too_big], fleet(cluster()), Observation(now=NOW))
    assert too_big.status is Status.QUEUED


def test_a_cluster_on_the_login_node_hands_over_only_what_this_account_may_run() -> None:
    """sbatch on the login node runs the job as this account, as the local machine does: a job its
    spec does not let run so (another member's, in a shared home) stays queued with the reason, and
    one whose record was rewritten fails; a cluster reached over SSH runs it as its login's account."""
    here = Machine(name="m", kind="slurm", resources={"gpu": 8})
    refusals = {1: ("other", "job 1 runs as bob: bob's own pass starts it"), 2: ("tampered", "job 2's record changed")}
    jobs = [queued(1), queued(2)]
    decide(jobs, fleet(here), Observation(now=NOW, local_refusals=refusals))
    assert [(j.status, j.waiting or j.last_line) for j in jobs] == [
        (Status.QUEUED, "job 1 runs as bob: bob's own pass starts it"), (Status.FAILED, "job 2's record changed")]
    jobs = [queued(1), queued(2)]
    decide(jobs, fleet(cluster()), Observation(now=NOW, local_refusals=refusals))
    assert [j.status for j in jobs] == [Status.LAUNCHING] * 2


def test_a_job_slurm_holds_pending_is_never_timed_out_and_says_why() -> None:
    job = active(timeout=60.0)  # handed over long before NOW: past its --timeout, had it been running
    pending = msgspec.structs.replace(ws(job, 0), pid=None, waiting="QOSMaxJobsPerUserLimit")
    plan = decide([job], fleet(cluster()), seen("m", pending))
    assert (kills(plan), job.status, job.last_line) == ([], Status.RUNNING,
                                                        "Slurm holds it pending: QOSMaxJobsPerUserLimit")
    assert job.current is not None and job.current.started == NOW  # its --timeout counts from when it runs
    running = active(timeout=60.0)
    assert [k.job for k in kills(decide([running], fleet(cluster()), seen("m", ws(running, 0))))] == [running.id]


def test_a_requeue_ends_the_attempt_preempted_before_any_exit_code_and_stops_the_requeued_job() -> None:
    job = active()
    requeued = msgspec.structs.replace(ws(job, 0, alive=True, exit_code=143), preempted=True)
    plan = decide([job], fleet(cluster()), seen("m", requeued))
    assert (job.status, job.reason) == (Status.KILLING, model.PREEMPTED)
    assert job.ending is not None and job.ending.recovery == rules.RECREATE_RESUME  # rule pre: it resumes
    assert [k.refs for k in kills(plan)] == [(WorkerRef(job.id, job.attempt, 0),)]


@pytest.mark.parametrize(("found", "said"), [
    ([protocol.Tool("sbatch", ""), protocol.SlurmAnswer(True, partitions=["gpu"])],
     ["L: problem: sbatch is not on the login host's PATH", "L: ok: Slurm answers; partitions gpu"]),
    ([protocol.SlurmAnswer(False, "slurm_load_partitions: Unable to contact slurm controller")],
     ["L: problem: Slurm's controller does not answer: slurm_load_partitions: Unable to contact slurm controller"]),
    ([], ["L: problem: the Slurm check said nothing"]),
])
def test_doctor_lines(tmp_path: Path, found: list[protocol.Report], said: list[str]) -> None:
    lines = judge(slurm(tmp_path, partition="gpu"), "L", found)
    assert [text for text, _ in lines if not any(text.startswith(s) for s in said)] == []
    assert len(lines) == len(said)


# ---- `exec JOB` and `ssh JOB`: a step of the job's allocation (slurm/step.py) ----------------------

@pytest.mark.parametrize(("code", "out", "err", "said"), [
    (0, "RUNNING|None|42\n", "", "42"),
    (0, "RUNNING|None|57\n", "", "57"),  # an array member: its own id, as squeue's %A says
    (0, "PENDING|Resources|42\n", "", "job 3 (Slurm job 7_1) is pending in Slurm (Resources): it runs on no node yet"),
    (0, "PENDING|None|42\n", "", "job 3 (Slurm job 7_1) is pending in Slurm (queued): it runs on no node yet"),
    (0, "COMPLETED|None|42\n", "", "job 3 (Slurm job 7_1) has ended in Slurm (COMPLETED): nothing runs to reach"),
    (1, "", "slurm_load_jobs error: Invalid job id specified\n", "job 3 (Slurm job 7_1) has ended: Slurm no longer knows it"),
    (1, "", "slurm_load_jobs error: Unable to contact slurm controller\n",
     "job 3 (Slurm job 7_1): Slurm does not answer at the login host: slurm_load_jobs error: Unable to contact"),
])
def test_a_step_joins_a_running_job_and_anything_else_is_one_line(code: int, out: str, err: str, said: str) -> None:
    from jobtpu.errors import JobtpuError
    from jobtpu.slurm.step import step_id

    try:
        got = step_id(3, "7_1", code, out, err)
    except JobtpuError as e:
        got = e.message
    assert got.startswith(said) and "\n" not in got, got


def test_the_step_runs_in_the_jobs_folder_a_command_or_a_shell_on_a_terminal() -> None:
    from jobtpu.slurm.step import step_command

    assert step_command(3, "jobtpu/jobs/3", "42", ["nvidia-smi", "-L"]) == (
        "cd -- jobtpu/jobs/3 && exec srun --jobid=42 --overlap --nodes=1 --ntasks=1 --quiet "
        "--export=ALL,JOBTPU_JOB_ID=3 bash -c 'nvidia-smi -L'")
    assert step_command(3, "/s/j 3", "42", []).endswith("--export=ALL,JOBTPU_JOB_ID=3 --pty bash -i")


def test_a_sweep_s_members_on_a_cluster_go_as_one_array_even_when_one_is_left() -> None:
    """Every member of a sweep on a Slurm cluster is handed over by the array path, a lone one as an
    array of one: a handover cut short after sbatch answered is found again only there (by the
    array's name and table), so a member left alone is never submitted a second time. A resumed
    member, another machine's job and a job of no sweep go alone."""
    from types import SimpleNamespace

    from jobtpu.decide.observation import Launch
    from jobtpu.passes.arrays import array_groups
    from jobtpu.schema.fleet import Fleet

    box = Machine(name="box", kind="ssh", hosts=("h",))
    jobs = [queued(1, sweep=7), queued(2, sweep=7), queued(3, sweep=8), queued(4, sweep=9, resume=True),
            queued(5), queued(6, sweep=7), queued(7, sweep=7)]
    for j in jobs:
        j.status = Status.LAUNCHING
        j.attempts = [model.Attempt(n=0, machine="m", slurm_after="afterok:9" if j.id == 7 else None)]
    pass_ = SimpleNamespace(state=SimpleNamespace(jobs=jobs), fleet=Fleet(machines={"m": cluster(), "box": box}))
    ready = [Launch(j.id, "box" if j.id == 6 else "m", 0, 1) for j in jobs]
    arrays, alone = array_groups(pass_, ready)  # type: ignore[arg-type]
    # A member handed after another Slurm job (its --after) has other sbatch options: an array of its own.
    assert [[a.job for a in group] for group in arrays] == [[1, 2], [3], [7]]
    assert sorted(a.job for a in alone) == [4, 5, 6]


@pytest.mark.parametrize("shared", [False, True])
def test_a_sweep_on_a_cluster_here_goes_as_an_array_only_in_a_home_of_this_accounts_alone(
        tmp_path: Path, shared: bool) -> None:
    """On the login node a job runs as this account: where state.json is not this account's alone,
    each member is checked against its spec as it starts and takes only the secrets it allows
    (passes/act.py), so none goes in an array, which that check does not see."""
    from types import SimpleNamespace

    from jobtpu.decide.observation import Launch
    from jobtpu.passes.arrays import array_groups
    from jobtpu.schema.fleet import Fleet

    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o770 if shared else 0o700)  # group-writable: a home several accounts share
    jobs = [queued(1, sweep=7), queued(2, sweep=7)]
    for j in jobs:
        j.status = Status.LAUNCHING
    here = Machine(name="m", kind="slurm", resources={"gpu": 8})
    pass_ = SimpleNamespace(state=SimpleNamespace(jobs=jobs), fleet=Fleet(machines={"m": here}), home=Home(home))
    arrays, alone = array_groups(pass_, [Launch(j.id, "m", 0, 1) for j in jobs])  # type: ignore[arg-type]
    grouped = ([[a.job for a in g] for g in arrays], [a.job for a in alone])
    assert grouped == (([], [1, 2]) if shared else ([[1, 2]], []))


# ---- --after on a Slurm cluster (decide/slurm_after.py) -------------------------------------------

def on_slurm(job_id: int, slurm_job: int | str | None = None, machine: str = "m", status: Status = Status.RUNNING,
             **fields: Any) -> Job:
    dep = active(job_id, status=status, machine=machine)
    assert dep.current is not None
    dep.current.slurm_job = slurm_job
    for name, value in fields.items():
        setattr(dep, name, value)
    return dep


LAST = {"rule": "pass"}  # nothing follows its running attempt (slurm_after.last_attempt)


def ended(job_id: int, status: Status) -> Job:
    dep = on_slurm(job_id, 7)
    dep.status = status
    return dep


def two_clusters() -> Any:
    return fleet(cluster(), Machine(name="m2", kind="slurm", hosts=("login2",)), Machine(name="box", kind="ssh", hosts=("b",)))


@pytest.mark.parametrize(("after", "after_any", "deps", "handed"), [
    ([1], [], [on_slurm(1, 12)], ("m", "afterok:12")),
    ([1, 2], [3], [on_slurm(1, 12), on_slurm(2, "40_3"), on_slurm(3, 14, **LAST)], ("m", "afterok:12:40_3,afterany:14")),
    # --after-any: Slurm's afterany would start it when an attempt ends that another then follows.
    ([], [3], [on_slurm(3, 14)], None),  # a cluster's default rule (pre) resumes a preempted attempt
    ([], [3], [on_slurm(3, 14, rule="pass", retries=2, retried=1)], None),  # a retry is left
    ([], [3], [on_slurm(3, 14, rule="pass", retries=2, retried=2)], ("m", "afterany:14")),
    ([], [3], [on_slurm(3, 14, rule="pre", recoveries=3, max_recoveries=3)], None),  # preemptions unlimited
    ([], [3], [on_slurm(3, 14, rule="pre", recoveries=3, max_recoveries=3, preemptions=1, max_preemptions=1)],
     ("m", "afterany:14")),  # both budgets spent
    ([1], [3], [on_slurm(1, 12), on_slurm(3, 14)], None),  # all in Slurm, or all in jobtpu
    ([1], [1], [on_slurm(1, 12)], ("m", "afterok:12")),  # --after wins
    # Those already ended as jobtpu's rule lets it go are not waited for in Slurm.
    ([1, 2], [3], [ended(1, Status.FINISHED), on_slurm(2, 13), ended(3, Status.FAILED)], ("m", "afterok:13")),
    ([1], [], [ended(1, Status.FINISHED)], None),  # nothing left to wait for: dispatched as any job
    ([1], [], [on_slurm(1, None)], None),  # not handed yet (no Slurm id)
    ([1], [], [on_slurm(1, 12, status=Status.LAUNCHING)], None),
    ([1], [], [on_slurm(1, 12, status=Status.KILLING)], None),
    ([1], [], [queued(1)], None),
    ([1, 2], [], [on_slurm(1, 12), on_slurm(2, 13, machine="m2")], None),  # two clusters
    ([1], [], [on_slurm(1, 12, machine="box")], None),  # an ssh machine: jobtpu waits
])
def test_an_after_job_is_handed_to_slurm_when_its_dependencies_run_on_one_cluster(
        after: list[int], after_any: list[int], deps: list[Job], handed: tuple[str, str] | None) -> None:
    job = queued(9, after=after, after_any=after_any)
    assert handover(job, {d.id: d for d in deps}, two_clusters()) == handed


@pytest.mark.parametrize(("deps", "waiting", "holds"), [
    ([on_slurm(1, 12)], "Dependency", True),
    ([on_slurm(1, 13)], "Dependency", False),  # resumed as a new Slurm job: handed back
    ([queued(1)], "Dependency", False),  # requeued in jobtpu, no Slurm id yet
    ([ended(1, Status.FINISHED)], "Dependency", True),  # Slurm lets it go soon
    ([ended(1, Status.FINISHED)], "DependencyNeverSatisfied", False),  # finished as another Slurm job
    ([on_slurm(1, 12)], "DependencyNeverSatisfied", False),
    ([on_slurm(1, 12, status=Status.KILLING)], "Dependency", True),  # its attempt ends: Slurm judges that end
    ([on_slurm(1, 13, status=Status.KILLING)], "Dependency", False),
])
def test_a_dependent_pending_in_slurm_stays_only_while_its_dependencies_are_what_it_was_handed_after(
        deps: list[Job], waiting: str, holds: bool) -> None:
    job = queued(9, after=[1])
    assert still_holds(job, "afterok:12", waiting, {d.id: d for d in deps}, two_clusters()) is holds


def test_an_after_job_goes_to_its_dependencies_cluster_with_their_ids_and_is_judged_there() -> None:
    dep = on_slurm(1, 12)
    job = queued(2, after=[1])
    plan = decide([dep, job], two_clusters(), Observation(now=NOW, machines={"m": seen("m", ws(dep, 0)).peek("m")}))
    assert [(launch.job, launch.machine) for launch in launches(plan)] == [(2, "m")]
    assert job.current is not None and job.current.slurm_after == "afterok:12"
    assert "--dependency=afterok:12" in sbatch_options(cluster(), job, grace=5.0)
    # Its dependency failed: jobtpu's rule fails it, and its Slurm job is cancelled.
    dep.status, dep.reason = Status.FAILED, "exit 3"
    job.status, job.current.slurm_job = Status.RUNNING, 20  # its launch reported
    pending = msgspec.structs.replace(ws(job, 0), pid=None, waiting="DependencyNeverSatisfied")
    plan = decide([dep, job], two_clusters(), seen("m", pending))
    assert (job.status, job.ending and job.ending.reason) == (Status.KILLING, model.DEPENDENCY)
    assert [k.job for k in kills(plan)] == [2]


def test_a_submit_slurm_lost_in_a_controller_crash_is_handed_over_again_as_the_same_attempt() -> None:
    job = active()
    assert job.current is not None
    job.current.slurm_job = 12
    lost = msgspec.structs.replace(ws(job, 0, alive=False), pid=None, claimed=False, unsubmitted=True)
    plan = decide([job], fleet(cluster()), seen("m", lost))
    # Queued again and at once handed over anew: the same attempt, never taken for lost.
    assert (job.status, [a.n for a in job.attempts], job.current.slurm_job) == (Status.LAUNCHING, [0], None)
    assert [launch.job for launch in launches(plan)] == [job.id] and kills(plan) == []

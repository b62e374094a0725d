"""A Slurm cluster as a machine (kind `slurm`), end to end against real Slurm (tests/slurmcluster.py): a
job becomes one sbatch run through jobtpu's wrapper, passes read it with one squeue, a kill is scancel,
a requeue is a preemption the job resumes from, sbatch's refusal is one line (docs/reference/machines-json.md)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from jobtpu.decide.workers import LaunchOutcome, LaunchSpec, WorkerRef
from jobtpu.remote.scripts import parse_launch
from jobtpu.slurm.scripts import array_launch_script
from tests import helpers
from tests.helpers import run
from tests.slurmcluster import SlurmCluster, slurm_cluster  # noqa: F401  # the fixture
from tests.sshfleet import FleetMachine, SshFleet

DEADLINE = 60.0
submit = partial(helpers.submit, in_process=True)
manage = partial(helpers.run_pass, in_process=True)
manage_until = partial(helpers.passes_until, timeout=DEADLINE, in_process=True)
WAIT_RELEASE = 'while [ ! -e "$HOME/release-$JOBTPU_JOB_ID" ]; do sleep 0.1; done'


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, ssh_fleet: SshFleet) -> Iterator[tuple[SlurmCluster, SshFleet]]:  # noqa: F811
    """The cluster, and an ssh fleet whose hosts' sessions find it (their login host is this machine);
    the fleet's jobs are cancelled before its accounts go."""
    ssh_fleet.extra_conf = f"SetEnv SLURM_CONF={slurm_cluster.conf}\n"
    yield slurm_cluster, ssh_fleet
    for machine in ssh_fleet.machines:
        slurm_cluster.cancel_all(machine.user)


def slurm_home(tmp_path: Path, fleet: SshFleet, **keys: Any) -> tuple[Path, FleetMachine]:
    fm = fleet.add_machine("hpc")
    home = tmp_path / "home"
    home.mkdir()
    entry = {"kind": "slurm", "host": fm.hosts[0].address(), "user": fm.user, "identity_file": str(fleet.identity),
             "connect_timeout": 3, "resources": {"gpu": 2}, **keys}
    (home / "machines.json").write_text(json.dumps({"machines": {"hpc": entry}}))
    src = tmp_path / "code"
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    return home, fm


def attempts(home: Path, job: int) -> list[dict[str, Any]]:
    state = json.loads((home / "state.json").read_text())
    return list(next(j for j in state["jobs"] if j["id"] == job)["attempts"])


def log(home: Path, job: int, attempt: int = 0) -> str:
    path = home / "logs" / str(job) / f"{attempt}.0.log"
    return path.read_text() if path.exists() else ""


def meta(fm: FleetMachine, job: int, attempt: int, ext: str) -> Path:
    return fm.home / "jobtpu" / "meta" / str(job) / f"{attempt}.0.{ext}"


def test_a_job_is_one_sbatch_of_the_wrapper_and_keeps_its_exit_code(cluster: tuple[SlurmCluster, SshFleet],
                                                                   tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet, partition="debug")
    cmd = 'echo "resume=$JOBTPU_RESUME foo=$FOO slurm=$SLURM_JOB_ID"; python3 train.py; exit 3'
    failing = submit(home, tmp_path / "code", cmd, "--req", "gpu=1", "--timeout", "10m", "--env", "FOO=bar")
    fine = submit(home, tmp_path / "code", "echo fine")
    state = manage_until(home, lambda s: s[failing]["status"] == "failed" and s[fine]["status"] == "finished",
                         "both jobs to end")
    assert (state[failing]["reason"], state[failing]["exit_code"]) == ("exit 3", 3)
    slurm_id = attempts(home, failing)[0]["slurm_job"]
    assert f"resume=0 foo=bar slurm={slurm_id}\nhello\n" in log(home, failing)
    assert log(home, fine).endswith("fine\n")
    said = slurm.job(slurm_id)
    # One sbatch: the job's name is its marker, its --req and --timeout are Slurm's words, its code Slurm's too.
    assert said["JobName"].startswith("jobtpu-") and said["JobName"].endswith(f".{failing}.0.0")
    assert (said["Partition"], said["TimeLimit"], said["ExitCode"]) == ("debug", "00:11:00", "3:0")
    assert said["TresPerNode"] == "gres:gpu:1"
    assert attempts(home, fine)[0]["slurm_job"] not in (None, slurm_id)


def test_slurms_pending_reason_is_said_and_the_job_runs_once_resources_free(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    big = submit(home, tmp_path / "code", f"echo big; {WAIT_RELEASE}", "--req", "gpu=2")
    manage_until(home, lambda s: "big" in log(home, big), "the big job to run")
    # jobtpu hands it to Slurm at once, though the machine's two GPUs are taken: Slurm counts them.
    small = submit(home, tmp_path / "code", "echo small", "--req", "gpu=1")
    state = manage_until(home, lambda s: "Slurm holds it pending: Resources" in (s[small].get("last_line") or ""),
                         "the small job to pend in Slurm")
    assert [state[big]["status"], state[small]["status"]] == ["running", "running"]
    assert slurm.job(attempts(home, small)[0]["slurm_job"])["JobState"] == "PENDING"
    assert "last_alive" not in attempts(home, small)[0]  # goodput: queued in Slurm is no time it ran
    (fm.home / f"release-{big}").touch()
    state = manage_until(home, lambda s: s[small]["status"] == "finished", "the small job to run")
    assert state[big]["status"] == "finished" and log(home, small).endswith("small\n")


def test_a_requeue_is_a_preemption_and_the_next_attempt_resumes(cluster: tuple[SlurmCluster, SshFleet],
                                                                tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    cmd = f'echo "resume=$JOBTPU_RESUME"; [ "$JOBTPU_RESUME" = 1 ] || {{ {WAIT_RELEASE}; }}'
    job = submit(home, tmp_path / "code", cmd)
    manage_until(home, lambda s: "resume=0" in log(home, job), "the first attempt to run")
    first = attempts(home, job)[0]["slurm_job"]
    assert slurm.run("scontrol", "requeue", str(first)).returncode == 0
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to resume and finish")
    assert [(a["n"], a["outcome"]) for a in attempts(home, job)] == [(0, "preempted"), (1, "finished")]
    assert "resume=1" in log(home, job, 1)
    # The requeued Slurm job never ran the command again: jobtpu cancelled it, its next attempt is a new one.
    assert slurm.wait_state(first, "CANCELLED") == "CANCELLED"
    assert attempts(home, job)[1]["slurm_job"] != first
    assert log(home, job, 0).count("resume=0") == 1


def test_kill_is_scancel(cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    job = submit(home, tmp_path / "code", f"echo started; {WAIT_RELEASE}")
    manage_until(home, lambda s: "started" in log(home, job), "the job to run")
    slurm_id = attempts(home, job)[0]["slurm_job"]
    run(home, "kill", str(job), in_process=True)
    assert helpers.status(home)[job]["status"] == "killed"
    # TERM first (the batch script ends: FAILED), the cancel when it does not (CANCELLED): it runs no more.
    assert slurm.job(slurm_id)["JobState"] in ("FAILED", "CANCELLED")
    left = [ln for ln in slurm.run("ps", "-eo", "user:32=,args=").stdout.splitlines() if ln.startswith(fm.user)]
    assert not [ln for ln in left if "sshd" not in ln and "<defunct>" not in ln], left


def test_exec_and_ssh_of_a_job_reach_its_node_through_the_login_host(cluster: tuple[SlurmCluster, SshFleet],
                                                                      tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    job = submit(home, tmp_path / "code", f"echo started; {WAIT_RELEASE}")
    manage_until(home, lambda s: "started" in log(home, job), "the job to run")
    slurm_id = attempts(home, job)[0]["slurm_job"]
    show = 'echo "job=$SLURM_JOB_ID step=$SLURM_STEP_ID in=$(pwd -P)"'
    # A step of the job's allocation (srun at the login host), in the job's folder on the shared filesystem.
    code, out, err = helpers.cli(home, "exec", str(job), "--", show)
    assert (code, out) == (0, f"[0] job={slurm_id} step=0 in={fm.home}/jobtpu/jobs/{job}\n"), err
    done = helpers.jobtpu(home, "ssh", str(job), "--", show, check=False)
    assert (done.returncode, done.stdout) == (0, f"job={slurm_id} step=1 in={fm.home}/jobtpu/jobs/{job}\n"), done
    # Without a command: an interactive shell in a step of the job, over ssh -t to the login host and
    # srun --pty there, on the terminal `script` gives.
    shell = subprocess.run(["script", "-qec", shlex.join([*helpers.JOBTPU, "--home", str(home), "ssh", str(job)]),
                            "/dev/null"], input='echo "in=$SLURM_JOB_ID.$SLURM_STEP_ID:$(pwd -P)"\nexit 5\n',
                           capture_output=True, text=True, timeout=120, env={**os.environ, "JOBTPU_USER": "tester"})
    assert shell.returncode == 5 and f"in={slurm_id}.2:{fm.home}/jobtpu/jobs/{job}" in shell.stdout, shell
    (fm.home / f"release-{job}").touch()


def test_what_sbatch_refuses_is_one_line_and_nothing_is_left(cluster: tuple[SlurmCluster, SshFleet],
                                                            tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet, partition="nope")
    job = submit(home, tmp_path / "code", "echo never")
    state = manage_until(home, lambda s: s[job]["status"] == "failed", "the launch to fail")
    assert state[job]["reason"] == "launch_failed"
    line = state[job]["last_line"]
    assert "\n" not in line and "invalid partition specified: nope" in line, line
    # Nothing half-made: no environment file, batch script, Slurm job id or claim is left.
    assert [p for p in ("env", "sbatch", "slurm", "claim") if meta(fm, job, 0, p).exists()] == []
    assert slurm.run("squeue", "--noheader", "--format=%i").stdout.strip() == ""


def test_a_pass_while_slurmctld_restarts_loses_nothing(cluster: tuple[SlurmCluster, SshFleet],
                                                      tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    job = submit(home, tmp_path / "code", f"echo started; {WAIT_RELEASE}; echo done")
    manage_until(home, lambda s: "started" in log(home, job), "the job to run")
    slurm.stop_controller()
    try:
        manage(home)
        state = helpers.status(home)
        assert (state[job]["status"], state[job]["reason"]) == ("running", "unreachable")
        (fm.home / f"release-{job}").touch()  # it ends while Slurm's controller is away
    finally:
        slurm.start_controller()
    state = manage_until(home, lambda s: s[job]["status"] == "finished", "the job to finish")
    assert log(home, job).endswith("done\n") and len(attempts(home, job)) == 1


def test_the_timeout_is_kept_on_the_node_and_fetch_reads_the_shared_folder(cluster: tuple[SlurmCluster, SshFleet],
                                                                          tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    job = submit(home, tmp_path / "code", f"echo out > result.txt; echo started; {WAIT_RELEASE}", "--timeout", "3s")
    state = manage_until(home, lambda s: s[job]["status"] == "failed", "the job to time out")
    assert state[job]["reason"] == "timeout" and "started" in log(home, job)
    slurm_id = attempts(home, job)[0]["slurm_job"]
    assert slurm.job(slurm_id)["TimeLimit"] == "00:01:00"  # Slurm's backstop: 3 s, the grace and 30 s, in minutes
    run(home, "fetch", str(job), "--to", str(tmp_path / "got"), in_process=True)
    assert (tmp_path / "got" / "result.txt").read_text() == "out\n"


def test_doctor_asks_slurm_at_the_login_host_and_names_a_wrong_partition(cluster: tuple[SlurmCluster, SshFleet],
                                                                          tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet, partition="nope")
    code, out, err = helpers.cli(home, "doctor", "hpc", "--fix")  # --fix makes the root folder
    said = out + err
    assert code != 0 and "problem: partition nope is not one of the cluster's (debug)" in said, said
    (home / "machines.json").write_text((home / "machines.json").read_text().replace('"nope"', '"debug"'))
    code, out, err = helpers.cli(home, "doctor", "hpc")
    assert code == 0 and "ok: Slurm answers; partitions debug" in out + err, out + err


def test_a_kill_while_slurmctld_is_away_is_never_taken_for_done(cluster: tuple[SlurmCluster, SshFleet],
                                                                tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    job = submit(home, tmp_path / "code", f"echo started; {WAIT_RELEASE}")
    manage_until(home, lambda s: "started" in log(home, job), "the job to run")
    slurm_id = attempts(home, job)[0]["slurm_job"]
    slurm.stop_controller()
    try:
        helpers.cli(home, "kill", str(job))
        assert helpers.status(home)[job]["status"] == "killing"  # Slurm could not say it ended
    finally:
        slurm.start_controller()
    manage_until(home, lambda s: s[job]["status"] == "killed", "a pass to end the kill")
    assert slurm.job(slurm_id)["JobState"] in ("FAILED", "CANCELLED")


def test_a_saved_result_comes_home_from_the_cluster(cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    from jobtpu.home.logfiles import read_result

    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    # jobtpu.save_result writes $JOBTPU_RESULT (docs/reference/job-environment.md); a job may write it itself.
    job = submit(home, tmp_path / "code", 'printf \'{"loss": 0.25, "on": "%s"}\' "$SLURM_JOB_ID" > "$JOBTPU_RESULT"')
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to finish")
    slurm_id = attempts(home, job)[0]["slurm_job"]
    assert read_result(home, job, 0) == {"value": {"loss": 0.25, "on": str(slurm_id)}}


def test_a_sweep_is_one_job_array_that_slurm_throttles(cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    ids = throttled_sweep(home, tmp_path, "a,b,c", show='echo "index=$JOBTPU_SWEEP_INDEX args=$*"')
    # jobtpu hands every member over at once; Slurm keeps --max-running as the array's %1.
    state = manage_until(home, lambda s: "index=0" in log(home, ids[0]) and all(
        "Slurm holds it pending: JobArrayTaskLimit" in (s[i].get("last_line") or "") for i in ids[1:]),
                         "one member to run and the others to wait for the array's throttle")
    members = [str(attempts(home, i)[0]["slurm_job"]) for i in ids]
    array = members[0].split("_")[0]
    assert members == [f"{array}_{n}" for n in range(3)]
    assert [state[i]["status"] for i in ids] == ["running"] * 3
    for i in ids:
        (fm.home / f"release-{i}").touch()
    manage_until(home, lambda s: all(s[i]["status"] == "finished" for i in ids), "the sweep to finish")
    # Each member ran its own values, read by its SLURM_ARRAY_TASK_ID.
    assert [log(home, i).splitlines()[0] for i in ids] == [f"index={n} args=--k={v}" for n, v in enumerate("abc")]


def test_a_requeued_array_member_resumes_alone(cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    (tmp_path / "code" / "run.sh").write_text(
        f'echo "resume=$JOBTPU_RESUME"; [ "$JOBTPU_RESUME" = 1 ] || {{ {WAIT_RELEASE}; }}\n')
    out = run(home, "submit", "--dir", str(tmp_path / "code"), "--cmd", "bash run.sh", "--sweep", "k=a,b",
              in_process=True)[0]
    ids = [int(n) for n in out.strip().split("-")]
    manage_until(home, lambda s: all("resume=0" in log(home, i) for i in ids), "both members to run")
    first, other = (str(attempts(home, i)[0]["slurm_job"]) for i in ids)
    assert (first.split("_")[1], other.split("_")[1]) == ("0", "1")  # members of one array
    assert slurm.run("scontrol", "requeue", first).returncode == 0
    state = manage_until(home, lambda s: s[ids[0]]["status"] == "finished", "the requeued member to resume")
    assert [(a["n"], a["outcome"]) for a in attempts(home, ids[0])] == [(0, "preempted"), (1, "finished")]
    assert "resume=1" in log(home, ids[0], 1)
    # The other member runs on, its one attempt and its Slurm job untouched.
    assert state[ids[1]]["status"] == "running" and len(attempts(home, ids[1])) == 1
    said = slurm.run("squeue", "--noheader", "--array", f"--jobs={other}", "--format=%T").stdout.strip()
    assert said == "RUNNING"
    (fm.home / f"release-{ids[1]}").touch()
    manage_until(home, lambda s: s[ids[1]]["status"] == "finished", "the other member to finish")


def throttled_sweep(home: Path, tmp_path: Path, values: str = "a,b",
                    show: str = 'echo "index=$JOBTPU_SWEEP_INDEX"') -> list[int]:
    """A sweep over `values` whose members run `show` (print their index), then wait for their release,
    one running at a time (--max-running 1): its job ids."""
    (tmp_path / "code" / "show.sh").write_text(f"{show}; {WAIT_RELEASE}\n")
    out = run(home, "submit", "--dir", str(tmp_path / "code"), "--cmd", "bash show.sh", "--sweep", f"k={values}",
              "--max-running", "1", in_process=True)[0]
    first, _, last = out.strip().partition("-")
    return list(range(int(first), int(last or first) + 1))


def wait_throttled(home: Path, ids: list[int]) -> None:
    manage_until(home, lambda s: "index=0" in log(home, ids[0]) and "JobArrayTaskLimit" in (s[ids[1]].get("last_line") or ""),
                 "the first member to run and the second to wait for the throttle")


def test_an_array_member_makes_its_folder_when_it_starts_and_says_why_it_cannot(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    ids = throttled_sweep(home, tmp_path)
    manage(home)  # one pass hands both over, each member's report naming its own job
    handed = [attempts(home, i)[0].get("slurm_job") for i in ids]
    assert handed == [f"{str(handed[0]).split('_')[0]}_{n}" for n in range(2)], handed
    wait_throttled(home, ids)
    # The handover made no folder: a member makes its own when Slurm starts it (docs/reference/machines-json.md §3.3.1).
    root = fm.home / "jobtpu"
    assert (root / "jobs" / str(ids[0])).is_dir() and not (root / "jobs" / str(ids[1])).exists()
    # The snapshot leaves the cluster before the second member starts: it cannot get its folder, and says so.
    for kept in (root / "archives").iterdir():
        if kept.is_dir():
            shutil.rmtree(kept)
        else:
            kept.unlink()
    (fm.home / f"release-{ids[0]}").touch()
    state = manage_until(home, lambda s: s[ids[1]]["status"] not in ("queued", "launching", "running"),
                         "the second member to end")
    assert state[ids[0]]["status"] == "finished"
    assert state[ids[1]]["status"] == "failed", state[ids[1]]
    said = state[ids[1]].get("last_line") or ""
    assert "could not be made" in said and "is missing on the cluster" in said, said
    assert "index=1" not in log(home, ids[1])


def finished_sweep(home: Path, tmp_path: Path, fm: FleetMachine) -> tuple[list[int], str]:
    """A sweep of two members of `true`, run to its end: their ids and the snapshot on the cluster, for
    a later attempt's handover run by hand."""
    out = run(home, "submit", "--dir", str(tmp_path / "code"), "--cmd", "true", "--sweep", "k=a,b", in_process=True)[0]
    ids = [int(n) for n in out.strip().split("-")]
    manage_until(home, lambda s: all(s[i]["status"] == "finished" for i in ids), "the sweep to finish")
    return ids, next(p.name for p in (fm.home / "jobtpu" / "archives").glob("*.tar.gz"))


def test_an_array_handover_cut_short_after_sbatch_is_found_again_and_never_submitted_twice(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    ids, archive = finished_sweep(home, tmp_path, fm)
    # A later attempt of each member, held by Slurm so no member starts and records its own id.
    specs = [LaunchSpec(WorkerRef(i, 5, 0), root="jobtpu", archive=archive, command="true", env={"K": "v"},
                        home_id="cut", grace=5.0, batch=("--hold",)) for i in ids]
    script = array_launch_script(specs, None)

    def handover() -> list[object]:
        done = subprocess.run(["runuser", "-u", fm.user, "--", "bash", "-c", 'cd && exec bash -s'], input=script,
                              env=slurm.env(), capture_output=True, text=True, timeout=60, check=True)
        said = parse_launch(done.stdout)
        assert [said[s.ref].outcome for s in specs] == [LaunchOutcome.OK] * 2, done.stdout
        return [said[s.ref].slurm for s in specs]

    first = handover()
    # The handover wrote no file of any member's (each writes its own when it starts): one table,
    # its batch script and the array's id record.
    assert not [p for i in ids for p in (fm.home / "jobtpu" / "meta" / str(i)).glob("5.*")], "a member's file made at the handover"
    tables = sorted((fm.home / "jobtpu" / "meta" / "arrays").glob("*.slurm"))
    handed = [t for t in tables if t.read_text().strip() == str(first[0]).split("_")[0]]
    assert len(handed) == 1, tables
    # The handover cut short after sbatch answered: its reports, and its array's id record, never written.
    handed[0].unlink()
    assert handover() == first  # found again by the array's name: the same Slurm jobs, no second array
    arrays = slurm.run("squeue", "--noheader", f"--user={fm.user}", "--format=%F %j").stdout.split()
    assert len({a for a in arrays if ".array." in a}) == 1, arrays
    assert handover() == first  # and again, with the other tables there


def handed(home: Path, job: int) -> dict[str, Any] | None:
    """The job's latest attempt, once it has a Slurm job id."""
    found = attempts(home, job)
    return found[-1] if found and found[-1].get("slurm_job") is not None else None


def test_an_after_job_on_the_same_cluster_is_handed_at_once_and_slurm_starts_it(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    dep = submit(home, tmp_path / "code", f"echo first; {WAIT_RELEASE}")
    manage_until(home, lambda s: "first" in log(home, dep), "the dependency to run")
    dep_id = str(attempts(home, dep)[0]["slurm_job"])
    after = submit(home, tmp_path / "code", "echo second", "--after", str(dep))
    manage(home)  # one pass hands it over, after its dependency's Slurm job
    attempt = handed(home, after)
    assert attempt is not None and attempt["slurm_after"] == f"afterok:{dep_id}"
    said = slurm.job(attempt["slurm_job"])
    assert (said["JobState"], said["Reason"]) == ("PENDING", "Dependency")
    assert said["Dependency"].startswith(f"afterok:{dep_id}")
    state = manage_until(home, lambda s: (s[after].get("last_line") or "") == f"waits for job {dep} (running)",
                         "jobtpu to say what it waits for")
    assert state[after]["status"] == "running"
    # No pass runs now: Slurm starts the dependent the moment its dependency ends.
    (fm.home / f"release-{dep}").touch()
    assert slurm.wait_state(attempt["slurm_job"], "COMPLETED") == "COMPLETED"
    state = manage_until(home, lambda s: s[after]["status"] == "finished", "both jobs to finish")
    assert state[dep]["status"] == "finished" and log(home, after).endswith("second\n")
    assert len(attempts(home, after)) == 1


def test_an_after_job_whose_dependency_fails_fails_by_jobtpus_rule_and_is_cancelled(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    # --rule pass: no attempt follows its running one, so an --after-any dependent may go to Slurm too.
    dep = submit(home, tmp_path / "code", f"echo first; {WAIT_RELEASE}; exit 3", "--rule", "pass")
    after = submit(home, tmp_path / "code", "echo never", "--after", str(dep))
    either = submit(home, tmp_path / "code", "echo anyway", "--after-any", str(dep))
    manage_until(home, lambda s: handed(home, after) is not None and handed(home, either) is not None,
                 "both dependents to be handed to Slurm")
    ok_id, any_id = (str((handed(home, j) or {})["slurm_job"]) for j in (after, either))
    assert (handed(home, either) or {})["slurm_after"].startswith("afterany:")
    (fm.home / f"release-{dep}").touch()
    state = manage_until(home, lambda s: s[after]["status"] == "failed" and s[either]["status"] == "finished",
                         "the --after job to fail and the --after-any one to run")
    assert (state[dep]["reason"], state[after]["reason"]) == ("exit 3", "dependency")
    assert state[after]["last_line"] == f"job {dep} it waited for (--after) ended failed (exit 3)"
    # Never left pending for ever in Slurm: jobtpu cancelled it; it never ran.
    assert slurm.wait_state(ok_id, "CANCELLED") == "CANCELLED" and "never" not in log(home, after)
    assert slurm.job(any_id)["JobState"] == "COMPLETED" and log(home, either).endswith("anyway\n")


def test_a_dependency_resumed_as_a_new_slurm_job_hands_its_dependent_back_then_after_it_again(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    dep = submit(home, tmp_path / "code", f'echo "resume=$JOBTPU_RESUME"; [ "$JOBTPU_RESUME" = 1 ] || {{ {WAIT_RELEASE}; }}')
    manage_until(home, lambda s: "resume=0" in log(home, dep), "the dependency to run")
    after = submit(home, tmp_path / "code", "echo second", "--after", str(dep))
    # Slurm's afterany would start this one when the requeued Slurm job ends, while the job runs again:
    # under the cluster's default rule (pre) another attempt may follow, so it waits in jobtpu.
    either = submit(home, tmp_path / "code", "echo any", "--after-any", str(dep))
    state = manage_until(home, lambda s: handed(home, after) is not None, "the dependent to be handed to Slurm")
    assert state[either]["status"] == "queued" and attempts(home, either) == []
    first_after = str((handed(home, after) or {})["slurm_job"])
    assert slurm.run("scontrol", "requeue", str(attempts(home, dep)[0]["slurm_job"])).returncode == 0
    state = manage_until(home, lambda s: s[after]["status"] == "finished" and s[either]["status"] == "finished",
                         "all three jobs to finish")
    assert state[dep]["status"] == "finished" and log(home, after, 1).endswith("second\n")
    assert len(attempts(home, either)) == 1 and log(home, either).endswith("any\n")
    assert attempts(home, either)[0]["started"] >= attempts(home, dep)[-1]["ended"]
    # Its first Slurm job waited on the requeued one: cancelled unrun, the job waited in jobtpu, then went
    # to Slurm after the dependency's new Slurm job.
    dep_new = str(attempts(home, dep)[1]["slurm_job"])
    assert [(a["n"], a["outcome"]) for a in attempts(home, after)] == [(0, "dependency"), (1, "finished")]
    assert attempts(home, after)[1].get("slurm_after") in (f"afterok:{dep_new}", None)
    assert slurm.job(first_after)["JobState"] == "CANCELLED"


def test_slurmctld_killed_while_a_pass_hands_jobs_over_loses_nothing(cluster: tuple[SlurmCluster, SshFleet],
                                                                     tmp_path: Path) -> None:
    import os
    import subprocess

    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    jobs = [submit(home, tmp_path / "code", f"echo ran {n}") for n in range(6)]
    # One pass hands the six over, in its own process; the moment Slurm took the first (its id is on the
    # shared filesystem), the controller crashes.
    env = {**os.environ, "JOBTPU_USER": "tester"}
    proc = subprocess.Popen([*helpers.JOBTPU, "--home", str(home), "manage"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        helpers.wait_for(lambda: any(meta(fm, j, 0, "slurm").exists() for j in jobs), timeout=DEADLINE,
                         interval=0.01, what="Slurm to take a first job")
        slurm.kill_controller()
        _, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        slurm.start_controller()
    try:
        state = manage_until(home, lambda s: all(s[j]["status"] == "finished" for j in jobs), "every job to finish")
    except AssertionError as e:  # what jobtpu and Slurm each said, and the attempts' files on the cluster
        said = slurm.run("squeue", "--noheader", "--states=all", "--format=%j|%i|%T|%r").stdout
        files = [sorted(p.name for p in (fm.home / "jobtpu" / "meta" / str(j)).iterdir()) for j in jobs]
        raise AssertionError(f"{e}: {[attempts(home, j) for j in jobs]}; Slurm: {said}; files: {files}") from None
    # None lost, none run twice: one attempt each, its log once, one Slurm job of its name, the one jobtpu recorded.
    assert [len(attempts(home, j)) for j in jobs] == [1] * 6, [state[j].get("last_line") for j in jobs]
    assert [log(home, j).count(f"ran {n}\n") for n, j in enumerate(jobs)] == [1] * 6
    ours = f"jobtpu-{(home / 'home_id').read_text().strip()}."
    said = slurm.run("squeue", "--noheader", "--states=all", "--format=%j|%i|%T").stdout.split()
    by_name: dict[str, list[tuple[str, str]]] = {}
    for line in said:
        name, slurm_id, slurm_state = line.split("|")
        if name.startswith(ours):
            by_name.setdefault(name.rsplit(".", 3)[1], []).append((slurm_id, slurm_state))
    assert {int(j): found for j, found in by_name.items()} == {
        j: [(str(attempts(home, j)[0]["slurm_job"]), "COMPLETED")] for j in jobs}


def test_a_member_slurm_holds_pending_is_probed_and_killed_by_the_homes_id(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    ids = throttled_sweep(home, tmp_path, "a,b,c", show='echo "index=$JOBTPU_SWEEP_INDEX" > out.txt; cat out.txt')
    # The pending members have no file of their own yet (docs/reference/machines-json.md §3.3.1): the
    # probe asks Slurm by the id the home has, and they wait, never taken for lost.
    manage_until(home, lambda s: "index=0" in log(home, ids[0]) and all(
        "JobArrayTaskLimit" in (s[i].get("last_line") or "") for i in ids[1:]), "the throttled members to wait")
    for _ in range(2):
        manage(home)
    state = helpers.status(home)
    assert [state[i]["status"] for i in ids] == ["running"] * 3
    assert not (fm.home / "jobtpu" / "meta" / str(ids[1])).exists()
    pending = str(attempts(home, ids[1])[0]["slurm_job"])
    # A kill of a member Slurm still holds pending cancels it in Slurm.
    run(home, "kill", str(ids[1]), in_process=True)
    assert helpers.status(home)[ids[1]]["status"] == "killed"
    said = slurm.run("squeue", "--noheader", "--states=all", "--array", f"--jobs={pending}", "--format=%T").stdout.strip()
    assert said in ("CANCELLED", ""), said
    # A running member: exec reaches its node in its folder, fetch and tail read the shared filesystem.
    code, said, err = helpers.cli(home, "exec", str(ids[0]), "--", "cat out.txt")
    assert (code, said) == (0, "[0] index=0\n"), err
    run(home, "fetch", str(ids[0]), "--to", str(tmp_path / "got"), in_process=True)
    assert (tmp_path / "got" / "out.txt").read_text() == "index=0\n"
    assert "index=0" in helpers.cli(home, "tail", str(ids[0]))[1]
    for i in ids:
        (fm.home / f"release-{i}").touch()
    state = manage_until(home, lambda s: s[ids[0]]["status"] == "finished" and s[ids[2]]["status"] == "finished",
                         "the other members to finish")
    assert state[ids[1]]["status"] == "killed" and not log(home, ids[1])


def test_an_array_handover_writes_no_members_file_but_a_secrets_env_file(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    ids, archive = finished_sweep(home, tmp_path, fm)
    # Held by Slurm until the handover's files are looked at; the second member's TOKEN is a secret.
    specs = [LaunchSpec(WorkerRef(i, 5, 0), root="jobtpu", archive=archive, command='echo "got=$K$TOKEN"',
                        env={"K": f"plain{i}", **({"TOKEN": "s3cr=t"} if n else {})}, secret=frozenset({"TOKEN"}),
                        literal=frozenset({"TOKEN"}), home_id="env", grace=5.0, batch=("--hold",))
                for n, i in enumerate(ids)]
    done = subprocess.run(["runuser", "-u", fm.user, "--", "bash", "-c", 'cd && exec bash -s'],
                          input=array_launch_script(specs, None), env=slurm.env(), capture_output=True, text=True,
                          timeout=60, check=True)
    said = parse_launch(done.stdout)
    assert [said[s.ref].outcome for s in specs] == [LaunchOutcome.OK] * 2, done.stdout
    # Only the secret's member has a file of its own (docs/reference/machines-json.md §3.3.1); the
    # other's environment is in the table, the login user's alone, and the secret never is.
    assert not list((fm.home / "jobtpu" / "meta" / str(ids[0])).glob("5.*"))
    assert [p.name for p in (fm.home / "jobtpu" / "meta" / str(ids[1])).glob("5.*")] == ["5.0.env"]
    table = next(p for p in (fm.home / "jobtpu" / "meta" / "arrays").iterdir()
                 if p.suffix == "" and f"plain{ids[0]}" in p.read_text())
    assert table.stat().st_mode & 0o777 == 0o600 and "s3cr=t" not in table.read_text()
    assert slurm.run("scontrol", "release", str(said[specs[0].ref].slurm).split("_")[0]).returncode == 0
    for i in ids:
        helpers.wait_for(lambda i=i: meta(fm, i, 5, "exit").exists(), timeout=DEADLINE, what=f"member {i} to end")
    # Each member's wrapper read its environment, and deleted the file, as on every machine.
    assert [meta(fm, i, 5, "log").read_text() for i in ids] == [f"got=plain{ids[0]}\n", f"got=plain{ids[1]}s3cr=t\n"]
    assert not [i for i in ids if meta(fm, i, 5, "env").exists()]


def test_a_member_whose_meta_folder_is_unsafe_refuses_to_run_and_says_why(
        cluster: tuple[SlurmCluster, SshFleet], tmp_path: Path) -> None:
    slurm, fleet = cluster
    home, fm = slurm_home(tmp_path, fleet)
    ids = throttled_sweep(home, tmp_path)
    wait_throttled(home, ids)
    # The second member's meta folder, made before it starts, writable by the group.
    folder = fm.home / "jobtpu" / "meta" / str(ids[1])
    folder.mkdir()
    shutil.chown(folder, fm.user, fm.user)
    folder.chmod(0o770)
    (fm.home / f"release-{ids[0]}").touch()
    state = manage_until(home, lambda s: s[ids[1]]["status"] not in ("queued", "launching", "running"),
                         "the second member to end")
    assert state[ids[1]]["status"] == "failed", state[ids[1]]
    said = state[ids[1]].get("last_line") or ""
    assert "is not a folder of this account's alone" in said and "the command was not started" in said, said
    assert not list(folder.iterdir())  # it wrote nothing there

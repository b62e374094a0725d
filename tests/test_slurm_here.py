"""A Slurm cluster reached on its login node itself (a slurm entry without `host`: no SSH at all), and
`jobtpu exec` and `jobtpu ssh` of a job that runs there, which reach the job's node through a step in
its allocation, at the login host (docs/reference/machines-json.md §3.3.1, commands.md §2.19, §2.20).
End to end against real Slurm (tests/slurmcluster.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import helpers
from tests.slurmcluster import SlurmCluster, slurm_cluster  # noqa: F401  # the fixture

DEADLINE = 60.0
submit = partial(helpers.submit, in_process=True)
manage_until = partial(helpers.passes_until, timeout=DEADLINE, in_process=True)
WAIT_RELEASE = 'while [ ! -e "$RELEASE" ]; do sleep 0.1; done'


@pytest.fixture
def here(slurm_cluster: SlurmCluster, tmp_path: Path,  # noqa: F811
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SlurmCluster, Path, Path]]:
    """A home whose Slurm cluster has no login host: this computer is its login node. Slurm's clients
    find the cluster by SLURM_CONF; an `ssh` and an `rsync` first on PATH record any call and fail.
    Yields the cluster, the home and the file the calls are recorded in."""
    calls = tmp_path / "ssh-calls"
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("ssh", "rsync"):
        (fake / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\necho "{tool} must not run" >&2\nexit 255\n')
        (fake / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    home = tmp_path / "home"
    home.mkdir()
    entry = {"kind": "slurm", "root": str(tmp_path / "cluster"), "resources": {"gpu": 2}}
    (home / "machines.json").write_text(json.dumps({"machines": {"hpc": entry}}))
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hello')\n")
    yield slurm_cluster, home, calls
    slurm_cluster.cancel_all("root")


def attempts(home: Path, job: int) -> list[dict[str, Any]]:
    state = json.loads((home / "state.json").read_text())
    return list(next(j for j in state["jobs"] if j["id"] == job)["attempts"])


def log(home: Path, job: int) -> str:
    path = home / "logs" / str(job) / "0.0.log"
    return path.read_text() if path.exists() else ""


def test_a_cluster_without_a_host_is_reached_here_with_no_ssh(here: tuple[SlurmCluster, Path, Path],
                                                               tmp_path: Path) -> None:
    slurm, home, calls = here
    job = submit(home, tmp_path / "code", 'echo "slurm=$SLURM_JOB_ID"; python3 train.py; exit 3', "--req", "gpu=1")
    state = manage_until(home, lambda s: s[job]["status"] == "failed", "the job to end")
    assert (state[job]["reason"], state[job]["exit_code"]) == ("exit 3", 3)
    slurm_id = attempts(home, job)[0]["slurm_job"]
    assert f"slurm={slurm_id}\nhello\n" in log(home, job)
    assert slurm.job(slurm_id)["ExitCode"] == "3:0"
    assert (tmp_path / "cluster" / "meta" / str(job) / "0.0.slurm").exists()  # the run root is the entry's
    assert not calls.exists(), calls.read_text()


def exec_job(home: Path, job: int | str, *words: str) -> tuple[int, str, str]:
    return helpers.cli(home, "exec", str(job), "--", *words)


SHOW = 'echo "job=$SLURM_JOB_ID step=$SLURM_STEP_ID task=${SLURM_ARRAY_TASK_ID:-} jobtpu=$JOBTPU_JOB_ID in=$(pwd -P)"'


def test_exec_and_ssh_of_a_job_reach_it_as_a_step_of_its_allocation(here: tuple[SlurmCluster, Path, Path],
                                                                    tmp_path: Path) -> None:
    slurm, home, calls = here
    job = submit(home, tmp_path / "code", f"echo started; {WAIT_RELEASE}", "--req", "gpu=1",
                 "--env", f"RELEASE={tmp_path}/release")
    manage_until(home, lambda s: "started" in log(home, job), "the job to run")
    slurm_id = attempts(home, job)[0]["slurm_job"]
    folder = tmp_path / "cluster" / "jobs" / str(job)
    code, out, err = exec_job(home, job, SHOW)
    # A step (numbered from 0) of the job's own allocation, in its folder, on its node.
    assert (code, out) == (0, f"[0] job={slurm_id} step=0 task= jobtpu={job} in={folder}\n"), err
    code, out, err = exec_job(home, job, "exit 7")
    assert code == 7, (out, err)
    done = helpers.jobtpu(home, "ssh", str(job), "--", SHOW.replace("echo", "echo ssh"), check=False)
    assert (done.returncode, done.stdout) == (0, f"ssh job={slurm_id} step=2 task= jobtpu={job} in={folder}\n"), done
    # Without a command: an interactive shell in the step, on a terminal (srun --pty; `script` gives one).
    shell = subprocess.run(["script", "-qec", shlex.join([*helpers.JOBTPU, "--home", str(home), "ssh", str(job)]),
                            "/dev/null"], input='echo "in=$SLURM_JOB_ID.$SLURM_STEP_ID:$(pwd -P)"\nexit 5\n',
                           capture_output=True, text=True, timeout=DEADLINE, env={**os.environ, "JOBTPU_USER": "tester"})
    assert shell.returncode == 5 and f"in={slurm_id}.3:{folder}" in shell.stdout, shell
    assert not calls.exists(), calls.read_text()
    (tmp_path / "release").touch()
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to end")
    code, out, err = exec_job(home, job, "true")
    assert code != 0 and err.startswith(f"jobtpu: error: job {job} has ended (finished)"), err


def test_exec_of_a_job_slurm_holds_pending_is_one_line(here: tuple[SlurmCluster, Path, Path], tmp_path: Path) -> None:
    slurm, home, calls = here
    env = ("--env", f"RELEASE={tmp_path}/release")
    big = submit(home, tmp_path / "code", f"echo big; {WAIT_RELEASE}", "--req", "gpu=2", *env)
    manage_until(home, lambda s: "big" in log(home, big), "the big job to run")
    small = submit(home, tmp_path / "code", "echo small", "--req", "gpu=1")
    manage_until(home, lambda s: "Slurm holds it pending" in (s[small].get("last_line") or ""), "the small one to pend")
    slurm_id = attempts(home, small)[0]["slurm_job"]
    code, out, err = exec_job(home, small, "echo never")
    line = err.splitlines()[0]
    assert (code, out) == (1, "") and line.startswith(f"jobtpu: error: job {small} (Slurm job {slurm_id}) is "
                                                      "pending in Slurm (") and line.endswith("): it runs on no node yet")
    assert line.split("(")[2].split(")")[0] in ("Resources", "Priority", "queued"), line
    (tmp_path / "release").touch()


def test_exec_of_an_array_member_reaches_that_member(here: tuple[SlurmCluster, Path, Path], tmp_path: Path) -> None:
    slurm, home, calls = here
    (tmp_path / "code" / "run.sh").write_text(f"echo started; {WAIT_RELEASE}\n")
    out = helpers.run(home, "submit", "--dir", str(tmp_path / "code"), "--cmd", "bash run.sh", "--sweep", "k=a,b",
                      "--env", f"RELEASE={tmp_path}/release", in_process=True)[0]
    ids = [int(n) for n in out.strip().split("-")]
    manage_until(home, lambda s: all("started" in log(home, i) for i in ids), "both members to run")
    member = str(attempts(home, ids[1])[0]["slurm_job"])
    assert member.endswith("_1")
    # Each member has a Slurm job id of its own (srun takes no <array id>_<index>): the step joins member 1's.
    real, other = (slurm.run("squeue", "--noheader", "--array", f"--jobs={m}", "--format=%A").stdout.strip()
                   for m in (member, member.replace("_1", "_0")))
    assert real != other
    code, out, err = exec_job(home, ids[1], SHOW)
    assert (code, out) == (0, f"[0] job={real} step=0 task= jobtpu={ids[1]} in={tmp_path}/cluster/jobs/{ids[1]}\n"), err
    (tmp_path / "release").touch()


def test_doctor_of_a_cluster_here_needs_no_rsync(here: tuple[SlurmCluster, Path, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is copied over SSH to a cluster whose login node is this computer: doctor does not ask
    for rsync on this machine (PATH here: every program of the system's but rsync)."""
    _, home, calls = here
    bare = tmp_path / "no-rsync"
    bare.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            if name != "rsync" and not (bare / name).exists():
                (bare / name).symlink_to(os.path.join(folder, name))
    monkeypatch.setenv("PATH", str(bare))
    code, out, err = helpers.cli(home, "doctor", "hpc")
    assert "rsync" not in out + err and "ok: Slurm answers" in out + err, out + err
    assert code == 0 and not calls.exists()

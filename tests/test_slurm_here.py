"""A Slurm cluster reached on its login node itself (a slurm entry without `host`: no SSH at all), and
`jobtpu exec` and `jobtpu ssh` of a job that runs there, which reach the job's node through a step in
its allocation, at the login host (docs/reference/machines-json.md §3.3.1, commands.md §2.19, §2.20).
End to end against real Slurm (tests/slurmcluster.py)."""

from __future__ import annotations

import json
import os
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
WAIT_RELEASE = 'while [ ! -e "$JOBTPU_RELEASE" ]; do sleep 0.1; done'


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

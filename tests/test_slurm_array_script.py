"""A sweep's handover script at a Slurm login host (jobtpu/remote/sh/slurm_array.sh) against stand-ins
for `sbatch` and `squeue` that answer as Slurm does, run by bash over a real run root: what it says and
leaves when the controller does not answer, how the files of arrays Slurm forgot go away, and what
a run Slurm requeued does, a member's or a lone job's (docs/reference/machines-json.md §3.3.1). End to end against real Slurm: tests/test_slurm.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from jobtpu.decide.workers import LaunchOutcome, LaunchSpec, WorkerRef
from jobtpu.remote.scripts import launch_script, parse_launch
from jobtpu.slurm.scripts import array_launch_script
from jobtpu.snapshot.archive import snapshot

pytestmark = pytest.mark.fast

AWAY = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"


def handover(tmp_path: Path, sbatch: str, squeue: str, command: str = "true",
             lone: bool = False) -> tuple[Path, dict[WorkerRef, LaunchOutcome], list[str]]:
    """One handover of a two-member sweep into tmp_path/root, `sbatch` and `squeue` the stand-ins' bodies
    (sh); what each member's report said, with its detail. `lone`: one job, handed over alone."""
    root, shim = tmp_path / "root", tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    for tool, body in (("sbatch", sbatch), ("squeue", squeue)):
        (shim / tool).write_text(f"#!/bin/sh\n{body}\n")
        (shim / tool).chmod(0o755)
    src = tmp_path / "code"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text("print('hi')\n")
    archive = snapshot(src, root / "archives").name
    specs = [LaunchSpec(WorkerRef(job, 0, 0), root=str(root), archive=archive, command=command, env={"K": "v"},
                        home_id="h", grace=5.0, batch=("--partition=debug",)) for job in ((1,) if lone else (1, 2))]
    script = launch_script(specs) if lone else array_launch_script(specs, None)  # a lone job: one sbatch
    done = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True,
                          check=True, env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
    said = parse_launch(done.stdout)
    return root, {s.ref: said[s.ref].outcome for s in specs}, [said[s.ref].detail or "" for s in specs]


def test_an_array_sbatch_without_an_answer_leaves_every_member_pending_and_its_table(tmp_path: Path) -> None:
    """The controller may have taken the array all the same: nothing fails, and the table stays for the
    next handover to find the array by its name before it submits any member again."""
    root, outcomes, _ = handover(tmp_path, f'echo "{AWAY}" >&2; exit 1', "exit 0")
    assert list(outcomes.values()) == [LaunchOutcome.PENDING] * 2
    tables = [p for p in (root / "meta" / "arrays").iterdir() if "." not in p.name]
    assert len(tables) == 1 and tables[0].read_text().count("\n") == 2
    # A refusal is no silence: the members fail with Slurm's words, and nothing is left behind.
    refused = tmp_path / "refused"
    refused.mkdir()
    root, outcomes, details = handover(refused, 'echo "sbatch: error: invalid partition specified: debug" >&2; exit 1',
                                       "exit 0")
    assert list(outcomes.values()) == [LaunchOutcome.FAIL] * 2 and "invalid partition" in details[0]
    assert not [p for p in (root / "meta" / "arrays").iterdir()]


def test_the_files_of_arrays_slurm_forgot_go_once_two_days_old(tmp_path: Path) -> None:
    """Tables pile up otherwise, each holding its members' environment. Kept: what Slurm still knows,
    under any home's name (a run root may be shared), and whatever is younger than two days."""
    arrays = tmp_path / "root" / "meta" / "arrays"
    arrays.mkdir(parents=True)
    old = time.time() - 3 * 86400
    files = {"AAAAAAAA": old, "AAAAAAAA.sbatch": old, "AAAAAAAA.slurm": old,  # forgotten: goes
             "BBBBBBBB": old, "BBBBBBBB.slurm": old,  # another home's array, still pending: stays
             "CCCCCCCC": time.time(),  # forgotten, but new: stays
             "7_1.log": old, "7_1.exit": old}  # a refused member's, long read: goes
    for name, when in files.items():
        (arrays / name).write_text("1 0 0\n")
        os.utime(arrays / name, (when, when))
    # An earlier table makes the handover ask Slurm for the home's arrays first.
    _, outcomes, _ = handover(tmp_path, 'echo "42"', 'echo "41 jobtpu-other.array.BBBBBBBB"')
    assert list(outcomes.values()) == [LaunchOutcome.OK] * 2
    left = sorted(p.name for p in arrays.iterdir() if p.name in files)
    assert left == ["BBBBBBBB", "BBBBBBBB.slurm", "CCCCCCCC"]


@pytest.mark.parametrize("lone", [False, True])
def test_a_run_slurm_requeued_does_nothing_and_ends_failed(tmp_path: Path, lone: bool) -> None:
    """A requeued run (`scontrol requeue`, a preemption) never runs the command again under its attempt,
    and exits 75, never 0: a job handed over after it with afterok must not start on a run that did no
    work (docs/reference/machines-json.md §3.3.1). The batch script sbatch was given, run as Slurm runs
    a member (or a lone job, `lone`): first as its first run, then as a requeued one."""
    ran = tmp_path / "ran"
    kept = tmp_path / "batch.sh"
    root, outcomes, _ = handover(tmp_path, f'for a; do :; done; cp "$a" {kept}; echo 77', "exit 0",
                                 command=f"echo run >> {ran}", lone=lone)
    assert list(outcomes.values()) == [LaunchOutcome.OK] * (1 if lone else 2)

    def member(restarts: int) -> int:
        array = {} if lone else {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "0"}
        env = {**os.environ, "SLURM_JOB_ID": "78", **array, "SLURM_RESTART_COUNT": str(restarts)}
        return subprocess.run(["bash", str(kept)], env=env, capture_output=True, text=True).returncode

    assert member(restarts=1) == 75 and not ran.exists()
    assert member(restarts=0) == 0 and ran.read_text() == "run\n"

"""What a Slurm probe says of each worker from Slurm's lines and the files at the login host, as a table:
jobtpu_slurm_report (jobtpu/remote/sh/slurm.sh), the one awk that does every worker's part of the probe,
run by each awk this machine has (a login host may have gawk, mawk or another) over real files
(docs/reference/machines-json.md §3.3.1). End to end: tests/test_slurm.py, tests/test_slurm_accounting.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobtpu.remote.scripts import call, render

pytestmark = pytest.mark.fast

AWKS = sorted({"awk", *(name for name in ("gawk", "mawk", "nawk", "original-awk") if shutil.which(name))})

# job: the files of its attempt 0, worker 0 (a dict is a folder) and the log offset already home.
FILES: dict[int, tuple[dict[str, Any], int]] = {
    1: ({"slurm": "101\n", "pid": "42\n", "log": "0123456789"}, 4),
    2: ({"slurm": "102\n", "claim": {}}, 0),
    3: ({"slurm": "103\n"}, 0),
    4: ({"slurm": "104\n", "pid": "44\n", "exit": "3\n", "log": "out\n", "result": '{"a": 1}'}, 0),
    5: ({"slurm": "105\n", "timedout": ""}, 0),
    6: ({"slurm": "106\n"}, 0),
    7: ({"slurm": "107_3\n"}, 0),
    8: ({"slurm": "108\n"}, 0),
    9: ({"slurm": "109\n", "pid": "x1\n", "exit": "3 4\n"}, 0),
    10: ({}, 0),
    11: ({}, 0),  # an array member Slurm holds pending: no record yet, the home's id (IDS)
    12: ({}, 0),  # a member that refused to run: its reason beside its array's table
    13: ({"slurm": "113_1\n"}, 0),  # its own record wins over the home's id
    14: ({"slurm": "114\n", "claim": {}}, 0),  # Slurm gave its id to another job: never ran, handed over again
    15: ({"slurm": "115\n"}, 0),  # neither squeue nor sacct knows it, and it never ran: handed over again
}
# The Slurm id the home has for a worker from its launch report (docs/reference/machines-json.md §3.3.1).
IDS = {11: "111_4", 12: "112_0", 13: "999_9"}
ARRAYS = {"112_0.log": "jobtpu: meta/12 is not a folder of this account's alone\n", "112_0.exit": "1\n"}
# squeue's and sacct's last column is the job's name: a lone job's is jobtpu-<home id>.<job>.<attempt>.<worker>,
# an array's jobtpu-<home id>.array.<table>.
SQUEUE = "\n".join(["101|RUNNING|None|0|jobtpu-h.1.0.0|", '102|PENDING|Bad "q"\\\tx|0|jobtpu-h.2.0.0|',
                    "103|PENDING|None|0|jobtpu-h.3.0.0|", "104|COMPLETED|None|0|jobtpu-h.4.0.0|",
                    "105|TIMEOUT|None|0|jobtpu-h.5.0.0|", "106|OUT_OF_MEMORY|None|0|jobtpu-h.6.0.0|",
                    "107_3|RUNNING|None|1|jobtpu-h.array.x|", "109|FAILED|None|0|jobtpu-h.9.0.0|",
                    "111_4|PENDING|JobArrayTaskLimit|0|jobtpu-h.array.y|", "112_0|FAILED|None|0|jobtpu-h.array.z|",
                    "113_1|RUNNING|None|0|jobtpu-h.array.w|", "999_9|PENDING|None|0|jobtpu-h.array.v|",
                    "114|RUNNING|None|0|jobtpu-h.99.0.0|"])
SACCT = "\n".join(["108|FAILED|0:9|jobtpu-h.8.0.0", "105|TIMEOUT|0:0|jobtpu-h.5.0.0",
                   "106|CANCELLED by 0|0:15|jobtpu-h.6.0.0", "104|FAILED|2:0|jobtpu-h.4.0.0"])
# job: pid, alive, exit, size, claimed, timedout, preempted, waiting
SAID = {
    1: (42, True, None, 10, False, False, False, ""),
    2: (None, True, None, 0, True, False, False, 'Bad "q"\\\tx'),
    3: (None, True, None, 0, False, False, False, "queued"),
    4: (44, False, 3, 4, False, False, False, ""),
    5: (None, False, None, 0, False, True, False, ""),
    6: (None, False, 137, 0, False, False, False, ""),
    7: (None, True, None, 0, False, False, True, ""),
    9: (None, False, None, 0, False, False, False, ""),
    10: (None, False, None, 0, False, False, False, ""),
    11: (None, True, None, 0, False, False, False, "JobArrayTaskLimit"),
    12: (None, False, 1, len(ARRAYS["112_0.log"]), False, False, False, ""),
    13: (None, True, None, 0, False, False, False, ""),
    14: (None, False, None, 0, False, False, False, ""),
}
# From sacct's lines: 108 (squeue forgot it) FAILED by a KILL; 106 CANCELLED: ended, no code.
SAID_ACCT = {8: (None, False, 137, 0, False, False, False, ""), 6: (None, False, None, 0, False, False, False, ""),
             15: (None, False, None, 0, False, False, False, "")}


def report(tmp_path: Path, awk: str, slurm: str, acct: str, jobs: list[int]) -> list[str]:
    root = tmp_path / "root"
    for job, (files, _) in FILES.items():
        folder = root / "meta" / str(job)
        folder.mkdir(parents=True, exist_ok=True)
        for ext, text in files.items():
            path = folder / f"0.0.{ext}"
            if isinstance(text, dict):
                path.mkdir(exist_ok=True)
            else:
                path.write_text(text)
    (root / "meta" / "arrays").mkdir(exist_ok=True)
    for name, text in ARRAYS.items():
        (root / "meta" / "arrays" / name).write_text(text)
    shim = tmp_path / f"bin-{awk}"
    shim.mkdir(exist_ok=True)
    if not (shim / "awk").exists():
        (shim / "awk").symlink_to(shutil.which(awk) or awk)
    args = [n for job in jobs for n in (job, 0, 0, FILES[job][1], IDS.get(job, "-"))]
    script = render(("common.sh", "slurm.sh"), [call("jobtpu_slurm_report", str(root), slurm, acct, *args)])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                          env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "chunk": "1024"})
    assert done.stderr == ""
    return done.stdout.splitlines()


def workers(lines: list[str]) -> dict[int, tuple[Any, ...]]:
    found = [json.loads(line) for line in lines if line.startswith("{")]
    return {w["job"]: (w["pid"], w["alive"], w["exit"], w["size"], w["claimed"], w["timedout"], w["preempted"],
                       w["waiting"]) for w in found}


def unsubmitted(lines: list[str]) -> list[int]:
    """The workers whose Slurm job id names no job of theirs any more and that never ran: the
    controller lost their submit (a crash), and the pass hands them over again."""
    return [w["job"] for w in map(json.loads, (ln for ln in lines if ln.startswith("{"))) if w["unsubmitted"]]


@pytest.mark.parametrize("awk", AWKS)
def test_each_worker_from_squeue_and_its_files(tmp_path: Path, awk: str) -> None:
    lines = report(tmp_path, awk, SQUEUE, "", sorted(set(FILES) - {15}))
    assert workers(lines) == SAID
    assert unsubmitted(lines) == [14]
    # The reports that carry bytes are the shell's: what each needs, after every worker's line; a
    # worker whose job squeue forgot without an exit is left for sacct.
    assert [ln for ln in lines if not ln.startswith("{")] == [
        "=log 1 0 0 4 0", "=log 4 0 0 0 0", "=result 4 0 0 0 8", f"=log 12 0 0 0 0 {tmp_path}/root/meta/arrays/112_0",
        "=unsub 14 0 0", "=lost 8 0 0 0 108"]
    exited = json.loads(next(ln for ln in lines if '"job":4,' in ln))
    assert exited["at"] == pytest.approx((tmp_path / "root/meta/4/0.0.exit").stat().st_mtime, abs=1e-3)


@pytest.mark.parametrize("awk", AWKS)
def test_what_sacct_says_of_forgotten_jobs(tmp_path: Path, awk: str) -> None:
    lines = report(tmp_path, awk, SACCT, "acct", [8, 6, 15])
    assert workers(lines) == SAID_ACCT and unsubmitted(lines) == [15]
    assert [ln for ln in lines if not ln.startswith("{")] == ["=unsub 15 0 0"]


def test_a_probe_of_more_jobs_than_one_command_line_holds_still_reads_every_workers_files(tmp_path: Path) -> None:
    """The files of every job's folder are listed by find; one find for all of them outgrew the kernel's
    limit on a command line (a quarter of the stack limit, at least 128 KiB; about 50,000 folders at
    the usual 8 MiB) and said nothing, so every worker looked as if it had no pid. The stack limit is
    lowered here so that 4,000 folders cross it."""
    root = tmp_path / "root"
    jobs = range(1, 4001)
    for job in jobs:
        folder = root / "meta" / str(job)
        folder.mkdir(parents=True)
        (folder / "0.0.slurm").write_text(f"{job}\n")
        (folder / "0.0.pid").write_text(f"{job + 10}\n")
    (root / "meta" / "arrays").mkdir()
    squeue = "\n".join(f"{job}|RUNNING|None|0|jobtpu-h.{job}.0.0|" for job in jobs)
    args = [n for job in jobs for n in (job, 0, 0, 0, "-")]
    script = render(("common.sh", "slurm.sh"), [call("jobtpu_slurm_report", str(root), squeue, "", *args)])
    assert len(" ".join(str(root / "meta" / str(job)) for job in jobs)) > 128 * 1024
    done = subprocess.run(["bash"], input="ulimit -s 256\n" + script, capture_output=True, text=True, check=True,
                          env={**os.environ, "chunk": "1024"})  # on stdin, as a probe goes: no argument holds it
    said = workers(done.stdout.splitlines())
    assert said == {job: (job + 10, True, None, 0, False, False, False, "") for job in jobs}


def test_sacct_is_asked_of_forgotten_jobs_a_thousand_at_a_time(tmp_path: Path) -> None:
    """One argument holds at most 128 KiB: 2,500 ids go as three sacct calls, their lines kept whole."""
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "calls"
    (shim / "sacct").write_text(f'#!/bin/bash\nfor a; do case $a in --jobs=*) ids=${{a#--jobs=}};; esac; done\n'
                                f'echo "$ids" >> {calls}\nfor id in ${{ids//,/ }}; do echo "$id|COMPLETED|0:0|n"; done\n')
    (shim / "sacct").chmod(0o755)
    root = tmp_path / "root"
    args = [n for job in range(1, 2501) for n in (job, 0, 0, 0, str(job + 100))]
    script = render(("common.sh", "slurm.sh"), [call("jobtpu_slurm_acct", str(root), *args),
                                                'printf "%s\\n" "$jobtpu_acct"'])
    done = subprocess.run(["bash"], input=script, capture_output=True, text=True, check=True,
                          env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
    assert done.stdout.splitlines() == [f"{job + 100}|COMPLETED|0:0|n" for job in range(1, 2501)]
    assert [len(line.split(",")) for line in calls.read_text().splitlines()] == [1000, 1000, 500]

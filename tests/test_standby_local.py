"""The local machine is each box's own (docs/reference/home-files.md §1.7): a job a runner launched on
its box's local machine is never taken as lost, nor started again, by a runner on another box; it
waits, saying where, and a person's kill and rerun still work. Two boxes on one machine: each runner
has a home folder ($HOME) of its own and the local machine's root is `~/run`, so each box's local
machine has its own run root and a box's probe sees only its own jobs, as a second box's would."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtpu.decide.core import decide
from jobtpu.decide.observation import Observation
from jobtpu.schema.fleet import Fleet, Machine, MachineKind
from jobtpu.schema.state import Attempt, Job, Status
from tests.helpers import make_home, status, submit, wait_for
from tests.test_standby import EVENTUALLY, Runner, holder, run_cli, start

# ---- the rule, pure ------------------------------------------------------------------------------------

LOCAL = Machine(name="local", kind=MachineKind.LOCAL)


def job_on(box: str | None, status_: Status) -> Job:
    job = Job(id=1, user="u", cmd="train", archive="a", created=0.0, status=status_, attempt=1, machine="local",
              alloc={"slot": [0]})
    job.attempts.append(Attempt(n=1, machine="local", started=1.0, box=box))
    return job


@pytest.mark.parametrize(("box", "here", "was", "to", "reason", "says"), [
    ("boxA", "boxB", Status.RUNNING, Status.RUNNING, "unreachable", "on boxA's local machine, which this runner"),
    ("boxA", "boxB", Status.LAUNCHING, Status.LAUNCHING, None, "cannot reach"),  # never launched here
    ("boxA", "boxB", Status.KILLING, Status.KILLED, "killed", "were not stopped"),  # ends; its processes told
    ("boxA", "boxA", Status.RUNNING, Status.FAILED, "lost", ""),  # its own box: no process is a lost attempt
    (None, "boxB", Status.RUNNING, Status.FAILED, "lost", ""),  # launched before the home had a lease
])
def test_a_job_on_another_boxs_local_machine(box: str | None, here: str, was: Status, to: Status, reason: str | None,
                                             says: str) -> None:
    job = job_on(box, was)
    seen = Observation(now=10.0, box=here, boxes=True)
    seen.view("local").reachable = True  # probed: no worker of the job there
    plan = decide([job], Fleet(machines={"local": LOCAL}), seen)
    new = plan.latest(job)
    assert (new.status, new.reason) == (to, reason)
    assert says in new.last_line
    assert not any(getattr(a, "machine", None) == "local" and type(a).__name__ in ("Launch", "Kill")
                   for a in plan.actions), "nothing launched or stopped on another box's processes"


# ---- two boxes ------------------------------------------------------------------------------------------

@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    started: list[Runner] = []
    yield started
    for runner in started:
        runner.stop()


def starts_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def attempts(home: Path, job: int) -> list[dict[str, object]]:
    doc = json.loads((home / "state.json").read_text())
    return next(j["attempts"] for j in doc["jobs"] if j["id"] == job)


def test_a_local_job_of_a_box_that_went_away_waits_and_never_starts_twice(tmp_path: Path,
                                                                           runners: list[Runner]) -> None:
    # Each box's local machine keeps its job folders and pid records under its own $HOME.
    home = make_home(tmp_path, {"local": {"kind": "local", "root": "~/run", "resources": {"slot": 2}}})
    src = tmp_path / "src"
    src.mkdir()
    starts, release = tmp_path / "starts", tmp_path / "release"
    boxes = {name: tmp_path / name for name in ("boxA", "boxB")}
    for folder in boxes.values():
        folder.mkdir()
    a = start(runners, home, "boxA", tmp_path, env={"HOME": str(boxes["boxA"])})
    wait_for(lambda: holder(home) == (1, "boxA"), what="boxA to take the lease")
    job = submit(home, src, f'echo "$JOBTPU_JOB_ID $JOBTPU_ATTEMPT" >> {starts}; '
                            f'while [ ! -e {release} ]; do sleep 0.05; done', "--rule", "rerun")
    wait_for(lambda: status(home)[job]["status"] == "running" and starts_of(starts), timeout=EVENTUALLY,
             what="the job to run on boxA")
    assert attempts(home, job)[-1]["box"] == "boxA"
    pids = list((boxes["boxA"] / "run" / "meta" / str(job)).glob("*.pid"))
    assert pids, "boxA's run root holds the job's pid record"
    start(runners, home, "boxB", tmp_path, env={"HOME": str(boxes["boxB"])})
    wait_for(lambda: (home / "lease" / "seen.root@boxB").exists(), what="boxB to stand by")
    a.proc.send_signal(signal.SIGKILL)  # boxA's runner dies; its job's processes run on (their own session)
    a.proc.wait()
    wait_for(lambda: holder(home) == (2, "boxB"), timeout=EVENTUALLY, what="boxB to take over")

    # boxB's passes either wait on the job, or take it as lost and (its rule reruns a lost attempt) start
    # it again on boxB's local machine.
    def settled() -> bool:
        row = status(home)[job]
        return "cannot reach" in row["last_line"] or row["status"] != "running" or len(starts_of(starts)) > 1
    wait_for(settled, timeout=EVENTUALLY, what="boxB's pass to judge the job")
    assert starts_of(starts) == [f"{job} 0"], "the job started twice"
    row = status(home)[job]
    assert row["status"] == "running" and row["reason"] == "unreachable" and "on boxA's local machine, which this runner (boxB) cannot reach" in row["last_line"]

    # New jobs go to boxB's own local machine.
    other = submit(home, src, f'echo "$JOBTPU_JOB_ID $JOBTPU_ATTEMPT" >> {starts}')
    wait_for(lambda: status(home)[other]["status"] == "finished", timeout=EVENTUALLY, what="a new job to run on boxB")
    assert attempts(home, other)[-1]["box"] == "boxB"

    # A kill from a third box ends it; boxA's processes are not stopped from here, and the line says so.
    killed = run_cli(home, "kill", str(job))
    assert killed.returncode == 0, killed.stderr
    wait_for(lambda: status(home)[job]["status"] == "killed", timeout=EVENTUALLY, what="the kill to end the job")
    assert "its processes on boxA's local machine were not stopped" in status(home)[job]["last_line"]
    pid = int(pids[0].read_text().split()[0])
    assert os.path.exists(f"/proc/{pid}"), "the job's process on boxA was left to boxA"
    release.touch()  # boxA's copy ends

    # A rerun starts it again, on boxB's local machine.
    assert run_cli(home, "rerun", str(job)).returncode == 0
    wait_for(lambda: status(home)[job]["status"] == "finished", timeout=EVENTUALLY, what="the rerun to finish")
    assert sorted(starts_of(starts)) == sorted([f"{job} 0", f"{other} 0", f"{job} 1"])
    assert attempts(home, job)[-1]["box"] == "boxB"

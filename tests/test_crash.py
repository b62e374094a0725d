"""Crash safety: manage SIGKILLed at random moments, with submits running concurrently from several
processes, never loses a job and never starts one twice."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import JOBTPU, manage_until, status


@pytest.mark.starts_first  # long: handed out first under -n (tests/conftest.py)
def test_sigkill_manage_at_random_moments(tmp_path: Path) -> None:
    from tests.helpers import make_home

    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 6}}})
    ledger = tmp_path / "ledger.txt"
    src = tmp_path / "src"
    src.mkdir()
    (src / "job.sh").write_text(f'echo "$JOBTPU_JOB_ID" >> {ledger}\nsleep 0.$((RANDOM % 5))\n')
    env = {**os.environ, "JOBTPU_USER": "tester"}
    base = [*JOBTPU, "--home", str(home)]

    # Three processes submitting 6 jobs each, concurrently with the manager being shot.
    submitters = [subprocess.Popen(["bash", "-c", " ; ".join(
        f"{' '.join(base)} submit --dir {src} --cmd 'bash job.sh' --name s{k}-{i} > /dev/null" for i in range(6))],
        env=env) for k in range(3)]
    rng = random.Random(1234)
    kills = in_pass = 0  # in_pass: kills that landed while the pass held its lock (not during start-up)
    lock_fd = os.open(home / "manage.lock", os.O_RDWR | os.O_CREAT, 0o644)

    def pass_holds_lock() -> bool:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        return False

    round_no = 0
    # No clock bounds the loop: on a loaded machine it takes longer, not differently (the suite's
    # timeout catches a loop that never ends).
    while any(p.poll() is None for p in submitters) or kills < 15 or in_pass < 5:
        manager = subprocess.Popen([*base, "manage"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        round_no += 1
        if round_no % 2:
            time.sleep(rng.uniform(0.05, 0.6))  # anywhere: start-up, inside the pass, or after it
        else:
            # Aim inside the pass: a loaded machine spends most of a short-lived manage on start-up,
            # so purely random moments rarely land while the lock is held.
            aim = time.monotonic() + 10
            while manager.poll() is None and not pass_holds_lock() and time.monotonic() < aim:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.05))
        if manager.poll() is None:
            in_pass += pass_holds_lock()
            manager.send_signal(signal.SIGKILL)
            kills += 1
        manager.wait()
    os.close(lock_fd)
    assert all(p.wait() == 0 for p in submitters)

    jobs = status(home)
    assert len(jobs) == 18, "a submitted job was lost"
    final = manage_until(home, list(jobs), {"finished", "failed", "killed"}, timeout=120)
    assert {j["status"] for j in final.values()} == {"finished"}, {i: (j["status"], j["reason"]) for i, j in final.items()}
    runs = Counter(int(line) for line in ledger.read_text().split())
    assert runs == Counter({job_id: 1 for job_id in jobs}), f"jobs that ran other than once: {runs}"
    assert kills >= 15 and in_pass >= 5


def test_a_claim_left_by_a_pass_that_died_mid_launch_is_taken_over_once_stale(tmp_path: Path) -> None:
    from jobtpu.decide.workers import LaunchSpec, WorkerRef
    from jobtpu.remote.scripts import claim_stale_minutes, launch_script, parse_launch

    root = tmp_path / "root"
    (root / "jobs" / "7").mkdir(parents=True)  # unpacked before the pass died
    claim = root / "meta" / "7" / "0.0.claim"
    claim.mkdir(parents=True)
    (claim / "leftover").write_text("")  # whatever the dead launch left inside its claim
    ref = WorkerRef(7, 0, 0)
    script = launch_script([LaunchSpec(ref, str(root), "a.tar.gz", "echo started", {})])

    def launch() -> str:
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        return parse_launch(done.stdout)[ref].outcome

    assert launch() == "pending"  # a fresh claim: another launch may be under way
    old = time.time() - 60 * (claim_stale_minutes() + 1)
    os.utime(claim, (old, old))
    assert launch() == "ok"  # a stale claim is taken over and the job starts, once
    assert launch() == "ok"
    wait = time.monotonic() + 10
    while not (root / "meta" / "7" / "0.0.exit").exists():
        assert time.monotonic() < wait
        time.sleep(0.05)
    assert (root / "meta" / "7" / "0.0.log").read_text() == "started\n"


def test_a_setup_whose_process_died_is_started_again_not_awaited_for_ever(tmp_path: Path) -> None:
    from jobtpu.remote.scripts import setup_script
    from jobtpu.schema.worker_protocol import setup_outcome

    setup = tmp_path / "root" / "setup"
    setup.mkdir(parents=True)
    # The setup's leader died without an exit record; its pid now belongs to another live process.
    (setup / "inc.0.pid").write_text(f"{os.getpid()}\n")
    script = setup_script(str(tmp_path / "root"), "inc", 0, ["echo set up"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert setup_outcome(done.stdout) in ("done", "running"), done.stdout
    deadline = time.monotonic() + 10
    while not (setup / "inc.0.exit").exists():
        assert time.monotonic() < deadline, "the setup was never started again"
        time.sleep(0.05)
    assert (setup / "inc.0.log").read_text() == "set up\n"

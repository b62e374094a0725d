"""Telling is at least once across crashes (docs/design.md §3): passes run as processes and killed
with SIGKILL at random moments, one of them while another process holds events.jsonl's lock, then
passes to the end; every job that finished was told to a real webhook at least once, duplicates
carrying the same event id. Twenty rounds, each its own seed, so one run of this file does twenty."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from jobtpu.decide import events
from jobtpu.tell import eventlog
from jobtpu.tell.outbox import OUTBOX_FILE
from tests.helpers import JOBTPU, allow_private_webhooks, make_home, submit, wait_for
from tests.test_told import Hook

ROUNDS = 20
JOBS = 12  # a dozen quick jobs a round, four at a time: several passes both end and launch jobs
SLOTS = 4
KILLS = 8  # passes killed at a seeded random moment in each round
KILL_WITHIN = 0.8  # seconds: about what one pass takes here, so a kill may land at any of its steps


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # A pass killed mid-launch leaves a claim the next pass takes over once stale; the pass the test
    # kills while it holds the log's lock must still be waiting for it when killed.
    monkeypatch.setenv(timing.ENV, json.dumps({"claim_stale_minutes": 0.01, "lock_wait": 60}))
    monkeypatch.setenv("JOBTPU_USER", "tester")


def start_pass(home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*JOBTPU, "--home", str(home), "manage"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def kill(manager: subprocess.Popen[bytes]) -> None:
    if manager.poll() is None:
        manager.send_signal(signal.SIGKILL)
    manager.wait()


def state(home: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((home / "state.json").read_text())
    return doc


def kill_while_the_log_is_locked(home: Path, until_one: bool = True) -> None:
    """Hold events.jsonl's lock, run passes until one has saved its result with events to tell (it
    then waits for the lock), and kill it there; `until_one` False: one pass, caught there or not."""
    lock = os.open(home / f"{eventlog.EVENTS_FILE}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        def killed_after_its_save() -> bool:
            started = time.time()
            manager = start_pass(home)

            def saved() -> bool:
                last = state(home).get("last_pass") or {}
                return manager.poll() is not None or float(last.get("ended", 0)) > started
            wait_for(saved, timeout=60, interval=0.02, what="the pass to save its result")
            waiting = manager.poll() is None and bool(state(home).get("untold"))
            kill(manager)
            return waiting
        if until_one:
            wait_for(killed_after_its_save, timeout=120, interval=0.05, what="a pass waiting for the log's lock")
        else:
            killed_after_its_save()
    finally:
        os.close(lock)


def to_the_end(home: Path, jobs: list[int]) -> None:
    """Passes until every job ended and nothing is left to tell or deliver."""
    def done() -> bool:
        subprocess.run([*JOBTPU, "--home", str(home), "manage"], capture_output=True, check=True, timeout=120)
        doc = state(home)
        ended = {j["id"] for j in doc["jobs"] if j["status"] in ("finished", "failed", "killed")}
        return ended >= set(jobs) and not doc.get("untold") and not (home / OUTBOX_FILE).exists()
    wait_for(done, timeout=240, interval=0.1, what="every job to end and be told")


@pytest.mark.parametrize("seed", range(ROUNDS))
def test_every_finished_job_is_told_though_passes_are_killed_at_random(tmp_path: Path, hook: Hook, seed: int) -> None:
    home = make_home(tmp_path, slots=SLOTS, notify=[{"webhook": hook.url, "events": ["finished"]}])
    allow_private_webhooks(home)
    src = tmp_path / "src"
    src.mkdir()
    jobs = [submit(home, src, "true") for _ in range(JOBS)]
    rng = random.Random(seed)
    for round_no in range(KILLS):
        if round_no == 0:  # first, while every job is still to launch: there is news to tell, however slow the machine
            kill_while_the_log_is_locked(home)
        elif round_no == KILLS // 2:  # and again once jobs end, when this round's timing leaves news then
            kill_while_the_log_is_locked(home, until_one=False)
        manager = start_pass(home)
        with contextlib.suppress(subprocess.TimeoutExpired):  # the moment to kill it, not a wait for anything
            manager.wait(rng.uniform(0, KILL_WITHIN))
        kill(manager)
    to_the_end(home, jobs)
    finished = {j["id"] for j in state(home)["jobs"] if j["status"] == "finished"}
    assert finished, "no job finished"
    told: dict[int, set[str]] = {}
    for body in hook.bodies:
        event = body["event"]
        if event["kind"] == events.JOB_ENDED:
            told.setdefault(event["job"], set()).add(event["id"])
    assert sorted(finished - set(told)) == [], f"finished but never told (seed {seed})"
    # Told twice (a pass killed after a delivery, before the outbox was saved): the same event again.
    assert {job: ids for job, ids in told.items() if len(ids) > 1} == {}, f"seed {seed}"

"""Bench: a loop that reacts to a submit as it reacts to a job's end. With `manage --loop 5` already
running and idle, 60 jobs of `sleep 0.5` on the local machine's 2 slots, submitted one at a time (each
`jobtpu submit` a process of its own, the next typed as soon as the last returned) and as one sweep;
side by side with their floor measured in the same run: the same 60 sleeps, 2 at a time, started
directly (15 s and a little). A loop that waited out its interval after a submit would start the
first job up to 5 s late, and fall behind a person's submits.

Measured from the first submit to the last job's end as the home records it; also the time from the
first submit to the first job's start. Target: at most 1.5x the floor both ways.
Usage: python bench/loop_submit.py [--jobs 60] [--interval 5]"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from clirun import cli_env, jobtpu, run  # bench/clirun.py (benches run as scripts)

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.5
SLOTS, SECONDS = 2, 0.5
COMMAND = f"bash -c 'sleep {SECONDS}' job"


def floor(n_jobs: int) -> float:
    """The same sleeps, SLOTS at a time, each a process started directly: what no scheduler beats."""
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(SLOTS) as pool:
        list(pool.map(lambda _: subprocess.run(["bash", "-c", f"sleep {SECONDS}"], check=True), range(n_jobs)))
    return time.time() - start


def _jobs(home: Path) -> list[dict[str, Any]]:
    return list(json.loads((home / "state.json").read_text())["jobs"])


def _passed(home: Path) -> bool:
    try:
        return bool(json.loads((home / "state.json").read_text()).get("last_pass"))
    except (OSError, ValueError):
        return False


def one(tmp: Path, name: str, n_jobs: int, interval: float, env: dict[str, str]) -> tuple[float, float]:
    """(first submit → last end, first submit → first start) with the loop idle when the first comes."""
    home, src = tmp / ("home-" + name.replace(" ", "-")), tmp / "src"
    src.mkdir(exist_ok=True)
    run(jobtpu(home, "init"), env)
    doc = json.loads((home / "machines.json").read_text())
    doc["machines"] = {"local": {"kind": "local", "resources": {"slot": SLOTS}}}
    (home / "machines.json").write_text(json.dumps(doc))
    loop = subprocess.Popen(jobtpu(home, "manage", "--loop", str(interval)), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while not _passed(home):
            time.sleep(0.1)
        time.sleep(0.5)  # its first round is over: the loop waits out its interval now
        submit = jobtpu(home, "submit", "--dir", str(src), "--cmd", COMMAND)
        start = time.time()
        if name == "sweep":
            run([*submit, "--sweep", "i=" + ",".join(map(str, range(n_jobs)))], env)
        else:
            for _ in range(n_jobs):
                run(submit, env)
        while True:
            jobs = _jobs(home)
            if len(jobs) == n_jobs and all(j["status"] in ("finished", "failed", "killed") for j in jobs):
                break
            time.sleep(0.2)
    finally:
        os.killpg(loop.pid, signal.SIGTERM)  # TERM: a bench started in the background ignores INT
        loop.wait()
    assert all(j["status"] == "finished" for j in jobs), [j["status"] for j in jobs]
    attempts = [j["attempts"][-1] for j in jobs]
    return max(a["ended"] for a in attempts) - start, min(a["started"] for a in attempts) - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args()
    env = cli_env(REPO, JOBTPU_USER="alice")
    with tempfile.TemporaryDirectory() as tmp:
        measured = floor(args.jobs)
        took = {name: one(Path(tmp), name, args.jobs, args.interval, env) for name in ("one at a time", "sweep")}
    print(f"{args.jobs} x sleep {SECONDS} on {SLOTS} slots under manage --loop {args.interval:g}, "
          f"submitted while the loop is idle; floor (the sleeps run directly) {measured:.1f} s")
    for name, (total, first) in took.items():
        verdict = "ok" if total / measured <= TARGET else "OVER"
        print(f"  {name:14} {total:5.1f} s  {total / measured:.2f}x the floor (target <= {TARGET}x) {verdict}; "
              f"first start {first:.2f} s after the first submit")


if __name__ == "__main__":
    main()

"""Bench: a loop that reacts to an end at once. 60 jobs of `sleep 0.5` on the local machine's 2
slots under `manage --loop 5`: their floor is 15 s (30 rounds of two), and a loop that waited out its
interval after each end would take 150 s. Measured from the submit to the last job's end as the
home records it, side by side with the floor; also the same with `--loop 60`, which must not be
slower (the interval is for a quiet fleet).
Target: at most 2x the floor.
Usage: python bench/loop_reacts.py [--jobs 60] [--intervals 5 60]"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from clirun import cli_env, jobtpu, run  # bench/clirun.py (benches run as scripts)

REPO = Path(__file__).resolve().parent.parent
TARGET = 2.0
SLOTS, SECONDS = 2, 0.5


def one(tmp: Path, n_jobs: int, interval: float, env: dict[str, str]) -> float:
    home, src = tmp / f"home-{interval:g}", tmp / "src"
    src.mkdir(exist_ok=True)
    run(jobtpu(home, "init"), env)
    doc = json.loads((home / "machines.json").read_text())
    doc["machines"] = {"local": {"kind": "local", "resources": {"slot": SLOTS}}}
    (home / "machines.json").write_text(json.dumps(doc))
    start = time.time()
    run(jobtpu(home, "submit", "--dir", str(src), "--cmd", f"bash -c 'sleep {SECONDS}' job", "--sweep",
               "i=" + ",".join(map(str, range(n_jobs)))), env)
    loop = subprocess.Popen(jobtpu(home, "manage", "--loop", str(interval)), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while True:
            jobs = json.loads((home / "state.json").read_text())["jobs"]
            if all(j["status"] in ("finished", "failed", "killed") for j in jobs):
                break
            time.sleep(0.2)
    finally:
        os.killpg(loop.pid, signal.SIGINT)
        loop.wait()
    assert all(j["status"] == "finished" for j in jobs), [j["status"] for j in jobs]
    return max(j["attempts"][-1]["ended"] for j in jobs) - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--intervals", type=float, nargs="+", default=[5.0, 60.0])
    args = parser.parse_args()
    env = cli_env(REPO, JOBTPU_USER="alice")
    floor = args.jobs / SLOTS * SECONDS
    with tempfile.TemporaryDirectory() as tmp:
        for interval in args.intervals:
            took = one(Path(tmp), args.jobs, interval, env)
            verdict = "ok" if took / floor <= TARGET else "OVER"
            print(f"{args.jobs} x sleep {SECONDS} on {SLOTS} slots, manage --loop {interval:g}: {took:.1f} s; "
                  f"floor {floor:.0f} s; {took / floor:.2f}x (target <= {TARGET:.0f}x) {verdict}")


if __name__ == "__main__":
    main()

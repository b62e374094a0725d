"""Bench: `jobtpu status --json` with 10,000 jobs in state.json vs the floor of any listing that reads
the file (parse it, keep one user's jobs, print them) and a bare `python -c pass` start.

All run side by side in one run, alternating, and the medians are compared. Target: under 3x the floor.
Also checks that `status` and `--help` load neither paramiko nor google-cloud.
Usage: python bench/status_scale.py [--jobs 10000] [--rounds 15]"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobtpu.home.layout import Home  # noqa: E402
from jobtpu.home.store import Store  # noqa: E402
from jobtpu.schema.state import Attempt, Job, Status  # noqa: E402


def fake_jobs(n: int) -> list[Job]:
    jobs = []
    statuses = list(Status)
    for i in range(1, n + 1):
        status = statuses[i % len(statuses)]
        job = Job(id=i, user=("alice", "bob")[i % 2], cmd=f"bash run_remote.sh --seed {i}", archive="a" * 64 + ".tar.gz",
                  created=1.7e9 + i, name=f"sweep-{i}", req=["v3-32"], tags=["sweep"],
                  overrides=[f"--config.training.learning_rate=0.{i}"], status=Status.QUEUED)
        if status is not Status.QUEUED:
            job.status, job.machine, job.attempt = status, "local", 1
            job.attempts = [Attempt(n=0, machine="local", outcome="preempted", started=1.7e9, ended=1.7e9 + 60),
                            Attempt(n=1, machine="local", started=1.7e9 + 100)]
            job.last_line = f"step {i} loss 0.{i}"
        jobs.append(job)
    return jobs


def fake_home(folder: Path, n_jobs: int) -> Path:
    """A home of `n_jobs` fake_jobs on the local machine, saved as jobtpu saves it."""
    (folder / "machines.json").write_text('{"machines": {"local": {"kind": "local"}}}')
    with Store(Home(folder)).transaction() as state:
        state.jobs, state.next_id = fake_jobs(n_jobs), n_jobs + 1
    return folder


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = fake_home(Path(tmp), args.jobs)
        env = {**os.environ, "JOBTPU_USER": "alice"}
        # What the `jobtpu` console script runs (without a shim in front of the interpreter).
        ours = [sys.executable, "-c", "import sys; from jobtpu.cli import main; sys.exit(main())",
                "--home", tmp, "status", "--json"]
        bare = [sys.executable, "-c", "pass"]
        # The floor of any listing that reads this file: parse it, keep one user's jobs, print them.
        floor = [sys.executable, "-c", "import orjson, sys\n"
                 f"d = orjson.loads(open({str(home / 'state.json')!r}, 'rb').read())\n"
                 "sys.stdout.buffer.write(orjson.dumps({'jobs': [j for j in d['jobs'] if j['user'] == 'alice']}))"]
        timed(ours, env), timed(bare, env)  # warm the page cache
        ours_t, bare_t, floor_t = [], [], []
        for _ in range(args.rounds):
            bare_t.append(timed(bare, env))
            ours_t.append(timed(ours, env))
            floor_t.append(timed(floor, env))
        probe = subprocess.run([sys.executable, "-c",
                                "import sys; from jobtpu.cli import main\n"
                                "try:\n main(sys.argv[1:])\nexcept SystemExit: pass\n"
                                "print([m for m in sys.modules if m.split('.')[0] in ('paramiko', 'fabric') "
                                "or m.startswith('google.cloud')])", "--home", tmp, "status", "--json"],
                               env=env, capture_output=True, text=True, check=True)
        heavy = probe.stdout.strip().splitlines()[-1]
    o, b, f = statistics.median(ours_t), statistics.median(bare_t), statistics.median(floor_t)
    print(f"jobtpu status --json, {args.jobs} jobs: median {o * 1000:.0f} ms over {args.rounds} rounds")
    print(f"python -c pass:                 median {b * 1000:.0f} ms")
    print(f"parse + filter + print the same file, nothing else: median {f * 1000:.0f} ms ({f / b:.2f}x)")
    print(f"ratio to the floor: {o / f:.2f}x (target < 3x)")
    print(f"heavy modules loaded by status: {heavy}")


if __name__ == "__main__":
    main()

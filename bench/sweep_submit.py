"""Bench: `submit --sweep` of 10,000 combinations against one plain `submit` of the same folder.

A sweep snapshots its folder once and saves its jobs in one write, so it should cost little more than
one submit however many combinations it has. Both are measured alternating in one run, each into a
fresh copy of the same empty home (a submit's cost does not grow with the jobs the last round left).
Target: sweep / plain <= 3x (medians over --rounds).
Usage: python bench/sweep_submit.py [--rounds 5] [--files 300]"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 3.0
AXES = ["--sweep", "lr=" + ",".join(f"0.{i}" for i in range(1, 11)),
        "--sweep", "bs=" + ",".join(str(16 * i) for i in range(1, 11)),
        "--sweep", "seed=" + ",".join(map(str, range(100)))]  # 10 x 10 x 100 = 10,000


def timed_submit(empty: Path, work: Path, src: Path, extra: list[str], env: dict[str, str]) -> float:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(empty, work)
    cmd = [sys.executable, "-m", "jobtpu.cli", "--home", str(work), "submit", "--dir", str(src),
           "--cmd", "python train.py", *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"submit failed: {done.stderr.strip()[-500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=300, help="files in the folder snapshotted")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO), "JOBTPU_USER": "alice"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        empty, src = root / "empty", root / "src"
        empty.mkdir()
        (empty / "machines.json").write_text(json.dumps({
            "machines": {"local": {"kind": "local", "resources": {"slot": 2}}},
            "config_aliases": {"lr": "config.training.learning_rate"}}))
        for i in range(args.files):
            path = src / f"pkg{i % 10}" / f"mod{i}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# module {i}\n" + "x = 1\n" * 200)
        (src / "train.py").write_text("print('train')\n")
        work = root / "work"
        timed_submit(empty, work, src, [], env)  # warm the page cache
        plain, sweep = [], []
        for _ in range(args.rounds):
            plain.append(timed_submit(empty, work, src, [], env))
            sweep.append(timed_submit(empty, work, src, AXES, env))
        jobs = json.loads(subprocess.run([sys.executable, "-m", "jobtpu.cli", "--home", str(work), "status",
                                          "--all-users", "--json"], env=env, capture_output=True,
                                         text=True, check=True).stdout)["jobs"]
        assert len(jobs) == 10_000 and len({j["archive"] for j in jobs}) == 1, "10,000 jobs, one snapshot"
    p, s = statistics.median(plain), statistics.median(sweep)
    ratio = s / p
    print(f"plain submit            median {p * 1000:6.0f} ms")
    print(f"submit --sweep (10,000) median {s * 1000:6.0f} ms  {ratio:4.2f}x  (target <= {TARGET:.0f}x) "
          f"{'ok' if ratio <= TARGET else 'OVER'}")


if __name__ == "__main__":
    main()

"""Bench: what `import jobtpu` and one Tab completion cost, side by side with a bare `python -c pass`
start (docs/reference/python.md §11.1, §11.4): the import of the package a notebook's first cell runs,
and the completion of `jobtpu kill <Tab>` (job ids: state.json read once) and of `jobtpu ki<Tab>`
(commands only) on a home of 10,000 jobs, each in a fresh process as the shell starts it.

All run side by side in one run, alternating, and the medians are compared. Targets: the import
within a few milliseconds of the bare start; a completion under 0.3 s.
Usage: python bench/completion_start.py [--jobs 10000] [--rounds 15]"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clirun import cli_env, timed  # noqa: E402  # bench/clirun.py (benches run as scripts)
from status_scale import fake_home  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fake_home(Path(tmp), args.jobs)
        env = cli_env(REPO, JOBTPU_USER="alice", JOBTPU_HOME=tmp)
        complete = [sys.executable, "-P", "-m", "jobtpu.tab", "bash"]
        runs = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import jobtpu'": [sys.executable, "-c", "import jobtpu"],
            "jobtpu ki<Tab>": [*complete, "ki"],
            "jobtpu kill <Tab>": [*complete, "kill", ""],
        }
        offered = subprocess.run(runs["jobtpu kill <Tab>"], env=env, capture_output=True, text=True, check=True)
        assert len(offered.stdout.splitlines()) == args.jobs, offered.stderr  # every id, once
        for cmd in runs.values():  # warm the page cache and the bytecode
            timed(cmd, env)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, cmd in runs.items():
                times[name].append(timed(cmd, env))
    bare = statistics.median(times["python -c pass"])
    print(f"{args.jobs} jobs in state.json, median of {args.rounds} rounds each, side by side:")
    for name, found in times.items():
        median = statistics.median(found)
        print(f"  {name:28} {median * 1000:6.0f} ms  {median / bare:5.2f}x the bare start  "
              f"(+{(median - bare) * 1000:.0f} ms)")
    print("target: import jobtpu within a few ms of the bare start; a completion under 300 ms")


if __name__ == "__main__":
    main()

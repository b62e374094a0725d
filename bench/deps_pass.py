"""Bench: a quiet `jobtpu manage` pass over 1,000 queued sweep jobs that wait on dependencies, against
the same pass with no queued job (and, for reference, with 1,000 queued jobs that wait on nothing).

Each home has two jobs running for real on the local machine (2 slots, both taken), so the pass
probes them and starts nothing. Measured alternating in one run, medians over --rounds.
Target: waiting on dependencies / no queued job <= 1.5x.
Usage: python bench/deps_pass.py [--rounds 7] [--jobs 1000]"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from clirun import cli_env, jobtpu, run, timed  # bench/clirun.py (benches run as scripts)

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.5


def build_home(root: Path, queued: int, after: bool, env: dict[str, str]) -> Path:
    home, src = root / "home", root / "src"
    home.mkdir(parents=True)
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local",
                                                                           "resources": {"slot": 2}}}}))
    first = int(run(jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 100000"), env))
    run(jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 100000"), env)
    run(jobtpu(home, "manage"), env)
    if queued:
        deps = ["--after", str(first)] if after else []
        run(jobtpu(home, "submit", "--dir", str(src), "--cmd", "python train.py", *deps,
                   "--sweep", "i=" + ",".join(map(str, range(queued)))), env)
    run(jobtpu(home, "manage"), env)  # the first pass that sees them records why each waits
    return home


def stop(home: Path, env: dict[str, str]) -> None:
    jobs = json.loads(run(jobtpu(home, "status", "--all-users", "--json"), env))["jobs"]
    assert [j["status"] for j in jobs].count("running") == 2, "the running jobs stay running through the bench"
    run(jobtpu(home, "kill", "--status", "running", "--all-users"), env)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    env = cli_env(REPO, JOBTPU_USER="alice")
    with tempfile.TemporaryDirectory() as tmp:
        homes = {"no queued job": build_home(Path(tmp) / "none", 0, False, env),
                 f"{args.jobs} waiting on dependencies": build_home(Path(tmp) / "deps", args.jobs, True, env),
                 f"{args.jobs} queued, no dependencies": build_home(Path(tmp) / "plain", args.jobs, False, env)}
        times: dict[str, list[float]] = {name: [] for name in homes}
        try:
            for _ in range(args.rounds):
                for name, home in homes.items():
                    times[name].append(timed(jobtpu(home, "manage"), env))
            deps = json.loads(run(jobtpu(homes[f"{args.jobs} waiting on dependencies"], "status", "--all-users",
                                         "--json"), env))["jobs"]
            waiting = [j for j in deps if j["status"] == "queued"]
            assert len(waiting) == args.jobs and all(j["waiting"].startswith("waits for job") for j in waiting)
        finally:
            for home in homes.values():
                stop(home, env)
    base = statistics.median(times["no queued job"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"quiet pass, {name:<32} median {median * 1000:6.0f} ms  {median / base:4.2f}x")
    ratio = statistics.median(times[f"{args.jobs} waiting on dependencies"]) / base
    print(f"target: waiting on dependencies <= {TARGET}x a pass with no queued job: {'ok' if ratio <= TARGET else 'OVER'}")


if __name__ == "__main__":
    main()

"""Bench: jobtpu on homes of 10,000 and 100,000 jobs (2 running, the rest queued), each command side by
side with the floor of any tool that must read the file: `python3 -c "import json; json.load(...)"`.

Measured as a user pays it (a fresh process from a pip-installed jobtpu's console script; the floor
a venv's bare python, bench/clirun.py installed_jobtpu), alternating with the floor in one run
(medians over --rounds):
- a quiet `jobtpu manage` pass (nothing to start, nothing ended)    target <= 5x
- `jobtpu status` (the table)                                      target <= 4x
- `jobtpu status --json`                                           target <= 3x
- `jobtpu submit` of an unchanged folder                           target <= 4x

The home is built through the CLI (two real jobs running on the local machine, one queued job), then
grown by copying the queued job's record, as a hand edit would: the bench measures the on-disk
format, whatever the code behind it.
Usage: python bench/scale_jobs.py [--jobs 10000 100000] [--rounds 7]"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from clirun import installed_jobtpu, run, timed, user_env  # bench/clirun.py (benches run as scripts)

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"manage": 5.0, "status": 4.0, "status --json": 3.0, "submit": 4.0}


def build_home(root: Path, n_jobs: int, env: dict[str, str], jobtpu: Any) -> tuple[Path, Path]:
    """Two jobs running for real on the local machine (2 slots, both taken), then n_jobs - 2 queued."""
    home, src = root / "home", root / "src"
    home.mkdir()
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local",
                                                                           "resources": {"slot": 2}}}}))
    for _ in range(2):
        run(jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 100000"), env)
    run(jobtpu(home, "manage"), env)
    queued_id = int(run(jobtpu(home, "submit", "--dir", str(src), "--cmd", "python train.py --lr 0.01",
                               "--name", "sweep", "--tag", "lr"), env))
    state_path = home / "state.json"
    doc = json.loads(state_path.read_text())
    running = [j for j in doc["jobs"] if j["status"] == "running"]
    assert len(running) == 2, [j["status"] for j in doc["jobs"]]
    template = next(j for j in doc["jobs"] if j["id"] == queued_id)
    for job_id in range(queued_id + 1, n_jobs + 1):
        copy = dict(template, id=job_id, created=template["created"] + job_id)
        copy["name"] = f"sweep-{job_id}"
        doc["jobs"].append(copy)
    doc["next_id"] = n_jobs + 1
    state_path.write_text(json.dumps(doc, indent=1))
    (home / "last_id").write_text(f"{n_jobs}\n")
    run(jobtpu(home, "status", "--json"), env)  # whatever a first read rebuilds, it is rebuilt now
    return home, src


def measure(n_jobs: int, rounds: int, env: dict[str, str]) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        # As a user runs them: a pip-installed jobtpu's console script, and a bare venv's python.
        program, python = installed_jobtpu(Path(tmp), REPO)

        def jobtpu(home: Path, *words: str) -> list[str]:
            return [*program, "--home", str(home), *words]
        home, src = build_home(Path(tmp), n_jobs, env, jobtpu)
        floor = [*python, "-c", f"import json; json.load(open({str(home / 'state.json')!r}))"]
        commands = {"manage": jobtpu(home, "manage"), "status": jobtpu(home, "status"),
                    "status --json": jobtpu(home, "status", "--json"),
                    "submit": jobtpu(home, "submit", "--dir", str(src), "--cmd", "python train.py --lr 0.01")}
        for cmd in commands.values():  # warm the page cache and the snapshot's hash cache
            timed(cmd, env)
        ours: dict[str, list[float]] = {name: [] for name in commands}
        base: list[float] = []
        for _ in range(rounds):
            for name, cmd in commands.items():
                base.append(timed(floor, env))
                ours[name].append(timed(cmd, env))
        quiet = json.loads(run(jobtpu(home, "status", "--json"), env))
        states = [j["status"] for j in quiet["jobs"]]
        assert states.count("running") == 2, "the two running jobs must stay running through the bench"
        run(jobtpu(home, "kill", *[str(j["id"]) for j in quiet["jobs"] if j["status"] == "running"]), env)
        floor_t = statistics.median(base)
        return {name: (statistics.median(times), floor_t) for name, times in ours.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    env = user_env(JOBTPU_USER="alice", COLUMNS="120")
    for n_jobs in args.jobs:
        results = measure(n_jobs, args.rounds, env)
        floor_t = next(iter(results.values()))[1]
        print(f"{n_jobs} jobs: json.load of state.json (the floor): median {floor_t * 1000:.0f} ms")
        for name, (ours_t, floor_t) in results.items():
            ratio = ours_t / floor_t
            verdict = "ok" if ratio <= TARGETS[name] else "OVER"
            print(f"  {name:<14} median {ours_t * 1000:6.0f} ms  {ratio:5.1f}x the floor  "
                  f"(target <= {TARGETS[name]:.0f}x) {verdict}")


if __name__ == "__main__":
    main()

"""Bench: the tables of a scheduler's scale against a bare `json.load` of the same state.json, both
as a user pays them (a fresh process: the console script of a jobtpu pip-installed in a venv; the
floor a venv's bare python with nothing installed; bench/clirun.py installed_jobtpu).

Homes, each of 10,000 jobs (the first made through the CLI as one sweep, the others grown from it
by hand-editing the record as a user may):
- queued:   10,000 queued members of one sweep;   `status --all` (a row each) and `status`
- ended:    10,000 finished jobs;                 `status --all` and `status`
- machines: 4,331 running on machines, the rest queued;  `status` (every job on a machine is a row)
Target: each at most 5x its floor (medians over --rounds, alternating in one run).
Usage: python bench/tables.py [--rounds 7] [--jobs 10000]"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from clirun import installed_jobtpu, run, timed, user_env  # bench/clirun.py (benches run as scripts)

REPO = Path(__file__).resolve().parent.parent
TARGET = 5.0
ON_MACHINES = 4331


def grow(home: Path, how: str, n_jobs: int) -> None:
    path = home / "state.json"
    doc = json.loads(path.read_text())
    for i, job in enumerate(doc["jobs"]):
        if how == "ended":
            job.update(status="finished", exit_code=0, attempt=0,
                       attempts=[{"n": 0, "machine": "local", "outcome": "finished", "exit_code": 0,
                                  "started": job["created"] + 1, "ended": job["created"] + 60 + i}])
        elif how == "machines" and i < ON_MACHINES:
            job.update(status="running", machine="local", alloc={}, attempt=0,
                       attempts=[{"n": 0, "machine": "local", "started": job["created"] + 1}])
    assert len(doc["jobs"]) == n_jobs
    path.write_text(json.dumps(doc, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        jobtpu, python = installed_jobtpu(tmp, REPO)
        env = user_env(JOBTPU_USER="alice", COLUMNS="120")
        src = tmp / "src"
        src.mkdir()
        (src / "train.py").write_text("print(1)\n")
        cases: list[tuple[str, list[str], list[str]]] = []
        for how in ("queued", "ended", "machines"):
            home = tmp / how
            run([*jobtpu, "--home", str(home), "init"], env)
            # hold: a pass (none runs here) must not start them; the records are what is measured
            run([*jobtpu, "--home", str(home), "submit", "--dir", str(src), "--cmd", "python train.py", "--hold",
                 "--sweep", "seed=" + ",".join(map(str, range(args.jobs)))], env)
            grow(home, how, args.jobs)
            floor = [*python, "-c", f"import json; json.load(open({str(home / 'state.json')!r}))"]
            for words in ([["status", "--all"], ["status"]] if how != "machines" else [["status"]]):
                cases.append((f"{how}: {' '.join(words)}", [*jobtpu, "--home", str(home), *words], floor))
        for _, cmd, floor in cases:  # warm the page cache and the bytecode
            timed(cmd, env), timed(floor, env)
        ours: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        base: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for _ in range(args.rounds):
            for name, cmd, floor in cases:
                base[name].append(timed(floor, env))
                ours[name].append(timed(cmd, env))
    print(f"{args.jobs} jobs; floor: a bare python's json.load of the same state.json")
    for name, _, _ in cases:
        o, b = statistics.median(ours[name]), statistics.median(base[name])
        verdict = "ok" if o / b <= TARGET else "OVER"
        print(f"  {name:<22} median {o * 1000:6.0f} ms; floor {b * 1000:5.0f} ms; {o / b:5.1f}x "
              f"(target <= {TARGET:.0f}x) {verdict}")


if __name__ == "__main__":
    main()

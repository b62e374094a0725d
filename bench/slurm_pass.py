"""A quiet `jobtpu manage` pass over N jobs on a Slurm cluster, against the floor: one `squeue` of the
same jobs run at the login host over SSH, measured side by side, alternating (issue 45's target: at
most 2x at 1,000 jobs).

Starts a real one-node Slurm cluster on loopback (tests/slurmcluster.py) and an sshd whose account is
the cluster's user (tests/sshfleet.py; run as root, with slurm-wlm and munge installed), hands N jobs
(`sleep 600`) to Slurm through jobtpu (most of them wait in Slurm's queue), then prints the medians
and their ratio. Cleans up on exit.

    sudo python3 bench/slurm_pass.py [--jobs 100,1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from manage_scaling import jobtpu, start_all  # bench/manage_scaling.py (benches run as scripts)
from slurm_login import Login, slurm_login  # bench/slurm_login.py

# The squeue a pass runs at the login host, for all of a home's jobs there (jobtpu/remote/sh/slurm.sh).
SQUEUE = ("squeue --noheader --user=$(id -un) --states=all --array "
          "--Format='JobArrayID:|,State:|,Reason:|,RestartCnt:|,Name:|'")


def setup_home(login: Login, n: int) -> Path:
    home = login.base / f"home-{n}"
    home.mkdir()
    (home / "machines.json").write_text(json.dumps({"machines": {"hpc": login.entry()}}))
    for _ in range(n):
        jobtpu(home, "submit", "--dir", str(login.src), "--cmd", "sleep 600", "--machine", "hpc")
    return start_all(home, 60 + n)


def measure(home: Path, login: Login, rounds: int) -> tuple[float, float]:
    manage_t, bare_t = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        login.ssh(SQUEUE)
        bare_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        jobtpu(home, "manage")
        manage_t.append(time.perf_counter() - t)
    return statistics.median(manage_t), statistics.median(bare_t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="100,1000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with slurm_login("jobtpu-bench-slurm-") as login:
        print(f"{'jobs':>6} {'pass s':>8} {'squeue s':>9} {'ratio':>6}")
        for n in (int(x) for x in args.jobs.split(",")):
            home = setup_home(login, n)
            manage_s, bare_s = measure(home, login, args.rounds)
            print(f"{n:>6} {manage_s:>8.3f} {bare_s:>9.3f} {manage_s / bare_s:>6.2f}")
            login.cluster.cancel_all(login.fm.user)


if __name__ == "__main__":
    main()

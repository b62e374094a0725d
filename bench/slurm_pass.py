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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from manage_scaling import jobtpu, start_all  # noqa: E402  bench/manage_scaling.py (benches run as scripts)

from tests.slurmcluster import SlurmCluster  # noqa: E402
from tests.sshfleet import FleetMachine, SshFleet  # noqa: E402


def squeue_over_ssh(fm: FleetMachine, identity: Path, known_hosts: Path) -> None:
    """The floor: one ssh to the login host running the squeue a pass needs."""
    h = fm.hosts[0]
    subprocess.run(["ssh", "-i", str(identity), "-p", str(h.port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                    "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
                    f"{h.user}@{h.addr}", "squeue --noheader --user=$(id -un) --states=all --array "
                    "--Format='JobArrayID:|,State:|,Reason:|,RestartCnt:|'"], stdout=subprocess.DEVNULL, check=True)


def setup_home(base: Path, fleet: SshFleet, fm: FleetMachine, src: Path, n: int) -> Path:
    home = base / f"home-{n}"
    home.mkdir()
    machine = {"kind": "slurm", "host": fm.hosts[0].address(), "user": fm.user,
               "identity_file": str(fleet.identity), "connect_timeout": 20}
    (home / "machines.json").write_text(json.dumps({"machines": {"hpc": machine}}))
    for _ in range(n):
        jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 600", "--machine", "hpc")
    return start_all(home, 60 + n)


def measure(home: Path, fm: FleetMachine, identity: Path, rounds: int) -> tuple[float, float]:
    known = home.parent / f"known-{home.name}"
    known.write_text(fm.hosts[0].known_hosts_line() + "\n")
    manage_t, bare_t = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        squeue_over_ssh(fm, identity, known)
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
    cluster = SlurmCluster()
    base = Path(tempfile.mkdtemp(prefix="jobtpu-bench-slurm-"))
    fleet = SshFleet(base / "fleet")
    fleet.extra_conf = f"SetEnv SLURM_CONF={cluster.conf}\n"
    try:
        fm = fleet.add_machine("hpc")
        src = base / "code"
        src.mkdir()
        (src / "train.py").write_text("print('hello')\n")
        print(f"{'jobs':>6} {'pass s':>8} {'squeue s':>9} {'ratio':>6}")
        for n in (int(x) for x in args.jobs.split(",")):
            home = setup_home(base, fleet, fm, src, n)
            manage_s, bare_s = measure(home, fm, fleet.identity, args.rounds)
            print(f"{n:>6} {manage_s:>8.3f} {bare_s:>9.3f} {manage_s / bare_s:>6.2f}")
            cluster.cancel_all(fm.user)
    finally:
        try:
            cluster.cancel_all()  # an account whose jobs still run cannot be removed
            fleet.close()
        finally:
            cluster.close()


if __name__ == "__main__":
    main()

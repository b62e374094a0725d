"""A sweep of N members handed to a Slurm cluster by jobtpu (one `submit --sweep`, then the passes
until every member is Slurm's: one job array), against the floor: one bare `sbatch --array=0-N-1` of
the same size over SSH at the login host plus one jobtpu submit, measured side by side, alternating
(issue 45's target: at most 2x at 1,000 members).

Starts a real one-node Slurm cluster on loopback (tests/slurmcluster.py) and an sshd whose account is
the cluster's user (tests/sshfleet.py; run as root, with slurm-wlm and munge installed); every round
cancels what it handed over. Each round's home has a root of its own on the cluster (a root belongs to
one home), holding the snapshot already, as a cluster does once a sweep's code was first sent (the
copy itself is measured by the other benches): the handover is timed, not the archive's transfer.
Prints the medians and their ratio. Cleans up on exit.

    sudo python3 bench/slurm_sweep.py [--members 100,1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from manage_scaling import jobtpu  # bench/manage_scaling.py (benches run as scripts)
from slurm_login import Login, slurm_login  # bench/slurm_login.py

HANDED_TIMEOUT = 600.0


def new_home(login: Login, name: str, archive: Path | None = None) -> Path:
    home = login.base / name
    home.mkdir()
    # A root of its own: a root belongs to one home (machines-json.md), and a round that met the last
    # round's Slurm id records would find every member handed over already and submit nothing.
    machine = {**login.entry(), "root": f"jobtpu-{name}"}
    (home / "machines.json").write_text(json.dumps({"machines": {"hpc": machine}}))
    if archive is not None:  # the snapshot on the cluster already, the login user's as jobtpu keeps it
        kept = login.fm.home / f"jobtpu-{name}" / "archives"
        kept.mkdir(parents=True)
        shutil.copy2(archive, kept / archive.name)
        for path in (kept.parent, kept, kept / archive.name):
            shutil.chown(path, login.fm.user, login.fm.user)
            path.chmod(0o600 if path.is_file() else 0o700)
    return home


def sweep(home: Path, src: Path, n: int) -> None:
    values = ",".join(str(i) for i in range(n))
    jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 600", "--machine", "hpc", "--sweep", f"k={values}")


def hand_over(home: Path) -> int:
    """Passes until every member has its Slurm job id; how many passes that took."""
    deadline, passes = time.monotonic() + HANDED_TIMEOUT, 0
    while True:
        jobtpu(home, "manage")
        passes += 1
        jobs = json.loads(jobtpu(home, "status", "--json", "--all-users"))["jobs"]
        if all(j["status"] == "running" for j in jobs):
            return passes
        if time.monotonic() > deadline:
            raise SystemExit(f"the sweep was not all handed over: {[(j['id'], j['status']) for j in jobs][:5]}")


def measure(login: Login, n: int, rounds: int) -> tuple[float, float, int]:
    cluster, fm, src = login.cluster, login.fm, login.src
    ours, floor, passes = [], [], 0
    warm = new_home(login, f"warm-{n}")  # sends the snapshot once, untimed
    sweep(warm, src, 1)
    hand_over(warm)
    cluster.cancel_all(fm.user)
    archive = next((fm.home / f"jobtpu-warm-{n}" / "archives").glob("*.tar.gz"))
    for r in range(rounds):
        t = time.perf_counter()
        # The floor: one bare sbatch --array of n members at the login host, and one jobtpu submit.
        login.ssh(f"sbatch --parsable --output=/dev/null --array=0-{n - 1} --wrap='sleep 600'")
        sweep(new_home(login, f"floor-{n}-{r}"), src, 1)
        floor.append(time.perf_counter() - t)
        cluster.cancel_all(fm.user)
        home = new_home(login, f"home-{n}-{r}", archive)
        t = time.perf_counter()
        sweep(home, src, n)
        passes = hand_over(home)
        ours.append(time.perf_counter() - t)
        cluster.cancel_all(fm.user)
    return statistics.median(ours), statistics.median(floor), passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="100,1000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with slurm_login("jobtpu-bench-slurm-sweep-") as login:
        print(f"{'members':>8} {'jobtpu s':>9} {'floor s':>8} {'ratio':>6} {'passes':>7}")
        for n in (int(x) for x in args.members.split(",")):
            ours, floor, passes = measure(login, n, args.rounds)
            print(f"{n:>8} {ours:>9.3f} {floor:>8.3f} {ours / floor:>6.2f} {passes:>7}")


if __name__ == "__main__":
    main()

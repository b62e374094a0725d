"""A quiet `jobtpu manage` pass over one multi-host machine (a pod slice's workers), against the
floor: a bare parallel probe of the same hosts with the OpenSSH client (`ssh host true` to each, all
at once), measured side by side, alternating, at several worker counts.

Starts real sshd servers on loopback (tests/sshfleet.py; run as root), one machine of N hosts with
one job running on all N workers (`sleep 600`), then prints medians and their ratio (target: at most
1.5x at 64 workers). With --gang SxN, then the same over one gang (`submit --slices S`) of S machines
of N hosts each, against a bare probe of all S x N hosts (target: at most 1.5x at 4x32). Cleans up its
fleet on exit.

    sudo python3 bench/pod_pass.py [--workers 8,32,64] [--rounds 5] [--gang 4x32]
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

from tests.sshfleet import Host, SshFleet  # noqa: E402


def ssh_true_all(hosts: list[Host], identity: Path, known_hosts: Path) -> None:
    """The floor: `ssh host true` to every host at once, host keys checked."""
    procs = [subprocess.Popen(
        ["ssh", "-i", str(identity), "-p", str(h.port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
         "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=20",
         f"{h.user}@{h.addr}", "true"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for h in hosts]
    for h, proc in zip(hosts, procs, strict=True):
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"ssh {h.address()} true failed: {err.decode(errors='replace').strip()}")


def setup_home(base: Path, fleet: SshFleet, hosts: list[Host], src: Path) -> Path:
    home = base / f"home-{len(hosts)}"
    home.mkdir()
    machine = {"kind": "ssh", "hosts": [h.address() for h in hosts], "user": hosts[0].user,
               "identity_file": str(fleet.identity), "connect_timeout": 20}
    (home / "machines.json").write_text(json.dumps({"machines": {"pod": machine}}))
    jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 600", "--machine", "pod")
    return start_all(home, 300)


def setup_gang_home(base: Path, fleet: SshFleet, slices: list[list[Host]], src: Path) -> Path:
    home = base / f"home-gang-{len(slices)}x{len(slices[0])}"
    home.mkdir()
    machines = {f"slice{i}": {"kind": "ssh", "hosts": [h.address() for h in hosts], "user": hosts[0].user,
                              "identity_file": str(fleet.identity), "connect_timeout": 20}
                for i, hosts in enumerate(slices)}
    (home / "machines.json").write_text(json.dumps({"machines": machines}))
    jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 600", "--slices", str(len(slices)))
    return start_all(home, 300)


def measure(home: Path, hosts: list[Host], identity: Path, rounds: int) -> tuple[float, float]:
    known = home.parent / f"known-{len(hosts)}"
    known.write_text("".join(f"[{h.addr}]:{h.port} {h.public_key_line()}\n" for h in hosts))
    manage_t, bare_t = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        ssh_true_all(hosts, identity, known)
        bare_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        jobtpu(home, "manage")
        manage_t.append(time.perf_counter() - t)
    jobs = json.loads(jobtpu(home, "status", "--json", "--all-users"))["jobs"]
    if not all(j["status"] == "running" and j["reason"] is None for j in jobs):
        raise SystemExit("the job stopped running during the benchmark")
    return statistics.median(manage_t), statistics.median(bare_t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="8,32,64", help="comma-separated worker counts")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gang", default="", help="SxN: also a gang of S machines of N hosts each (4x32)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="jobtpu-bench-") as tmp:
        base = Path(tmp)
        fleet = SshFleet(base / "fleet")
        try:
            src = base / "code"
            src.mkdir()
            (src / "train.py").write_text("print('hi')\n")
            print(f"{'workers':>7}  {'quiet pass':>10}  {'ssh true x N':>12}  {'ratio':>5}", flush=True)
            for n in sizes:
                machine = fleet.add_machine(f"pod{n}", n_hosts=n)
                home = setup_home(base, fleet, machine.hosts, src)
                manage, bare = measure(home, machine.hosts, fleet.identity, args.rounds)
                print(f"{n:>7}  {manage * 1000:>8.0f}ms  {bare * 1000:>10.0f}ms  {manage / bare:>5.2f}", flush=True)
            if args.gang:
                count, per = (int(x) for x in args.gang.split("x"))
                slices = [fleet.add_machine(f"slice{i}", n_hosts=per).hosts for i in range(count)]
                home = setup_gang_home(base, fleet, slices, src)
                every = [h for hosts in slices for h in hosts]
                manage, bare = measure(home, every, fleet.identity, args.rounds)
                print(f"{args.gang:>7}  {manage * 1000:>8.0f}ms  {bare * 1000:>10.0f}ms  {manage / bare:>5.2f}  (a gang)",
                      flush=True)
        finally:
            fleet.close()


if __name__ == "__main__":
    main()

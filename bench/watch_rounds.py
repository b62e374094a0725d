"""What a round of `jobtpu watch` or `manage --loop` costs once its SSH connections are open, against
a fresh bare parallel probe of the same hosts (connect + one exec of `true` on every host, in threads:
what any tool that does not keep its connections pays every round).

Starts real sshd servers on loopback (tests/sshfleet.py; run as root), one running job (`sleep 600`)
per host, warms one round, then alternates a warm round (a manage pass inside kept_connections, as
the loop and the dashboard run it) with a bare probe and prints medians, their ratio (target: at
most 0.3x at 32 hosts) and the SSH connections each host saw per warm round (target: 0).

    sudo python3 bench/watch_rounds.py [--hosts 32] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import paramiko  # noqa: E402
from manage_scaling import bare_probe, counts, setup_home  # noqa: E402

from jobtpu.home.layout import Home  # noqa: E402
from jobtpu.passes.manage import run_pass  # noqa: E402
from jobtpu.passes.session import kept_connections  # noqa: E402
from tests.sshfleet import SshFleet  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobtpu-bench-") as tmp:
        base = Path(tmp)
        fleet = SshFleet(base / "fleet")
        try:
            machine = fleet.add_machine("bench", n_hosts=args.hosts)
            key = paramiko.PKey.from_path(str(fleet.identity))
            src = base / "code"
            src.mkdir()
            (src / "train.py").write_text("print('hi')\n")
            hosts = machine.hosts
            home = Home(setup_home(base, fleet, hosts, src))
            warm_t, bare_t = [], []
            conns = 0
            with kept_connections():
                run_pass(home, every=5.0)  # the first round connects
                for _ in range(args.rounds):
                    t = time.perf_counter()
                    bare_probe(hosts, key)
                    bare_t.append(time.perf_counter() - t)
                    time.sleep(0.3)  # let sshd flush its log lines
                    c0, _ = counts(hosts)
                    t = time.perf_counter()
                    report = run_pass(home, every=5.0)
                    warm_t.append(time.perf_counter() - t)
                    if report.skipped:
                        raise SystemExit("another pass held the lock")
                    time.sleep(0.3)
                    c1, _ = counts(hosts)
                    conns += c1 - c0
            warm, bare = statistics.median(warm_t), statistics.median(bare_t)
            print(f"{'hosts':>5}  {'warm round':>10}  {'bare probe':>10}  {'ratio':>5}  {'conns/host/round':>16}")
            print(f"{len(hosts):>5}  {warm * 1000:>8.0f}ms  {bare * 1000:>8.0f}ms  {warm / bare:>5.2f}  "
                  f"{conns / (args.rounds * len(hosts)):>16.2f}", flush=True)
        finally:
            fleet.close()


if __name__ == "__main__":
    main()

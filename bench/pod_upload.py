"""One upload per machine, and per gang: what a launch sends from the home, against the archive's size,
and how long a launch on a 16-worker machine takes against one on a 1-worker machine, and one on a
gang of 4 slices x 4 workers (`submit --slices 4`) against one on 1 slice x 4 workers, the home's
upload limited.

Machines of real sshd hosts on loopback, each host with a disk of its own (tests/podfleet.py; run as
root); the pass is the real `jobtpu manage`. An `rsync` first on the pass's PATH runs the real one,
adding `--stats` (to count the bytes each push sends) and, for the timed launches, `--bwlimit` (the
home's upload limit): nothing of jobtpu's own changes.

    sudo python3 bench/pod_upload.py [--counts 1 8 32] [--mb 50] [--bwlimit-kbps 4000]

Prints, per worker count, home bytes per launch / archive size (target: about 1 at every count), then
the launch time at 16 workers / at 1 worker for a --mb archive (target: at most 1.5), then the gang's
home bytes / archive size and its launch time / the one slice's (targets: at most 1.5 each)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.podfleet import PodFleet  # noqa: E402
from tests.sshfleet import FleetMachine  # noqa: E402

HOOK = """#!/bin/sh
case " $* " in
  *" --ignore-times "*) exec {rsync} --stats ${{BENCH_BWLIMIT:+--bwlimit=$BENCH_BWLIMIT}} "$@" >> "{stats}" ;;
esac
exec {rsync} "$@"
"""


def jobtpu(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "jobtpu.cli", "--home", str(home), *args], capture_output=True,
                          text=True, env={**os.environ, "JOBTPU_USER": "bench", **(env or {})}, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"jobtpu {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def status(home: Path) -> dict[int, dict[str, object]]:
    return {j["id"]: j for j in json.loads(jobtpu(home, "status", "--all-users", "--json").stdout)["jobs"]}


class Bench:
    def __init__(self, base: Path, fleet: PodFleet) -> None:
        self.base, self.fleet = base, fleet
        hook = base / "bin"
        hook.mkdir()
        self.stats = base / "push.stats"
        (hook / "rsync").write_text(HOOK.format(rsync=shutil.which("rsync"), stats=self.stats))
        (hook / "rsync").chmod(0o755)
        self.path = f"{hook}:{os.environ['PATH']}"
        self.pods: dict[str, FleetMachine] = {}

    def home(self, pods: dict[str, FleetMachine]) -> Path:
        home = self.base / f"home-{len(list(self.base.glob('home-*')))}"
        home.mkdir()
        machines = {name: {"kind": "ssh", "hosts": [h.address() for h in pod.hosts], "user": pod.user,
                           "identity_file": str(self.fleet.identity), "connect_timeout": 10}
                    for name, pod in pods.items()}
        (home / "machines.json").write_text(json.dumps({"machines": machines}))
        return home

    def launch(self, home: Path, src: Path, machine: str, bwlimit: int = 0, slices: int = 1) -> tuple[float, int, int]:
        """Submit and time the pass that launches: seconds, bytes the home pushed, the archive's size.
        With `slices` > 1, a gang on the home's machines (all of one kind) instead of `machine`."""
        self.stats.write_text("")
        where = ["--machine", machine] if slices == 1 else ["--slices", str(slices)]
        job = json.loads(jobtpu(home, "submit", "--json", "--dir", str(src), "--cmd", "true", *where).stdout)["id"]
        archive = home / "archives" / str(status(home)[job]["archive"])
        env = {"PATH": self.path, "BENCH_BWLIMIT": str(bwlimit) if bwlimit else ""}
        started = time.monotonic()
        said = jobtpu(home, "manage", env=env).stderr
        took = time.monotonic() - started
        record = status(home)[job]
        assert record["status"] in ("running", "finished"), (record, said)
        assert "could not fetch" not in said, said
        sent = sum(int(n.replace(",", "")) for n in re.findall(r"Total bytes sent: ([\d,]+)", self.stats.read_text()))
        return took, sent, archive.stat().st_size


def source(base: Path, name: str, mb: float) -> Path:
    (base / name).mkdir()
    (base / name / "train.py").write_text("print('hi')\n")
    (base / name / "data.bin").write_bytes(os.urandom(int(mb * 1e6)))
    return base / name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--bwlimit-kbps", type=int, default=4000, help="the home's upload limit, KiB/s")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="jobtpu-bench-pods-"))
    fleet = PodFleet(base / "fleet")
    try:
        bench = Bench(base, fleet)
        pods = {f"pod{n}": fleet.add_pod(f"pod{n}", n) for n in sorted({*args.counts, 1, 16})}
        home = bench.home(pods)
        print("workers  home bytes / archive size")
        for n in args.counts:
            _, sent, size = bench.launch(home, source(base, f"small{n}", 2), f"pod{n}")
            print(f"{n:7d}  {sent / size:.3f}  ({sent:,} / {size:,} bytes)")
        timed = {}
        for n in (1, 16):
            took, sent, size = bench.launch(home, source(base, f"big{n}", args.mb), f"pod{n}", args.bwlimit_kbps)
            timed[n] = took
            print(f"launch on {n:2d} workers, {size / 1e6:.0f} MB archive at {args.bwlimit_kbps} KiB/s: "
                  f"{took:.1f} s, {sent / size:.3f} archives sent")
        print(f"launch time 16 workers / 1 worker: {timed[16] / timed[1]:.2f}x (target <= 1.5x)")
        # A gang of 4 slices x 4 workers, side by side with one slice of 4 workers (homes of their own:
        # a gang takes every machine of its kind the home has).
        slices = {f"slice{i}": fleet.add_pod(f"slice{i}", 4) for i in range(4)}
        gang_home, one_home = bench.home(slices), bench.home({"one": fleet.add_pod("one", 4)})
        one, _, _ = bench.launch(one_home, source(base, "one", args.mb), "one", args.bwlimit_kbps)
        gang, sent, size = bench.launch(gang_home, source(base, "gang", args.mb), "", args.bwlimit_kbps, slices=4)
        print(f"gang of 4 slices x 4 workers: {gang:.1f} s, {sent / size:.3f} archives sent from the home "
              f"(target <= 1.5); 1 slice x 4 workers: {one:.1f} s; gang / one slice: {gang / one:.2f}x (target <= 1.5x)")
    finally:
        fleet.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

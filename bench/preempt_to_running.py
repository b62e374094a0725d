"""Preemption to running under `jobtpu manage --loop`, side by side: a loop that follows work in flight
(busy_interval, and a log stream that notices a vanished worker, as jobtpu does) against the same
loop waiting its full interval between every stage (both set to the interval, as before), both against the fake TPU API's own operation
times (tests/fake_tpu.py, driven by the real google-cloud-tpu client; workers are real sshd hosts,
tests/sshfleet.py: run as root).

One preemptible 4-worker v3-32 node runs a job under rule `pre`; the bench preempts it and times,
for each variant in turn, how long until the job runs again (attempt 1) on the recreated node. The
floor is what Google's operations take in the fake: its delete plus its create (`ready_after`).
Target: within one loop interval plus the floor.

    sudo python3 bench/preempt_to_running.py [--interval 60] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobtpu import timing  # noqa: E402
from tests.fake_tpu import FakeTpuApi  # noqa: E402
from tests.sshfleet import SshFleet  # noqa: E402
from tests.tpufleet import ZONE, TpuFleet, write_machines  # noqa: E402

JOBTPU = [sys.executable, "-m", "jobtpu.cli"]


def jobtpu(home: Path, *args: str) -> str:
    done = subprocess.run([*JOBTPU, "--home", str(home), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, "JOBTPU_USER": "bench"})
    return done.stdout


def job_of(home: Path, job_id: int) -> dict:
    return dict(json.loads(jobtpu(home, "status", "--json", str(job_id)))["jobs"][0])


def wait(what: str, done, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def one_round(base: Path, interval: float, busy: float, ready_after: float) -> float:
    """Seconds from preemption to the job running again, under a loop of `interval` seconds that
    follows work in flight every `busy` seconds (and, when `busy` is the interval, brings no logs home
    between rounds either: the loop as it was)."""
    ssh = SshFleet(base / "fleet")
    api = FakeTpuApi(ready_after=ready_after)
    tpus = TpuFleet(ssh, api)
    api.worker_hooks = tpus
    api.start()
    loop = None
    try:
        tpus.add_node("node-0", workers=4, accelerator="v3-32", preemptible=True)
        home = base / "home"
        write_machines(home, tpus, {"v3-32-p1": tpus.machine_spec("node-0")})
        src = base / "code"
        src.mkdir()
        (src / "train.py").write_text("print('hi')\n")
        job = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 600", "--rule", "pre"))
        waits = {"busy_interval": busy} if busy < interval else {"busy_interval": busy, "log_stream": interval}
        env = {**os.environ, "JOBTPU_USER": "bench", **timing.env(**waits)}
        loop = subprocess.Popen([*JOBTPU, "--home", str(home), "manage", "--loop", str(interval)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait("the job to run", lambda: job_of(home, job)["status"] == "running", 120)
        time.sleep(min(interval, 5))  # a running fleet: the loop is somewhere in its interval
        started = time.monotonic()
        api.preempt(ZONE, "node-0")
        wait("the job to run again", lambda: (lambda j: j["status"] == "running" and j["attempt"] == 1)(job_of(home, job)),
             interval * 6 + 120)
        return time.monotonic() - started
    finally:
        if loop is not None:
            os.killpg(loop.pid, signal.SIGINT)
            loop.wait(timeout=60)
        api.close()
        ssh.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ready-after", type=float, default=2.0, help="the fake's create and delete time")
    args = parser.parse_args()
    floor = 2 * args.ready_after  # the fake's delete, then its create
    following, waiting = [], []
    for _ in range(args.rounds):  # interleaved: a noisy machine slows both alike
        with tempfile.TemporaryDirectory(prefix="jobtpu-bench-") as tmp:
            following.append(one_round(Path(tmp), args.interval, 5.0, args.ready_after))
        with tempfile.TemporaryDirectory(prefix="jobtpu-bench-") as tmp:
            waiting.append(one_round(Path(tmp), args.interval, args.interval, args.ready_after))
    f, w = statistics.median(following), statistics.median(waiting)
    print(f"preemption to running, manage --loop {args.interval:g}: following work in flight {f:.1f} s, "
          f"waiting the interval per stage {w:.1f} s, the fake's own operations {floor:.1f} s; "
          f"ratio {w / f:.1f}x; target: at most {args.interval + floor:.0f} s (one interval + the operations): "
          f"{'yes' if f <= args.interval + floor else 'NO'}")


if __name__ == "__main__":
    main()

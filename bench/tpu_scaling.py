"""A quiet `jobtpu manage` pass over TPU machines against its floor, and how fast a recreated node
runs its job again.

8 two-worker preemptible nodes on the fake TPU API (tests/fake_tpu.py, driven by the real
google-cloud-tpu client), whose workers are real sshd hosts (tests/sshfleet.py; run as root), one
running job each. Alternating rounds time (a) a quiet pass in-process and (b) the floor: a bare
parallel paramiko probe of the same 16 hosts plus one `list_nodes` of their zone. Prints medians and
the ratio (target: at most 1.5x). Then preempts one node, lets jobtpu recreate it, waits without
passes until the API says READY, and checks that the job is running again by the end of the next
pass (target: yes).

    sudo python3 bench/tpu_scaling.py [--nodes 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import paramiko  # noqa: E402
from google.api_core.client_options import ClientOptions  # noqa: E402
from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.cloud import tpu_v2  # noqa: E402
from manage_scaling import bare_probe, jobtpu  # noqa: E402

from tests.fake_tpu import FakeTpuApi  # noqa: E402
from tests.sshfleet import SshFleet  # noqa: E402
from tests.tpufleet import PROJECT, ZONE, TpuFleet, write_machines  # noqa: E402


def jobs_of(home: Path) -> dict[int, dict]:
    return {j["id"]: j for j in json.loads(jobtpu(home, "status", "--json", "--all-users"))["jobs"]}


def pass_until(home: Path, done, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not done(jobs_of(home)):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        jobtpu(home, "manage")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobtpu-bench-") as tmp:
        base = Path(tmp)
        ssh = SshFleet(base / "fleet")
        api = FakeTpuApi(ready_after=0.5)
        tpus = TpuFleet(ssh, api)
        api.worker_hooks = tpus
        api.start()
        try:
            names = [f"node-{i}" for i in range(args.nodes)]
            for name in names:
                tpus.add_node(name, workers=2, accelerator="v3-16", preemptible=True)
            home = base / "home"
            write_machines(home, tpus, {n: tpus.machine_spec(n) for n in names})
            src = base / "code"
            src.mkdir()
            (src / "train.py").write_text("print('hi')\n")
            for name in names:
                jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 600", "--machine", name)
            pass_until(home, lambda js: all(j["status"] == "running" for j in js.values()), "jobs to start")
            hosts = [h for n in names for h in tpus.nodes[n].hosts]
            key = paramiko.PKey.from_path(str(ssh.identity))
            client = tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                                      client_options=ClientOptions(api_endpoint=api.url))
            ours, floor = [], []
            for _ in range(args.rounds):
                t = time.perf_counter()
                bare_probe(hosts, key)
                list(client.list_nodes(request={"parent": f"projects/{PROJECT}/locations/{ZONE}"}, timeout=30))
                floor.append(time.perf_counter() - t)
                t = time.perf_counter()
                jobtpu(home, "manage")
                ours.append(time.perf_counter() - t)
            if not all(j["status"] == "running" and j["reason"] is None for j in jobs_of(home).values()):
                raise SystemExit("a job stopped running during the benchmark")
            o, f = statistics.median(ours), statistics.median(floor)
            print(f"{args.nodes} nodes x 2 workers: quiet pass {o * 1000:.0f} ms, bare probe of {len(hosts)} "
                  f"hosts + list_nodes {f * 1000:.0f} ms, ratio {o / f:.2f}x (target <= 1.5x)")

            # Recovery latency: preempt node-0, let jobtpu start recreating it, wait for READY, one pass.
            job_id = next(j["id"] for j in jobs_of(home).values() if j["machine"] == "node-0")
            api.preempt(ZONE, "node-0")
            pass_until(home, lambda js: js[job_id]["status"] == "queued", "the job to be queued again")
            deadline = time.monotonic() + 60
            while (api.node(ZONE, "node-0") or {}).get("state") != "READY":
                if time.monotonic() > deadline:
                    raise SystemExit("the node never came back READY")
                if not (api.node(ZONE, "node-0") or {}):
                    jobtpu(home, "manage")  # the delete finished: this pass starts the create
                time.sleep(0.1)
            t = time.perf_counter()
            jobtpu(home, "manage")
            took = time.perf_counter() - t
            job = jobs_of(home)[job_id]
            ok = job["status"] == "running" and job["attempt"] == 1
            print(f"node READY again -> next pass took {took * 1000:.0f} ms; job {job_id} afterwards: "
                  f"{job['status']} (attempt {job['attempt']}) -> {'yes' if ok else 'NO'} (target: running)")
        finally:
            api.close()
            ssh.close()


if __name__ == "__main__":
    main()

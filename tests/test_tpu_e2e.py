"""TPU machines end to end: the real google-cloud-tpu client against the fake TPU API, whose nodes'
workers are real sshd hosts; preemptions really kill the job and wipe the disk."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers import jobtpu, manage, wait_for
from tests.tpufleet import ZONE, TpuFleet, write_machines

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train"


def log_text(home: Path, job_id: int, attempt: int, worker: int = 0) -> str:
    path = home / "logs" / str(job_id) / f"{attempt}.{worker}.log"
    return path.read_text() if path.exists() else ""


def test_example_survives_two_preemptions(tmp_path: Path, tpus: TpuFleet) -> None:
    home = tmp_path / "home"
    node = tpus.add_node("tpu-a", workers=2, accelerator="v3-16", preemptible=True)
    write_machines(home, tpus, {"v3-16-p1": tpus.machine_spec(
        "tpu-a", runtime_version="tpu-ubuntu2204-base", setup=["echo ran >> ~/setup.log"])})
    # Checkpoints live outside the TPU's disk, like a GCS bucket; the workers' user must reach it.
    bucket = Path(tempfile.mkdtemp(prefix="jobtpu-bucket-"))
    bucket.chmod(0o777)
    args = "--steps 300 --step-seconds 0.05 --ckpt-every 10"
    job_id = int(jobtpu(home, "submit", "--dir", str(EXAMPLE), "--req", "v3-16",
                        "--cmd", f"bash run_remote.sh {args} --ckpt-dir {bucket}").stdout)

    for preemption in range(2):
        # Run until the attempt has checkpointed past its start, then preempt the node.
        def checkpointed(preemption: int = preemption) -> bool:
            jobs = manage(home)
            text = log_text(home, job_id, preemption)
            assert jobs[job_id]["status"] in ("queued", "launching", "running"), jobs[job_id]
            return jobs[job_id]["status"] == "running" and text.count("(checkpoint)") >= 2
        wait_for(checkpointed, timeout=90, interval=0.3, what=f"attempt {preemption} to checkpoint")
        tpus.api.preempt(ZONE, "tpu-a")

    job = wait_for(lambda: (j := manage(home)[job_id])["status"] in ("finished", "failed") and j,
                   timeout=120, interval=0.3, what="the job to end")
    assert (job["status"], job["attempt"]) == ("finished", 2), job
    assert [a["outcome"] for a in job["attempts"]] == ["preempted", "preempted", "finished"]
    assert tpus.api.count("DELETE", "/nodes/tpu-a") == 2
    assert tpus.api.count("POST", "/nodes") >= 2
    # Setup ran on both workers of the newest incarnation (the disk was wiped at recreation).
    assert (node.home / "setup.log").read_text().split() == ["ran", "ran"]
    # Every attempt's log is readable; resumed attempts saw JOBTPU_RESUME=1 and their checkpoint.
    for attempt in (0, 1, 2):
        out = jobtpu(home, "tail", str(job_id), "--attempt", str(attempt), "-n", "1000").stdout
        assert f"attempt {attempt} worker 0/2" in out
        assert ("resume=1" in out and "resumed from step" in out) == (attempt > 0)
    # Same result as an uninterrupted run.
    clean = tmp_path / "clean"
    clean.mkdir()
    subprocess.run([sys.executable, str(EXAMPLE / "train.py"), *args.split(), "--step-seconds", "0",
                    "--ckpt-dir", str(clean / "ckpt")], cwd=clean, check=True, capture_output=True,
                   env={**os.environ, "JOBTPU_RESUME": "0"})
    jobtpu(home, "fetch", str(job_id), "result.json", "--to", str(tmp_path / "fetched"))
    shutil.rmtree(bucket)
    assert json.loads((tmp_path / "fetched" / "result.json").read_text()) == \
        json.loads((clean / "result.json").read_text())


def test_a_preempted_attempts_log_outlives_its_vms_under_a_minute_loop(tmp_path: Path, tpu_pods: TpuFleet) -> None:
    """docs/reference/commands.md §2.3: under `manage --loop` with a long interval, what a pod job's
    workers printed comes home through the kept connections between passes, so a preemption (which
    wipes each worker's own disk at recreation) takes none of it; the loop notices the preemption and
    carries the recovery through without waiting its interval, and `tail` of the gone attempt says
    what the home kept."""
    from jobtpu import timing
    from tests.helpers import JOBTPU

    tpus = tpu_pods
    workers = 4
    tpus.add_node("tpu-p", workers=workers, accelerator="v3-32", preemptible=True, own_disks=True)
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3-32-p1": tpus.machine_spec("tpu-p", runtime_version="tpu-ubuntu2204-base")})
    src = tmp_path / "src"
    src.mkdir()
    cmd = ('for e in 1 2 3 4; do echo "epoch $e of worker $JOBTPU_WORKER"; done; '
           'if [ "$JOBTPU_RESUME" = 1 ]; then echo resumed; exit 0; fi; sleep 600')
    job_id = int(jobtpu(home, "submit", "--dir", str(src), "--req", "v3-32", "--cmd", cmd).stdout)
    env = {**os.environ, "JOBTPU_USER": "tester", **timing.env(log_stream=0.3, spool_poll=0.1, busy_interval=0.3)}
    # A minute's interval and more: the test ends long before a second interval-paced pass could run.
    loop = subprocess.Popen([*JOBTPU, "--home", str(home), "manage", "--loop", "600"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: all("epoch 4" in log_text(home, job_id, 0, w) for w in range(workers)),
                 timeout=120, interval=0.2, what="every worker's four epochs home")
        tpus.api.preempt(ZONE, "tpu-p")
        wait_for(lambda: "resumed" in log_text(home, job_id, 1, 0), timeout=120, interval=0.2,
                 what="the job resumed on the recreated node, with no pass at the interval")
        job = wait_for(lambda: (j := json.loads(jobtpu(home, "status", str(job_id), "--json").stdout)["jobs"][0])
                       ["status"] == "finished" and j, timeout=120, interval=0.2, what="the job to finish")
    finally:
        os.killpg(loop.pid, signal.SIGINT)
        loop.wait(timeout=60)
    assert "Traceback" not in (loop.stderr.read() if loop.stderr else "")
    assert [a["outcome"] for a in job["attempts"]] == ["preempted", "finished"], job
    # The recreated node's disks are new: the attempt's lines survive only in the home.
    for w in range(workers):
        meta = tpus.disk("tpu-p", w) / "jobtpu" / "meta" / str(job_id)
        assert (meta / f"1.{w}.log").exists() and not (meta / f"0.{w}.log").exists()
        assert log_text(home, job_id, 0, w).splitlines() == [f"epoch {e} of worker {w}" for e in (1, 2, 3, 4)]
    out = jobtpu(home, "tail", str(job_id), "--attempt", "0", "--worker", "3")
    assert out.stdout.splitlines() == [f"epoch {e} of worker 3" for e in (1, 2, 3, 4)]
    assert "above is what the home kept" in out.stderr, out.stderr

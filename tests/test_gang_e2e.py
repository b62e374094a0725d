"""Multislice gangs end to end (docs/reference/commands.md §2.2.10): two TPU slices of two workers
each on the fake TPU API, whose workers are real sshd hosts. Each worker's environment is dumped
and checked; no slice starts while the gang cannot be completed; one slice's node preempted stops
the job on the other within one pass, and the whole gang resumes there, its surviving slice never
given to another job meanwhile."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import jobtpu, manage, passes_until, submit
from tests.tpufleet import ZONE, TpuFleet, tpu_home

DUMP = "env | grep -E '^(JOBTPU|MEGASCALE)_' | LC_ALL=C sort"


def _log(home: Path, job_id: int, attempt: int, worker: int) -> str:
    path = home / "logs" / str(job_id) / f"{attempt}.{worker}.log"
    return path.read_text() if path.exists() else ""


def _env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_gang_starts_only_when_every_slice_is_free_and_each_worker_knows_its_slice(
        tmp_path: Path, tpus: TpuFleet) -> None:
    for name in ("tpu-a", "tpu-b"):
        tpus.add_node(name, workers=2, accelerator="v4-16", own_network=True)
    home = tpu_home(tmp_path, tpus, {n: tpus.machine_spec(n, use_external_ip=True) for n in ("tpu-a", "tpu-b")})
    src = tmp_path / "src"
    blocker = submit(home, src, "sleep 600", "--machine", "tpu-b")
    passes_until(home, lambda jobs: jobs[blocker]["status"] == "running", "the blocker to run")
    gang = submit(home, src, f"{DUMP}; sleep 1", "--slices", "2", "--req", "v4-16")
    for _ in range(2):  # tpu-b is busy: nothing of the gang starts, on tpu-a either
        job = manage(home)[gang]
        assert (job["status"], job["attempts"]) == ("queued", []), job
        assert job["waiting"].startswith("needs 2 slices of v4-16: 1 ready, 1 busy"), job["waiting"]
        assert not (home / "logs" / str(gang)).exists()
    jobtpu(home, "kill", str(blocker))
    job = passes_until(home, lambda jobs: jobs[gang]["status"] in ("finished", "failed"), "the gang to end",
                       timeout=90)[gang]
    assert (job["status"], job["attempts"][0]["gang"], job["attempts"][0]["workers"]) == (
        "finished", ["tpu-a", "tpu-b"], 4), job
    coordinator = f"{tpus.internal_address('tpu-a', 0)}:8081"
    for worker in range(4):
        s, i = divmod(worker, 2)
        node = ("tpu-a", "tpu-b")[s]
        env = _env(_log(home, gang, 0, worker))
        hosts = ",".join(tpus.internal_address(node, w) for w in range(2))
        assert {k: env.get(k) for k in ("JOBTPU_SLICE", "JOBTPU_SLICES", "JOBTPU_WORKER", "JOBTPU_NUM_WORKERS",
                                        "JOBTPU_MACHINE", "JOBTPU_HOSTS", "MEGASCALE_COORDINATOR_ADDRESS",
                                        "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT")} == {
            "JOBTPU_SLICE": str(s), "JOBTPU_SLICES": "2", "JOBTPU_WORKER": str(i), "JOBTPU_NUM_WORKERS": "2",
            "JOBTPU_MACHINE": node, "JOBTPU_HOSTS": hosts, "MEGASCALE_COORDINATOR_ADDRESS": coordinator,
            "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": str(s), "MEGASCALE_PORT": "8081"}, (worker, env)
        assert env["JOBTPU_COORDINATOR"].startswith(tpus.internal_address(node, 0) + ":")
    # Seen as one: tail names a worker by its slice, and a slice the gang has not is one line.
    shown = jobtpu(home, "tail", str(gang), "--slice", "1", "--worker", "1").stdout
    assert "JOBTPU_SLICE=1" in shown and "JOBTPU_WORKER=1" in shown and "MEGASCALE_SLICE_ID=1" in shown
    wrong = jobtpu(home, "tail", str(gang), "--slice", "2", check=False)
    assert wrong.returncode == 2 and wrong.stderr.startswith(
        f"jobtpu: error: job {gang} has 2 slices of 2 workers; --slice 2 --worker 0 is none of them"), wrong.stderr
    table = jobtpu(home, "status", "--all", "--all-users", env={"COLUMNS": "200"}).stdout
    row = next(line for line in table.splitlines() if line.split()[:1] == [str(gang)])
    assert "2 slices: tpu-a,tpu-b" in row, table


def test_one_slice_preempted_stops_the_other_within_a_pass_and_the_gang_resumes_keeping_its_machines(
        tmp_path: Path, tpus: TpuFleet) -> None:
    for name in ("tpu-a", "tpu-b"):
        tpus.add_node(name, workers=2, accelerator="v4-16")
    home = tpu_home(tmp_path, tpus, {n: tpus.machine_spec(n) for n in ("tpu-a", "tpu-b")})
    src = tmp_path / "src"
    cmd = 'echo "slice $JOBTPU_SLICE resume $JOBTPU_RESUME"; [ "$JOBTPU_RESUME" = 1 ] && exit 0; exec sleep 600'
    gang = submit(home, src, cmd, "--slices", "2", "--req", "v4-16", "--rule", "pre", "--grace", "2s")
    passes_until(home, lambda jobs: jobs[gang]["status"] == "running", "the gang to run", timeout=60)
    other = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--req", "v4-16",
                       env={"JOBTPU_USER": "someone"}).stdout)
    tpus.api.preempt(ZONE, "tpu-b")
    job = manage(home)[gang]  # one pass: the job is stopped on tpu-a too, and queued to resume on both
    assert (job["status"], job["attempts"][0]["outcome"], job["keeps"]) == (
        "queued", "preempted", ["tpu-a", "tpu-b"]), job
    assert "resume 0" in _log(home, gang, 0, 0)

    def kept(jobs: dict[int, dict]) -> None:  # every pass until the gang runs again: tpu-a is no one else's
        if jobs[gang]["status"] != "finished":  # the pass that ends the gang may start the other job
            assert jobs[other]["status"] == "queued", jobs[other]
        if jobs[gang]["status"] == "queued":
            assert "tpu-a kept for job" in jobs[other]["waiting"], jobs[other]["waiting"]

    job = passes_until(home, lambda jobs: jobs[gang]["status"] == "finished", "the gang to resume and finish",
                       timeout=120, each=kept)[gang]
    assert [(a["outcome"], a.get("gang")) for a in job["attempts"]] == [
        ("preempted", ["tpu-a", "tpu-b"]), ("finished", ["tpu-a", "tpu-b"])], job
    for worker in range(4):
        assert f"slice {worker // 2} resume 1" in _log(home, gang, 1, worker), worker
    passes_until(home, lambda jobs: jobs[other]["status"] == "finished", "the other job to run after it")

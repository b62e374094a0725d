"""A gang on one machines.json entry of N slices, end to end (docs/reference/commands.md §2.2.10 and
docs/reference/machines-json.md §3.3 `slices`): the fake TPU API's one multislice queued resource,
whose nodes' workers are real sshd hosts. The pass makes the queued resource, sets every worker up and
starts the gang on `<name>-0`, `<name>-1` with each worker's slice in its environment; one node
preempted stops the job on the other slice within one pass, the whole queued resource comes back,
and the gang resumes on both with JOBTPU_RESUME=1, no other job taking a slice meanwhile."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import jobtpu, manage, passes_until, submit
from tests.test_slices_e2e import slices_home
from tests.tpufleet import ZONE, TpuFleet

CMD = ('echo "slice $JOBTPU_SLICE of $MEGASCALE_NUM_SLICES id $MEGASCALE_SLICE_ID machine $JOBTPU_MACHINE '
       'resume $JOBTPU_RESUME"; [ "$JOBTPU_RESUME" = 1 ] && exit 0; exec sleep 600')


def _log(home: Path, job_id: int, attempt: int, worker: int) -> str:
    path = home / "logs" / str(job_id) / f"{attempt}.{worker}.log"
    return path.read_text() if path.exists() else ""


def test_a_gang_on_a_slice_group_runs_is_preempted_and_resumes_on_the_recreated_group(
        tmp_path: Path, tpu_pods: TpuFleet) -> None:
    tpus = tpu_pods
    home, _ = slices_home(tmp_path, tpus)
    src = tmp_path / "src"
    gang = submit(home, src, CMD, "--slices", "2", "--req", "v3-16", "--rule", "pre", "--grace", "2s")
    job = passes_until(home, lambda jobs: jobs[gang]["status"] == "running", "the gang to run on the group",
                       timeout=120)[gang]
    assert job["attempts"][0]["gang"] == ["big-0", "big-1"] and job["attempts"][0]["workers"] == 4, job
    assert tpus.api.count("POST", "/queuedResources") == 1
    lines = [f"slice {w // 2} of 2 id {w // 2} machine big-{w // 2} resume 0" for w in range(4)]
    passes_until(home, lambda _: all(line in _log(home, gang, 0, w) for w, line in enumerate(lines)),
                 "every worker's environment in its log")
    other = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--req", "v3-16",
                       env={"JOBTPU_USER": "someone"}).stdout)

    tpus.api.preempt(ZONE, "ms-1")  # one node of the queued resource; slice 0's workers live on
    job = manage(home)[gang]  # one pass: stopped on big-0 too, queued to resume on both
    assert (job["status"], job["attempts"][0]["outcome"], job.get("keeps")) == (
        "queued", "preempted", ["big-0", "big-1"]), job

    def kept(jobs: dict[int, dict]) -> None:  # until the gang runs again, neither slice is another job's
        if jobs[gang]["status"] != "finished":
            assert jobs[other]["status"] == "queued", jobs[other]

    job = passes_until(home, lambda jobs: jobs[gang]["status"] == "finished", "the gang to resume and finish",
                       timeout=180, each=kept)[gang]
    assert [(a["outcome"], a.get("gang")) for a in job["attempts"]] == [
        ("preempted", ["big-0", "big-1"]), ("finished", ["big-0", "big-1"])], job
    assert tpus.api.count("DELETE", "/queuedResources/ms") == 1 and tpus.api.count("POST", "/queuedResources") == 2
    for worker in range(4):
        s = worker // 2
        assert f"slice {s} of 2 id {s} machine big-{s} resume 1" in _log(home, gang, 1, worker), worker
    passes_until(home, lambda jobs: jobs[other]["status"] == "finished", "the other job to run after it")

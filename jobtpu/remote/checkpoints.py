"""The checkpoint copy a resume in another region makes from its new worker 0 before the workers start
(sh/checkpoints.sh; docs/reference/job-environment.md §8.2.1): its script and what it says."""

from __future__ import annotations

from jobtpu.decide.workers import WorkerRef
from jobtpu.remote.scripts import call, render
from jobtpu.schema import worker_protocol as protocol


def checkpoint_copy_script(root: str, ref: WorkerRef, src: str, dst: str) -> str:
    """On worker 0, before the attempt's workers start: `gcloud storage rsync -r SRC DST`, once per
    attempt. A `copy` report (parse_copy)."""
    return render(("common.sh", "checkpoints.sh"), [call("jobtpu_checkpoint_copy", root, ref.job, ref.attempt, src, dst)])


def parse_copy(stdout: str) -> str | None:
    """None when the copy is done; else why not, in one line."""
    said = protocol.of_kind(protocol.reports(stdout), protocol.Copied)
    if not said:
        return "the checkpoint copy said nothing"
    return None if said[0].outcome == "ok" else said[0].detail.strip() or "no reason given"

"""Classify how an attempt failed and decide what its rule does about it (docs/reference.md §7). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from . import model

if TYPE_CHECKING:
    from .model import Job

RULES = model.RULES
RETRIABLE = frozenset({model.GRPC, model.LOST, model.HANG})

# Recovery words, stored in an Ending and acted on by the pass.
RESUME = "resume"
RERUN = "rerun"
RECREATE_RESUME = "recreate-resume"
RECREATE_RERUN = "recreate-rerun"


def classify(exit_code: int, log_tail: str, patterns: Mapping[str, Sequence[str]]) -> str:
    """A non-zero exit becomes `oom` or `grpc` when the log tail shows it, else `exit N`.
    oom is checked first: an out-of-memory crash often ends in a cascade of RPC errors."""
    for word in (model.OOM, model.GRPC):
        if any(pattern in log_tail for pattern in patterns.get(word, ())):
            return word
    return model.exit_reason(exit_code)


def recovery(rule: str, reason: str, recoveries: int, max_recoveries: int) -> str | None:
    """What to do with an attempt that ended with `reason`: a recovery word, or None to mark it failed."""
    if recoveries >= max_recoveries:
        return None
    if reason == model.PREEMPTED:
        return {"pre": RECREATE_RESUME, "reapply": RECREATE_RESUME, "rerun": RECREATE_RERUN}.get(rule)
    if reason in RETRIABLE:
        return {"pre": RESUME, "reapply": RECREATE_RESUME, "rerun": RERUN, "resume": RESUME}.get(rule)
    return None  # exit N, oom, timeout, launch_failed, killed: never retried automatically


# ---- --retries and dependencies ------------------------------------------------------------------

def retry(rule: str, reason: str, retried: int, retries: int) -> str | None:
    """--retries: an attempt that exited non-zero (`exit N`, or `grpc` the rule did not recover; never
    oom, timeout, hang, lost or killed) goes again while retries are left, through the rule's rerun
    when the rule is `rerun`, else resuming from its checkpoints. None: no retry."""
    if retried >= retries or not (reason == model.GRPC or reason.startswith("exit ")):
        return None
    return RERUN if rule == "rerun" else RESUME


def failed_dependency(job: Job, by_id: Mapping[int, Job]) -> Job | None:
    """A job named by --after that ended without finishing: the waiting job can never start."""
    for job_id in job.after:
        dep = by_id.get(job_id)
        if dep is not None and dep.ended and dep.status != model.Status.FINISHED:
            return dep
    return None


def waits_for(job: Job, by_id: Mapping[int, Job]) -> str | None:
    """The pending reason of a job whose dependencies have not all ended ("waits for job 12
    (running)"), or None when it may start. A dependency no longer in state.json was cleaned after
    it ended (`clean` settles its waiting jobs first) or deleted by hand: it is not waited for."""
    pending = [dep for job_id in (*job.after, *job.after_any)
               if (dep := by_id.get(job_id)) is not None
               and not (dep.ended and (dep.status == model.Status.FINISHED or job_id not in job.after))]
    if not pending:
        return None
    shown = ", ".join(f"{dep.id} ({dep.status})" for dep in pending[:3])
    more = f" and {len(pending) - 3} more" if len(pending) > 3 else ""
    return f"waits for job{'s' if len(pending) > 1 else ''} {shown}{more}"

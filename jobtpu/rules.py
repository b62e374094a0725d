"""Classify how an attempt failed and decide what its rule does about it (docs/reference.md §7). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import model

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

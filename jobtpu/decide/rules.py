"""Classify how an attempt failed and decide what its rule does about it (docs/reference/requests-and-rules.md §7). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from jobtpu.schema import state as model

if TYPE_CHECKING:
    from jobtpu.schema.state import Job

RULES = model.RULES
RETRIABLE = frozenset({model.GRPC, model.LOST, model.HANG})

# Recovery words, stored in an Ending and acted on by the pass.
Recovery = model.Recovery
RESUME, RERUN = Recovery.RESUME, Recovery.RERUN
RECREATE_RESUME, RECREATE_RERUN = Recovery.RECREATE_RESUME, Recovery.RECREATE_RERUN


def classify(exit_code: int, log_tail: str, patterns: Mapping[str, Sequence[str]]) -> str:
    """A non-zero exit becomes `oom` or `grpc` when the log tail shows it, else `exit N`; patterns
    match in any case, as the old TPU manager's did (`GRPC Error`, `grpc error`).
    oom is checked first: an out-of-memory crash often ends in a cascade of RPC errors."""
    tail = log_tail.casefold()
    for word in (model.OOM, model.GRPC):
        if any(pattern.casefold() in tail for pattern in patterns.get(word, ())):
            return word
    return model.exit_reason(exit_code)


def recovery(rule: str, reason: str, recoveries: int, max_recoveries: int) -> Recovery | None:
    """What to do with an attempt that ended with `reason`: a recovery word, or None to mark it failed."""
    if recoveries >= max_recoveries:
        return None
    if reason == model.PREEMPTED:
        return {"pre": RECREATE_RESUME, "reapply": RECREATE_RESUME, "rerun": RECREATE_RERUN}.get(rule)
    if reason in RETRIABLE:
        return {"pre": RESUME, "reapply": RECREATE_RESUME, "rerun": RERUN, "resume": RESUME}.get(rule)
    return None  # exit N, oom, timeout, launch_failed, killed: never retried automatically


# ---- --retries and dependencies ------------------------------------------------------------------

def retry(rule: str, reason: str, retried: int, retries: int) -> Recovery | None:
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


def dependency_cycles(jobs: Iterable[Job]) -> dict[int, tuple[int, ...]]:
    """Queued jobs that wait for each other in a ring (only a hand edit of state.json makes one:
    submit refuses it): job id → the ids of its ring, sorted. None of them can ever start. Linear
    in the jobs and their dependencies (Tarjan's strongly connected components, without recursion)."""
    queued = {j.id: j for j in jobs if j.status == model.Status.QUEUED and (j.after or j.after_any)}
    edges = {i: [d for d in dict.fromkeys((*j.after, *j.after_any)) if d in queued] for i, j in queued.items()}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: dict[int, tuple[int, ...]] = {}
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                ring = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    ring.append(member)
                    if member == node:
                        break
                if len(ring) > 1 or node in edges[node]:
                    members = tuple(sorted(ring))
                    found.update(dict.fromkeys(members, members))
    return found


def cycle_text(ring: tuple[int, ...]) -> str:
    """How a ring is named in a line: "jobs 3, 4 and 5 wait for each other (--after)"."""
    if len(ring) == 1:
        return f"job {ring[0]} waits for itself (--after)"
    shown = [str(i) for i in ring[:10]]
    more = f" and {len(ring) - 10} more" if len(ring) > 10 else ""
    listed = ", ".join(shown[:-1]) + f" and {shown[-1]}" if not more else ", ".join(shown) + more
    return f"jobs {listed} wait for each other (--after)"


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

"""Classify how an attempt failed and decide what its rule does about it (docs/reference/requests-and-rules.md §7). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from jobtpu import timing
from jobtpu.schema import exit_codes
from jobtpu.schema import state as model
from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Machine
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


# ---- causes and their budgets (docs/reference/requests-and-rules.md §7.3) ------------------------

PREEMPTION, INFRASTRUCTURE, OWN = "preemption", "infrastructure", "own failure"
# Each reason an attempt ends with, by whose doing: the cloud took the TPU back; the machine, its
# network or its runtime failed (a lost worker, a gRPC error, a hang, a launch its worker refused);
# the job's own program failed. killed, dependency and home_file are no failure of an attempt.
CAUSES: dict[str, str] = {model.PREEMPTED: PREEMPTION, model.LOST: INFRASTRUCTURE, model.GRPC: INFRASTRUCTURE,
                          model.HANG: INFRASTRUCTURE, model.LAUNCH_FAILED: INFRASTRUCTURE,
                          model.OOM: OWN, model.TIMEOUT: OWN}


def cause_of(reason: str | None) -> str | None:
    """The cause an ending reason counts under (`exit N` is the job's own), or None."""
    if reason is not None and reason.startswith("exit "):
        return OWN
    return CAUSES.get(reason or "")


class Budget(msgspec.Struct, frozen=True):
    """How many recoveries of one cause a run has made, how many it may make (None: no limit), the
    option that sets it, and the word `status` shows its count by."""

    used: int
    limit: int | None
    option: str
    short: str  # the word of one, "preemption"; `spent` says "1 preemption", "3 preemptions"

    @property
    def spent(self) -> str:
        """The one line a job that fails on this budget ends with."""
        return spent_line(self.limit or 0, self.short, self.option)


_PLURALS = {"preemption": "preemptions", "infrastructure recovery": "infrastructure recoveries", "retry": "retries"}


def spent_line(n: int, one: str, option: str) -> str:
    """The line a job that used up a budget ends with: `1 retry used, …`, `2 retries used, …`."""
    return f"{n} {one if n == 1 else _PLURALS[one]} used, the most {option} allows"


def budget(job: Job, reason: str) -> Budget | None:
    """The budget a rule's recovery from `reason` spends: preemptions count apart (no limit unless
    --max-preemptions gives one), every other recovery is infrastructure's (--max-recoveries)."""
    cause = cause_of(reason)
    if cause == PREEMPTION:
        return Budget(job.preemptions, job.max_preemptions, "--max-preemptions", "preemption")
    if cause == INFRASTRUCTURE:
        return Budget(job.recoveries, job.max_recoveries, "--max-recoveries", "infrastructure recovery")
    return None


def recovery(rule: str, reason: str, recoveries: int, max_recoveries: int | None) -> Recovery | None:
    """What to do with an attempt that ended with `reason`: a recovery word, or None to mark it failed.
    `recoveries` of `max_recoveries` (None: no limit) are those of the reason's own budget."""
    if max_recoveries is not None and recoveries >= max_recoveries:
        return None
    if reason == model.PREEMPTED:
        return {"pre": RECREATE_RESUME, "reapply": RECREATE_RESUME, "rerun": RECREATE_RERUN}.get(rule)
    if reason in RETRIABLE:
        return {"pre": RESUME, "reapply": RECREATE_RESUME, "rerun": RERUN, "resume": RESUME}.get(rule)
    return None  # exit N, oom, timeout, launch_failed, killed: never recovered by the rule


def stall_of(job: Job, machine: Machine) -> float | None:
    """The --stall an attempt on `machine` keeps: the job's own; when it gave none, a preemptible TPU's
    default (timing's stall_default: a hang there is the usual way a lost peer shows, and nothing else
    would end it); `--stall 0` (kept as 0) turns it off. None: no stall watch."""
    if job.stall is not None:
        return float(job.stall) or None
    if machine.cloud_node and machine.preemptible:
        return timing.current().stall_default or None
    return None


# ---- --retries and dependencies ------------------------------------------------------------------

def retry(rule: str, reason: str, retried: int, retries: int, exit_code: int | None = None,
          on_exit: str | None = None) -> Recovery | None:
    """--retries: an attempt that exited non-zero (`exit N`, or `grpc` the rule did not recover; never
    oom, timeout, hang, lost or killed) goes again while retries are left, through the rule's rerun
    when the rule is `rerun`, else resuming from its checkpoints. With --retry-on-exit (`on_exit`)
    only an exit code it lists is retried. None: no retry."""
    if retried >= retries or not retriable(reason, exit_code, on_exit):
        return None
    return RERUN if rule == "rerun" else RESUME


def retriable(reason: str, exit_code: int | None, on_exit: str | None) -> bool:
    """Whether --retries may retry an attempt that ended so (its budget aside)."""
    if not (reason == model.GRPC or reason.startswith("exit ")):
        return False
    return on_exit is None or exit_codes.listed(on_exit, exit_code)


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

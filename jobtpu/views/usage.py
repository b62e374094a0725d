"""`report --usage`: accelerator time by user and by machine over a period, as `sreport` and
`sacct -S` give a lead (docs/reference/commands.md §2.26): chip-hours (a TPU's chips) and GPU-hours
(the GPUs a job asked for) used, and lost to preemption. Pure: from the jobs' goodput reports.

Used: each attempt's wall time on its machine inside the period, times what it held. Lost to
preemption: for each attempt a preemption (or a lost VM) ended, the work the next attempt did again
(goodput's *work redone*), times what it held; when no progress was reported, the whole interrupted
attempt counts, and the table says so."""

from __future__ import annotations

from collections.abc import Iterable

from jobtpu.schema.job_report import JobReport
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import LOST, PREEMPTED

INTERRUPTED = (PREEMPTED, LOST)  # the reason words of attempts whose work may be done again


class Usage(msgspec.Struct):
    """One row: chip- and GPU-seconds used and lost."""

    used: dict[str, float] = msgspec.field(default_factory=dict)  # unit ("chip", "GPU") → seconds × count
    lost: dict[str, float] = msgspec.field(default_factory=dict)
    whole_attempts: bool = False  # some loss counted whole attempts (no progress reported)


def usage(reports: Iterable[tuple[str, JobReport]], since: float, now: float) -> tuple[dict[str, Usage], dict[str, Usage]]:
    """By user and by machine, for jobs' (user, report) over [since, now]."""
    by_user: dict[str, Usage] = {}
    by_machine: dict[str, Usage] = {}
    for user, report in reports:
        redone = {gap.after: gap.redone for gap in report.interruptions}
        for cost in report.attempts:
            if not cost.accelerator or cost.wall <= 0:
                continue
            held = cost.accelerator / cost.wall
            end = cost.ended if cost.ended is not None else now
            inside = max(0.0, min(end, now) - max(cost.started, since))
            lost, whole = 0.0, False
            if cost.outcome in INTERRUPTED and since <= end <= now:
                again = redone.get(cost.n)
                lost, whole = (cost.running, True) if again is None else (again, False)
            for row in (by_user.setdefault(user, Usage()), by_machine.setdefault(cost.machine, Usage())):
                row.used[cost.unit] = row.used.get(cost.unit, 0.0) + inside * held
                row.lost[cost.unit] = row.lost.get(cost.unit, 0.0) + lost * held
                row.whole_attempts = row.whole_attempts or whole
    return by_user, by_machine


def render_usage(by_user: dict[str, Usage], by_machine: dict[str, Usage], period: str) -> str:
    """Two plain tables (users, then machines), hours with one decimal."""
    lines = [f"accelerator use {period}: chip-hours and GPU-hours used, and lost to preemption (work done again)"]
    whole = False
    for title, rows in (("user", by_user), ("machine", by_machine)):
        width = max([len(title), *map(len, rows)])
        lines.append("")
        lines.append(f"{title:<{width}}  {'chip-h used':>11}  {'chip-h lost':>11}  {'GPU-h used':>10}  {'GPU-h lost':>10}")
        for name in sorted(rows, key=lambda n: (-sum(rows[n].used.values()), n)):
            row = rows[name]
            whole = whole or row.whole_attempts
            cells = [row.used.get("chip", 0.0), row.lost.get("chip", 0.0), row.used.get("GPU", 0.0),
                     row.lost.get("GPU", 0.0)]
            lines.append(f"{name:<{width}}  {cells[0] / 3600:>11.1f}  {cells[1] / 3600:>11.1f}  "
                         f"{cells[2] / 3600:>10.1f}  {cells[3] / 3600:>10.1f}")
        if not rows:
            lines.append("(none)")
    if whole:
        lines.append("")
        lines.append("some jobs reported no progress (--progress, JOBTPU_PROGRESS): their preempted attempts count whole")
    return "\n".join(lines)

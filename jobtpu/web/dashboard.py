"""What the jobs page of `jobtpu serve` puts first (docs/reference/commands.md §2.29), as pure
functions of the jobs: the order its rows read in (work on machines, then work waiting, then what
ended, newest first) and the summary above them (per user and per machine: chips or GPUs in use,
running, queued, failed today). No file, no clock: the caller passes the jobs, the time and how many
chips a job holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.schema.state import Job

# A lead looks for what holds machines now, then what waits for them; what ended reads last.
WORK_RANK = {"launching": 0, "running": 0, "killing": 0, "queued": 1}
ENDED_RANK = 2


def work_first(items: Sequence[Job | list[Job]]) -> list[Job | list[Job]]:
    """The rows in the order the page shows them: active jobs, then queued (held ones after those
    that may start), each in the table's own order, then ended jobs, the last to end first. A
    collapsed sweep's queued members (a list) stand with the queued."""
    from jobtpu.views.rows import ended_at

    def key(item: Job | list[Job]) -> tuple[int, float]:
        job = item[0] if isinstance(item, list) else item
        rank = WORK_RANK.get(str(job.status), ENDED_RANK)
        if rank == 1 and job.held:
            return (1, 1.0)
        return (rank, -ended_at(job) if rank == ENDED_RANK else 0.0)
    return sorted(items, key=key)  # stable: the table's own order within each rank


class Tally(msgspec.Struct):
    """One row of the summary: a user's or a machine's."""

    name: str
    running: int = 0
    in_use: dict[str, int] = msgspec.field(default_factory=dict)  # unit ("chip", "GPU") → how many held now
    queued: int = 0
    failed_today: int = 0

    @property
    def in_use_text(self) -> str:
        """`8 chips, 2 GPUs`; `-` when nothing is held (or the count is unknown)."""
        parts = [f"{n} {unit}{'s' if n != 1 else ''}" for unit, n in sorted(self.in_use.items()) if n]
        return ", ".join(parts) or "-"


class Summary(msgspec.Struct):
    users: list[Tally]
    machines: list[Tally]


Chips = Callable[["Job"], "tuple[int | None, str]"]


def summary(jobs: Sequence[Job], chips: Chips, today: float) -> Summary:
    """Per user and per machine: what the active jobs hold (`chips(job)`: count and unit, as `report`
    counts them), how many run and wait, and how many failed since `today` (the viewer's midnight).
    A queued job counts for its user only: no machine is its own until it starts."""
    users: dict[str, Tally] = {}
    machines: dict[str, Tally] = {}

    def of(table: dict[str, Tally], name: str) -> Tally:
        found = table.get(name)
        if found is None:  # made once per name: ten thousand jobs make a few Tallies
            found = table[name] = Tally(name)
        return found
    for job in jobs:
        status = job.status.value
        if status == "finished" or status == "killed":  # most of a big home: nothing to count
            continue
        user = of(users, job.user)
        machine = job.machine or (job.attempts[-1].machine if job.attempts else "")
        if status in ("launching", "running", "killing"):
            n, unit = chips(job)  # one machine's: a gang (submit --slices) holds as much on each of its slices
            names = job.gang or ([machine] if machine else [])
            user.running += 1
            if n:
                user.in_use[unit] = user.in_use.get(unit, 0) + n * max(1, len(names))
            for name in names:  # one job, on every machine it holds
                tally = of(machines, name)
                tally.running += 1
                if n:
                    tally.in_use[unit] = tally.in_use.get(unit, 0) + n
        elif status == "queued":
            user.queued += 1
        elif status == "failed" and _ended(job) >= today:
            user.failed_today += 1
            if machine:
                of(machines, machine).failed_today += 1
    return Summary(sorted(users.values(), key=lambda t: t.name), sorted(machines.values(), key=lambda t: t.name))


def _ended(job: Job) -> float:
    from jobtpu.views.rows import ended_at

    return ended_at(job)



# The record's fields a job page's last part shows, in this order, with their words; the others
# follow under their own names. Attempts, events and logs have their own parts above.
DETAIL_WORDS = (("cmd", "command"), ("req", "requests"), ("overrides", "overrides"), ("pin", "pinned to"),
                ("priority", "priority"), ("rule", "rule"), ("sweep", "sweep"), ("sweep_values", "sweep values"),
                ("after", "after"), ("after_any", "after any of"), ("retries", "retries"), ("timeout", "timeout (s)"),
                ("stall", "stall (s)"), ("env", "environment"), ("dir", "working directory"), ("created", "submitted"))
NOT_DETAILS = frozenset({"attempts", "id", "name", "user", "status", "note", "tags", "archive", "alloc", "log_size",
                         "log_grew", "last_line", "ending"})
TIMES = frozenset({"created", "at"})


def job_details(record: dict[str, object], clock: Callable[[float], str]) -> list[tuple[str, str]]:
    """A job's record as a reader takes it in: (words, value) lines, the fields that say how it runs
    first, empty ones left out, times on the viewer's clock, lists and maps as one line each."""
    def text(key: str, value: object) -> str:
        if key in TIMES and isinstance(value, int | float):
            return clock(float(value))
        if isinstance(value, dict):
            return " ".join(f"{k}={text(k, v)}" for k, v in value.items())
        if isinstance(value, list):
            return ", ".join(text(key, v) for v in value)
        return str(value)
    words = dict(DETAIL_WORDS)
    keys = [k for k, _ in DETAIL_WORDS if k in record] + sorted(k for k in record if k not in words)
    return [(words.get(k, k.replace("_", " ")), text(k, record[k])) for k in keys
            if k not in NOT_DETAILS and record[k] not in (None, "", [], {}, False)]

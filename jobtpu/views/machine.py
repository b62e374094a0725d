"""`jobtpu machines NAME`: one machine in detail, as lines of `what: value` (docs/reference/commands.md
§2.10). Pure: the machine's row of `machines` (commands/machines.py), its entry, the jobs holding it
and its record in, lines out."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Machine
    from jobtpu.schema.records import MachineRecord
    from jobtpu.schema.state import Job


def machine_lines(row: dict[str, Any], machine: Machine, record: MachineRecord, holding: list[Job],
                  clock: Callable[[float], str], last_pass: float | None) -> list[tuple[str, str]]:
    """(what, value) for each line: who the machine is, where, what it has, who holds it, what the
    last pass saw of it. `holding`: the active jobs on it; `clock`: a time as people read it;
    `last_pass`: when the last pass ended (None: none has run)."""
    lines = [("name", machine.name), ("aliases", ", ".join(machine.aliases) or "none"), ("kind", machine.kind)]
    lines += _where(row, machine, record)
    lines.append(("state", " — ".join(x for x in (row.get("state"), row.get("detail")) if x)))
    for key, what in (("unreachable_since", "unreachable since"), ("next_try", "next try")):
        if row.get(key) is not None:
            lines.append((what, clock(row[key])))
    if row.get("health") or row.get("health_description"):
        lines.append(("health", " — ".join(x for x in (row.get("health"), row.get("health_description")) if x)))
    lines.append(("free", _free(row["free"], machine.capacity)))
    lines.append(("jobs", "; ".join(_holder(job, clock) for job in holding) or "none"))
    if row.get("claimed_by"):
        lines.append(("sheet", f"claimed by {row['claimed_by']}"))
    if row.get("note"):
        lines.append(("note", row["note"]))
    when = f"by the pass that ended {clock(last_pass)}" if last_pass is not None else "no pass has run yet"
    lines.append(("last seen", f"{_observed(record)} ({when})"))
    return lines


def _where(row: dict[str, Any], machine: Machine, record: MachineRecord) -> list[tuple[str, str]]:
    from jobtpu.fleet.drivers import driver_for

    said = driver_for(machine).where(machine, record, row)  # a TPU's node, zone and addresses
    if said is not None:
        return said
    where = [("accelerator", machine.accelerator)] if machine.accelerator else []
    if machine.listed_hosts:
        where.append(("hosts", ", ".join(machine.hosts)))
    return where


def _free(free: dict[str, int], capacity: dict[str, int]) -> str:
    """`slot 0 of 1 free (1 used), gpu 6 of 8 free (2 used)`."""
    return ", ".join(f"{r} {free[r]} of {n} free ({n - free[r]} used)" for r, n in capacity.items())


def _holder(job: Job, clock: Callable[[float], str]) -> str:
    """`12 ann train (running since 12-04 21:30)`: a job holding the machine, and since when."""
    attempt = job.attempts[-1] if job.attempts else None
    started = attempt.started if attempt is not None else None
    since = f" since {clock(started)}" if started is not None else ""
    return f"{job.id} {job.user} {job.name} ({job.status.value}{since})"


def _observed(record: MachineRecord) -> str:
    """What the last pass that saw the machine recorded of it, beyond its state."""
    seen = [f"node {record.tpu_state}"] if record.tpu_state else []
    if record.workers is not None:
        seen.append(f"{record.workers} worker(s)")
    if record.last_error:
        seen.append(f"last error: {record.last_error}")
    if record.failures:
        seen.append(f"{record.failures} failed create(s)")
    return ", ".join(seen) or "nothing beyond its state"

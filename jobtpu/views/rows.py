"""The rows of jobs and machines every listing shows, typed: one model, made from records by pure
functions, that `status`, `watch`, `machines` and the web pages each lay out their own way.
display.py fits status's and machines' rows to the terminal, watch gives its columns fixed widths,
the web its templates (docs/design.md §5)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobtpu.render.cells import JobRow, MachineCells
from jobtpu.render.names import with_short_names
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job, Status
from jobtpu.views.listing import (
    attempt_text,
    info,
    key_end,
    override_pairs,
    run_time,
    shown_overrides,
    varying_keys,
    where,
)

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Fleet, Machine
    from jobtpu.schema.published import MachineRow as MachineJson
    from jobtpu.schema.records import MachineRecord
    from jobtpu.schema.state import State


def duration(seconds: float) -> str:
    """A length of time in its largest whole unit: 45s, 12m, 3h, 2d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def ended_at(job: Job) -> float:
    """When the job's last attempt ended (its submission, when it never ran): how ended jobs sort."""
    ended = job.attempts[-1].ended if job.attempts else None
    return float(ended if ended is not None else job.created)


def job_rows(jobs: list[Job], now: float, aliases: Mapping[str, str], zone: Any = None,
             short: Mapping[str, str] | None = None, clocks: bool = True) -> list[JobRow]:
    """Each job's row, the overrides that tell a sweep's members apart first (varying_keys);
    `short`: machines' short names (render/names.py); `clocks`: whether the submitted column is
    shown (its clock time costs a date conversion a row)."""
    varying = varying_keys(jobs)
    return [job_row(job, now, aliases, zone, varying[job.sweep], short, clocks) for job in jobs]


def job_row(job: Job, now: float, aliases: Mapping[str, str], zone: Any = None, first: Collection[str] = (),
            short: Mapping[str, str] | None = None, clocks: bool = True) -> JobRow:
    """`zone`: the tzinfo of the submitted column's clock time (None: this machine's local time);
    `first`: the override keys shown first; `short`: machines' short names."""
    from jobtpu.render.text import clock

    short = short or {}
    ran = run_time(job, now)
    pairs = override_pairs(job.overrides)
    words = shown_overrides(job.overrides, aliases, first, pairs)
    told = sum(1 for key, _ in pairs if key in first)
    waiting = with_short_names(job.waiting, short) if job.status is Status.QUEUED and job.waiting else ""
    return JobRow(id=job.id, name=job.name, user=job.user, status=job.status.value,
                  attempt=attempt_text(job) if job.attempts else "", run="" if ran is None else duration(ran),
                  age=duration(now - job.created), where=where(job, short),
                  overrides=" ".join(words), tags=",".join(job.tags), info=info(job, short, waiting),
                  submitted=clock(job.created, zone) if clocks else "", apart=_apart(words, told),
                  tries=job.attempt, reason=job.reason or "",
                  machine=short.get(job.machine, job.machine) if job.machine else "",
                  waiting=waiting, last_line=job.last_line)


def sweep_row(members: list[Job], now: float, aliases: Mapping[str, str], zone: Any = None,
              short: Mapping[str, str] | None = None) -> JobRow:
    """One row for a sweep's queued members (in id order), as squeue shows a job array's pending
    tasks: their ids' span, how many, and what tells them apart as each axis's first…last value
    (`lr=0.1…0.9`); the rest as its first member's row says it."""
    first = job_row(members[0], now, aliases, zone, (), short)
    axes = sorted(varying_keys(members)[members[0].sweep])
    values = [dict(override_pairs(job.overrides)) for job in members]
    same = shown_overrides([f"{key}{rest}" for key, rest in override_pairs(members[0].overrides) if key not in axes],
                           aliases)
    spans = [f"{_key_shown(key, aliases, axes)}={values[0].get(key, '').lstrip('=')}…{values[-1].get(key, '').lstrip('=')}"
             for key in axes]
    told = " ".join(spans)
    ids = f"{members[0].id}-{members[-1].id}"
    oldest = min(job.created for job in members)
    return msgspec.structs.replace(first, id=ids, age=duration(now - oldest), overrides=" ".join([*spans, *same]),
                                   info=f"{len(members):,} queued: {first.info}",
                                   apart=len(told) + (1 if same else 0), collapsed=members[0].sweep)


def _key_shown(key: str, aliases: Mapping[str, str], keys: Collection[str]) -> str:
    """A sweep axis's key as a row shows it: its shortest alias, else its shortest telling end."""
    named = [alias for alias, full in aliases.items() if full == key]
    return min(named, key=len) if named else key_end(key, keys)


def _apart(words: list[str], told: int) -> int:
    """How wide the config cell must stay to show its first `told` words whole: one more when more
    follow, for the "…" a cut cell ends with."""
    if not told:
        return 0
    return len(" ".join(words[:told])) + (1 if told < len(words) else 0)


def live_order(jobs: Sequence[Job]) -> list[Job]:
    """The jobs a live view shows first: those on machines, then the queued in their order, then the
    ended, the latest first."""
    active = [j for j in jobs if j.active]
    queued = [j for j in jobs if j.status is Status.QUEUED]
    ended = sorted((j for j in jobs if j.ended), key=ended_at, reverse=True)
    return active + queued + ended


# ---- machines ---------------------------------------------------------------------------------------

def machine_rows(fleet: Fleet, state: State, published: Sequence[MachineJson], now: float,
                 zone: Any = None) -> list[MachineCells]:
    """The row of each machine `published` gives (`machines --json`'s records, in their order)."""
    from jobtpu.schema.records import MachineRecord

    held: dict[str, list[int]] = {}
    for job in state.jobs:
        if job.active and job.machine:
            for name in job.gang or [job.machine]:  # a gang holds every one of its machines
                held.setdefault(name, []).append(job.id)
    return [machine_row(row, fleet.machines[row.name], state.machines.get(row.name) or MachineRecord(),
                        held.get(row.name, ()), now, zone) for row in published]


def machine_row(row: MachineJson, machine: Machine, record: MachineRecord, held: Sequence[int], now: float,
                zone: Any = None) -> MachineCells:
    """`row`: the machine as `machines --json` gives it; `record`: what the last pass saw of it;
    `held`: the ids of the active jobs on it; `zone`: the tzinfo clock times are shown in."""
    short, others = (row.aliases[0], ", ".join([row.name, *row.aliases[1:]])) if row.aliases else (row.name, "")
    health = " — ".join(x for x in (row.health, row.health_description) if x)
    accelerator = row.accelerator or ""
    if row.provisioning:  # a tpu: spot / preemptible / on-demand, in its zone
        accelerator += f" ({row.provisioning}, {row.zone})"
    if row.queued_resource:
        accelerator += f" queued resource {row.queued_resource}"
    return MachineCells(name=row.name, short=short, other_names=others, kind=row.kind, accelerator=accelerator,
                      workers=_text(row.workers), state=row.state, health=health, running=str(row.running),
                      free=" ".join(f"{k}={v}" for k, v in row.free.items()), note=row.note or "",
                      detail=_with_times(row, zone), seen=str(record.state) if record.state else ("up" if machine.runs_here else "unknown"),
                      doing="  ".join(_doing(machine, record, held, now)))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _with_times(row: MachineJson, zone: Any) -> str:
    """The detail, then when the machine became unreachable or will be asked for again, if it did or will."""
    from jobtpu.render.text import clock

    times = [f"{what} {clock(at, zone)}" for at, what in ((row.unreachable_since, "since"), (row.next_try, "next try"))
             if at is not None]
    if not times:
        return row.detail or ""
    return " ".join(filter(None, (row.detail, f"({', '.join(times)})")))


def _doing(machine: Machine, record: MachineRecord, held: Sequence[int], now: float) -> list[str]:
    """What the live view says a machine does: its jobs, its TPU's node and queued resource, a create's back-off."""
    from jobtpu.fleet.drivers import driver_for

    said = [f"jobs {','.join(map(str, held))}" if held else "idle", *driver_for(machine).doing(machine, record, now)]
    if record.detail:
        said.append(record.detail)
    return said

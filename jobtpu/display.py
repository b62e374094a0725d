"""Tables for people: pure functions from records to rich renderables (rich is imported only here)."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from .text import printable

STATUS_STYLE = {"queued": "cyan", "launching": "yellow", "running": "green", "killing": "yellow",
                "finished": "bold green", "failed": "bold red", "killed": "magenta"}


def age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def cell(value: object, style: str = "") -> Text:
    """A table cell holding `value` as plain text: never rich markup (a name like `[/x]` or
    `[link=…]` is shown as typed) and never a control character (see text.py)."""
    return Text(printable("" if value is None else str(value)), style=style)


# The status table's columns, in their default order; "submitted" (a clock time in the user's time
# zone) is shown only to those who ask for it (`jobtpu config set columns ...`).
JOB_COLUMNS = ("id", "name", "user", "status", "reason", "machine", "attempt", "age", "tags", "last log line",
               "submitted")
DEFAULT_JOB_COLUMNS = JOB_COLUMNS[:-1]


def clock(seconds: float, zone: Any = None) -> str:
    """A time as month-day hour:minute in `zone` (a tzinfo; None: this machine's local time)."""
    from datetime import datetime

    return datetime.fromtimestamp(seconds, zone).strftime("%m-%d %H:%M")


def only_columns(table: Table, names: tuple[str, ...] | list[str]) -> Table:
    """The table with just the columns named, in that order (a user's `columns` setting)."""
    by_header = {str(column.header): column for column in table.columns}
    table.columns = [by_header[name] for name in names if name in by_header]
    return table


def jobs_table(jobs: list[dict[str, Any]], now: float | None = None, left_out: str | None = None,
               zone: Any = None) -> Table:
    """One row per job given; `left_out` is a line under the table saying which jobs it does not show;
    `zone`: the tzinfo clock times are shown in (None: local time)."""
    now = time.time() if now is None else now
    table = Table(box=None, header_style="bold", pad_edge=False, caption=left_out, caption_justify="left",
                  caption_style="dim")
    for column in JOB_COLUMNS:
        # One row per job, as squeue and pueue print them: only the last log line's column may shrink
        # (rich narrows wrappable columns first), and its text is then cut short, not wrapped.
        # The header never wraps either: the shrinking column keeps at least its title's width.
        table.add_column(column, no_wrap=column != "last log line", overflow="ellipsis",
                         min_width=len(column) if column == "last log line" else None,
                         justify="right" if column in ("id", "attempt", "age") else "left")
    for job in jobs:
        status = job["status"]
        last_line = cell(job.get("last_line"))
        last_line.overflow, last_line.no_wrap = "ellipsis", True
        table.add_row(
            cell(job["id"]), cell(job.get("name")), cell(job["user"]), cell(status, STATUS_STYLE.get(status, "")),
            cell(job.get("reason")), cell(job.get("machine")), cell(job.get("attempt", 0)),
            cell(age(now - job.get("created", now))), cell(",".join(job.get("tags", []))), last_line,
            cell(clock(job.get("created", now), zone)))
    if not jobs:
        table.add_row("", Text("no jobs", style="dim"), *[""] * (len(JOB_COLUMNS) - 2))
    return table


def machines_table(rows: list[dict[str, Any]], zone: Any = None) -> Table:
    """`zone`: the tzinfo clock times are shown in (None: local time)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("name", "kind", "accelerator", "workers", "state", "health", "running", "free", "detail"):
        table.add_column(column, overflow="fold" if column == "detail" else "ellipsis")
    for row in rows:
        free = " ".join(f"{k}={v}" for k, v in row["free"].items())
        health = " — ".join(x for x in (row.get("health"), row.get("health_description")) if x)
        workers = row.get("workers")
        accelerator = row.get("accelerator") or ""
        if row.get("provisioning"):  # a tpu: spot / preemptible / on-demand, in its zone
            accelerator += f" ({row['provisioning']}, {row.get('zone')})"
        if row.get("queued_resource"):
            accelerator += f" queued resource {row['queued_resource']}"
        table.add_row(*map(cell, (row["name"], row["kind"], accelerator, workers, row.get("state"),
                                  health, row["running"], free, _with_times(row, zone))))
    return table


def _with_times(row: dict[str, Any], zone: Any) -> str | None:
    """The detail, then when the machine became unreachable or will be asked for again, if it did or will."""
    times = [f"{what} {clock(row[key], zone)}" for key, what in (("unreachable_since", "since"),
                                                                    ("next_try", "next try"))
             if row.get(key) is not None]
    if not times:
        return row.get("detail")
    return " ".join(filter(None, (row.get("detail"), f"({', '.join(times)})")))


def rules_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("rule", "on preempted", "on grpc, lost, hang", "on another failure", "on exit 0",
                   "default for", "machines here"):
        table.add_column(column)  # cells wrap at spaces on a narrow terminal
    for row in rows:
        table.add_row(*map(cell, (row["rule"], row["preempted"], row["grpc_lost_hang"], row["other_failure"],
                                  row["exit_0"], ", ".join(row["default_for"]) or "-",
                                  ", ".join(row["machines"]) or "-")))
    return table

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


def jobs_table(jobs: list[dict[str, Any]], now: float | None = None, left_out: str | None = None) -> Table:
    """One row per job given; `left_out` is a line under the table saying which jobs it does not show."""
    now = time.time() if now is None else now
    table = Table(box=None, header_style="bold", pad_edge=False, caption=left_out, caption_justify="left",
                  caption_style="dim")
    for column in ("id", "name", "user", "status", "reason", "machine", "attempt", "age", "tags", "last log line"):
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
            cell(job.get("reason") or job.get("waiting")), cell(job.get("machine")), cell(attempt_text(job)),
            cell(age(now - job.get("created", now))), cell(",".join(job.get("tags", []))), last_line)
    if not jobs:
        table.add_row("", Text("no jobs", style="dim"), *[""] * 8)
    return table


def attempt_text(job: dict[str, Any]) -> str:
    """The attempt number, and how many recoveries (preemptions, grpc, hangs) and --retries (non-zero
    exits) led to it, counted apart: `3 (1 rec, 1/2 retry)`."""
    parts = []
    if job.get("recoveries"):
        parts.append(f"{job['recoveries']} rec")
    if job.get("retries"):
        parts.append(f"{job.get('retried', 0)}/{job['retries']} retry")
    attempt = str(job.get("attempt", 0))
    return f"{attempt} ({', '.join(parts)})" if parts else attempt


def machines_table(rows: list[dict[str, Any]]) -> Table:
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
                                  health, row["running"], free, row.get("detail"))))
    return table


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

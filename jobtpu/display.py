"""Tables for people: pure functions from records to rich renderables (rich is imported only here)."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

STATUS_STYLE = {"queued": "cyan", "launching": "yellow", "running": "green", "killing": "yellow",
                "finished": "bold green", "failed": "bold red", "killed": "magenta"}


def age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def jobs_table(jobs: list[dict[str, Any]], now: float | None = None) -> Table:
    now = time.time() if now is None else now
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("id", "name", "user", "status", "reason", "machine", "attempt", "age", "tags", "last log line"):
        # One row per job, as squeue and pueue print them: only the last log line's column may shrink
        # (rich narrows wrappable columns first), and its text is then cut short, not wrapped.
        table.add_column(column, no_wrap=column != "last log line", overflow="ellipsis",
                         justify="right" if column in ("id", "attempt", "age") else "left")
    for job in jobs:
        status = job["status"]
        table.add_row(
            str(job["id"]), job.get("name") or "", job["user"], Text(status, style=STATUS_STYLE.get(status, "")),
            job.get("reason") or "", job.get("machine") or "", str(job.get("attempt", 0)),
            age(now - job.get("created", now)), ",".join(job.get("tags", [])),
            Text(job.get("last_line") or "", overflow="ellipsis", no_wrap=True))
    if not jobs:
        table.add_row("", Text("no jobs", style="dim"), *[""] * 8)
    return table


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
        table.add_row(row["name"], row["kind"], accelerator, "" if workers is None else str(workers),
                      row.get("state") or "", health, str(row["running"]), free, row.get("detail") or "")
    return table

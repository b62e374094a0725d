"""Tables for people: pure functions from records to rich renderables (rich is imported only here)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from .text import printable

STATUS_STYLE = {"queued": "cyan", "launching": "yellow", "running": "green", "killing": "yellow",
                "finished": "bold green", "failed": "bold red", "killed": "magenta"}


def cell(value: object, style: str = "") -> Text:
    """A table cell holding `value` as plain text: never rich markup (a name like `[/x]` or
    `[link=…]` is shown as typed) and never a control character (see text.py)."""
    return Text(printable("" if value is None else str(value)), style=style)


# The status table's columns: (title, the Row field it shows). A column never narrows below its
# title (the header never wraps): when the table is too wide, the last column gives way first, down to
# INFO_KEPT, then the widest others of JOB_SHRINKABLE down to CELL_KEPT, then all down to their titles;
# a cut cell ends with "…", so every row stays one line.
JOB_COLUMNS = (("id", "id"), ("name", "name"), ("user", "user"), ("status", "status"), ("att", "attempt"),
               ("run", "run"), ("age", "age"), ("where", "where"), ("config", "overrides"),
               ("tags", "tags"), ("why / log", "info"), ("submitted", "submitted"))
JOB_COLUMN_TITLES = tuple(title for title, _ in JOB_COLUMNS)
# "submitted" (a clock time in the viewer's time zone) is shown only to those who ask for it
# (`jobtpu config set columns ...`).
DEFAULT_JOB_COLUMNS = JOB_COLUMN_TITLES[:-1]
JOB_SHRINKABLE = frozenset({"info", "tags", "name", "overrides", "where", "user"})
INFO_KEPT = 24
CELL_KEPT = 10
_RIGHT = frozenset({"id", "attempt", "run", "age"})
_GAP = 1  # rich's padding between two columns, on each side


def jobs_table(rows: list[Any], width: int, captions: list[str] | None = None,
               columns: Collection[str] | None = None) -> Table:
    """One row per listing.Row given, in at most `width` columns; `captions` are lines under the
    table (the count per status, what the table leaves out). `columns`: the titles to show, in that
    order (default: DEFAULT_JOB_COLUMNS)."""
    fields = dict(JOB_COLUMNS)
    chosen = [(title, fields[title]) for title in (DEFAULT_JOB_COLUMNS if columns is None else columns)
              if title in fields]
    cells = [[printable(_cut(str(getattr(r, field)), width)) for _, field in chosen] for r in rows]
    widths = fit_widths(chosen, cells, width)
    caption = "\n".join(printable(c) for c in captions or []) or None
    table = Table(box=None, header_style="bold", pad_edge=False, caption=caption, caption_justify="left",
                  caption_style="dim")
    for (title, field), size in zip(chosen, widths, strict=True):
        table.add_column(title, no_wrap=True, overflow="ellipsis", width=size,
                         justify="right" if field in _RIGHT else "left")
    styled = [field == "status" for _, field in chosen]
    for values in cells:
        table.add_row(*(Text(v, style=STATUS_STYLE.get(v, "") if styled[i] else "", no_wrap=True,
                             overflow="ellipsis") for i, v in enumerate(values)))
    return table  # (with no rows, the count line under it says "no jobs")


def _cut(text: str, width: int) -> str:
    """No cell is shown wider than the table: what lies past it is cut before it is measured, so a
    megabyte-long value costs no more than one a screen wide (the ellipsis still marks the cut)."""
    keep = 2 * max(width, 1) + 1  # wide characters count two columns; combining ones none
    return text if len(text) <= keep else text[:keep] + "…"


def fit_widths(columns: list[tuple[str, str]], cells: list[list[str]], width: int) -> list[int]:
    """Each column's width: its widest cell, narrowed as JOB_COLUMNS' comment says until the table
    fits in `width`. On a terminal too narrow even for the titles, rich cuts them too (never wraps)."""
    titles = [len(title) for title, _ in columns]
    widths = [max([titles[i], *(cell_len(row[i]) for row in cells)]) for i in range(len(columns))]
    excess = sum(widths) + 2 * _GAP * (len(widths) - 1) - width
    info = [i for i, (_, field) in enumerate(columns) if field == "info"]
    others = [i for i, (_, field) in enumerate(columns) if field in JOB_SHRINKABLE and field != "info"]
    # The last column first, to a readable part; then the widest others, to a readable part; then
    # the last column to its title; then the others to theirs.
    for indices, kept in ((info, INFO_KEPT), (others, CELL_KEPT), (info, 0), (others, 0)):
        excess = _narrow(widths, indices, [max(kept, titles[i]) for i in range(len(columns))], excess)
    return widths


def _narrow(widths: list[int], indices: list[int], floors: list[int], excess: int) -> int:
    """Take `excess` characters from the widest of `indices`, one at a time, none below its floor;
    what is left of the excess."""
    while excess > 0 and indices:
        widest = max(indices, key=lambda i: widths[i] - floors[i])
        if widths[widest] <= floors[widest]:
            break
        widths[widest] -= 1
        excess -= 1
    return excess


def clock(seconds: float, zone: Any = None) -> str:
    """A time as month-day hour:minute in `zone` (a tzinfo; None: this machine's local time)."""
    from datetime import datetime

    return datetime.fromtimestamp(seconds, zone).strftime("%m-%d %H:%M")


def machines_table(rows: list[dict[str, Any]], zone: Any = None) -> Table:
    """`zone`: the tzinfo clock times are shown in (None: local time)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("name", "kind", "accelerator", "workers", "state", "health", "running", "free", "note", "detail"):
        table.add_column(column, overflow="fold" if column in ("note", "detail") else "ellipsis")
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
                                  health, row["running"], free, row.get("note"), _with_times(row, zone))))
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

"""Tables for people: pure functions from records to tables fitted to a width (render/table.py draws them)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from jobtpu.render.columns import CELL_KEPT, LAST_KEPT, FitRules, fit, natural_width
from jobtpu.render.job_columns import DEFAULT_JOB_COLUMNS, JOB_COLUMNS
from jobtpu.render.names import apart_width, cut_apart
from jobtpu.render.table import FittedTable
from jobtpu.render.text import printable

if TYPE_CHECKING:
    from jobtpu.render.cells import JobRow, MachineCells

STATUS_STYLE = {"queued": "cyan", "launching": "yellow", "running": "green", "killing": "yellow",
                "finished": "bold green", "failed": "bold red", "killed": "magenta"}


# Numbers and the status are never cut; id and status are never left out.
JOB_LAYOUT = FitRules(cuttable=frozenset({"info", "tags", "name", "overrides", "where", "user"}),
                    drop_order=("submitted", "tags", "age", "attempt", "run", "user", "where", "overrides",
                                "info", "name"),
                    last="info", apart=frozenset({"where"}))
# A reason's readable head (`3 machines fit: …`, `v3-32-p1 fits, b…`): `why / log` is narrowed no
# further (the other columns are left out first); at 80 columns it leaves room for every other one.
REASON_KEPT = 17
_RIGHT = frozenset({"id", "attempt", "run", "age", "workers", "running"})


def jobs_table(rows: list[JobRow], width: int, captions: list[str] | None = None,
               columns: Collection[str] | None = None) -> FittedTable:
    """One row per JobRow given (views/rows.py), in at most `width` columns; `captions` are lines under the
    table (the count per status, what the table leaves out). `columns`: the titles to show, in that
    order (default: DEFAULT_JOB_COLUMNS)."""
    fields = dict(JOB_COLUMNS)
    chosen = [(title, fields[title]) for title in (DEFAULT_JOB_COLUMNS if columns is None else columns)
              if title in fields]
    cells = [[str(getattr(r, field)) for _, field in chosen] for r in rows]
    # Other columns give way before a pending reason is cut past its head, or the overrides that
    # tell a sweep's members apart (JobRow.apart) are cut.
    floors = {"info": REASON_KEPT, "overrides": min(max((r.apart for r in rows), default=0), LAST_KEPT)}
    return fitted_table(chosen, cells, width, JOB_LAYOUT, captions, floors)  # no rows: the count line says "no jobs"


def fitted_table(columns: list[tuple[str, str]], cells: list[list[str]], width: int, layout: FitRules,
                 captions: list[str] | None = None, floors: Mapping[str, int] | None = None) -> FittedTable:
    """A table of one line per row in at most `width` columns (columns.py); `columns`: (title, key);
    `floors`: the narrowest some columns may be (by key)."""
    cells = [[printable(_cut(value, width)) for value in row] for row in cells]
    floors = {**(floors or {}), **{key: apart_width((row[i] for row in cells), max(len(title), CELL_KEPT))
                                   for i, (title, key) in enumerate(columns) if key in layout.apart}}
    kept, widths = fit(columns, cells, width, layout, floors)
    for i, size in zip(kept, widths, strict=True):
        if columns[i][1] in layout.apart:  # cut here, in the middle, where rich would cut the end
            for row, value in zip(cells, cut_apart([row[i] for row in cells], size), strict=True):
                row[i] = value
    caption = "\n".join(printable(c) for c in captions or []) or None
    styled = next((n for n, i in enumerate(kept) if columns[i][1] == "status"), None)
    return FittedTable(titles=[columns[i][0] for i in kept], widths=list(widths),
                       right=[columns[i][1] in _RIGHT for i in kept], rows=[[row[i] for i in kept] for row in cells],
                       styled=styled, styles=STATUS_STYLE, caption=caption)


def _cut(text: str, width: int) -> str:
    """No cell is shown wider than the table: what lies past it is cut before it is measured, so a
    megabyte-long value costs no more than one a screen wide (the ellipsis still marks the cut)."""
    keep = 2 * max(width, 1) + 1  # wide characters count two columns; combining ones none
    return text if len(text) <= keep else text[:keep] + "…"


# The machines table: name, state and running jobs stay longest; the other names and the detail
# give way first. A machine is named by its short name (its first alias); "other names" holds its
# name in machines.json and its other aliases, where the width allows. (title, the MachineCells field.)
MACHINE_COLUMNS = [("name", "short"), ("other names", "other_names"),
                   *((c, c) for c in ("kind", "accelerator", "workers", "state", "health", "running", "free", "note",
                                      "detail"))]
MACHINE_LAYOUT = FitRules(cuttable=frozenset({"short", "other_names", "accelerator", "health", "free", "note", "detail"}),
                        drop_order=("other_names", "health", "workers", "note", "kind", "accelerator", "free",
                                    "detail"),
                        last="detail", readable=CELL_KEPT, apart=frozenset({"short", "other_names"}))


def machines_table(rows: list[MachineCells], width: int) -> FittedTable:
    """One line per machine (views/rows.py's rows) in at most `width` columns."""
    cells = [[getattr(row, key) for _, key in MACHINE_COLUMNS] for row in rows]
    return fitted_table(MACHINE_COLUMNS, cells, width, MACHINE_LAYOUT)


# The rules table in full, and as it reads on a terminal too narrow for that: shorter words
# (commands/rules.py gives them), and "on exit 0", the same for every rule, said once under it.
RULE_COLUMNS = [("rule", "rule"), ("on preempted", "preempted"), ("on grpc, lost, hang", "grpc_lost_hang"),
                ("on another failure", "other_failure"), ("on exit 0", "exit_0"), ("default for", "default_for"),
                ("machines here", "machines")]
SHORT_RULE_COLUMNS = [("rule", "rule"), ("preempted", "preempted"), ("grpc/lost/hang", "grpc_lost_hang"),
                      ("failure", "other_failure"), ("default for", "default_for"), ("machines here", "machines")]
RULE_LAYOUT = FitRules(cuttable=frozenset({"default_for", "machines"}), drop_order=("machines", "default_for"),
                     last="default_for")


def rules_table(rows: list[dict[str, Any]], width: int, short: Mapping[str, str]) -> FittedTable:
    """One line per rule in at most `width` columns; `short`: the shorter word for a long one."""
    def cells(columns: list[tuple[str, str]], words: Mapping[str, str]) -> list[list[str]]:
        def text(value: Any) -> str:
            parts = value if isinstance(value, list) else str(value).split(" / ")
            return (", " if isinstance(value, list) else " / ").join(words.get(p, p) for p in parts) or "-"
        return [[text(row[key]) for _, key in columns] for row in rows]

    full = cells(RULE_COLUMNS, {})
    if natural_width(RULE_COLUMNS, full) <= width:
        return fitted_table(RULE_COLUMNS, full, width, RULE_LAYOUT)
    exit_0 = {row["exit_0"] for row in rows}
    said = [f"on exit 0: {', '.join(sorted(exit_0))}, under every rule"] if len(exit_0) == 1 else []
    columns = SHORT_RULE_COLUMNS + ([] if said else [("exit 0", "exit_0")])
    return fitted_table(columns, cells(columns, short), width, RULE_LAYOUT, said)

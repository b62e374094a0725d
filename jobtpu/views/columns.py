"""How wide each column of a table for people is, so that every row is one line of the terminal.
Pure: titles and cells in, the columns kept and their widths out (display.py draws them).

A column never narrows below its title (the header never wraps), and a column that may not be cut (a
number, a status) keeps its widest cell: when those do not fit, whole columns are left out, in the
table's drop order. Then the cuttable ones narrow: the `last` column first, down to LAST_KEPT, then
the widest others down to CELL_KEPT, then the last to its title, then the others to theirs; a cut
cell ends with "…"."""

from __future__ import annotations

from typing import NamedTuple

from rich.cells import cell_len

LAST_KEPT = 24
CELL_KEPT = 10
GAP = 1  # rich's padding between two columns, on each side


class Layout(NamedTuple):
    """What a table may do to fit: which columns (by key) may be cut, which go first when even
    that is not enough, which one gives way before the others."""

    cuttable: frozenset[str]
    drop_order: tuple[str, ...]  # never listed: never left out
    last: str = ""  # cut first, down to LAST_KEPT
    # The narrowest a cuttable column counts when choosing what to leave out: its title (0), or at
    # least this much of its cells, so a table keeps fewer columns that each still say something.
    readable: int = 0


def fit(columns: list[tuple[str, str]], cells: list[list[str]], width: int,
        layout: Layout) -> tuple[list[int], list[int]]:
    """The indices of the columns kept (`columns`: (title, key)) and the width of each kept one."""
    kept = columns_that_fit(columns, cells, width, layout)
    widths = fit_widths([columns[i] for i in kept], [[row[i] for i in kept] for row in cells], width, layout)
    return kept, widths


def natural_width(columns: list[tuple[str, str]], cells: list[list[str]]) -> int:
    """How wide the table is with no cell cut."""
    widths = [max([cell_len(title), *(cell_len(row[i]) for row in cells)]) for i, (title, _) in enumerate(columns)]
    return sum(widths) + 2 * GAP * (len(widths) - 1)


def columns_that_fit(columns: list[tuple[str, str]], cells: list[list[str]], width: int,
                     layout: Layout) -> list[int]:
    """All the columns when each fits at its narrowest, else without the empty ones, then those first
    in the drop order."""
    def narrowest(i: int) -> int:
        title, key = columns[i]
        whole = max([cell_len(title), *(cell_len(row[i]) for row in cells)])
        return min(whole, max(cell_len(title), layout.readable)) if key in layout.cuttable else whole

    kept = list(range(len(columns)))
    droppable = [i for key in layout.drop_order for i in kept if columns[i][1] == key]
    droppable.sort(key=lambda i: any(row[i] for row in cells))  # a column with nothing to say goes first
    while droppable and sum(map(narrowest, kept)) + 2 * GAP * (len(kept) - 1) > width:
        kept.remove(droppable.pop(0))
    return kept


def fit_widths(columns: list[tuple[str, str]], cells: list[list[str]], width: int, layout: Layout) -> list[int]:
    """Each column's width: its widest cell, narrowed as this module says until the table fits in
    `width`. On a terminal too narrow even for what may not be cut, rich cuts it (never wraps)."""
    titles = [cell_len(title) for title, _ in columns]
    widths = [max([titles[i], *(cell_len(row[i]) for row in cells)]) for i in range(len(columns))]
    excess = sum(widths) + 2 * GAP * (len(widths) - 1) - width
    last = [i for i, (_, key) in enumerate(columns) if key == layout.last]
    others = [i for i, (_, key) in enumerate(columns) if key in layout.cuttable and key != layout.last]
    for indices, kept in ((last, LAST_KEPT), (others, CELL_KEPT), (last, 0), (others, 0)):
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

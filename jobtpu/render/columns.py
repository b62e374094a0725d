"""How wide each column of a table for people is, so that every row is one line of the terminal.
Pure: titles and cells in, the columns kept and their widths out (display.py draws them).

A column never narrows below its title (the header never wraps), and a column that may not be cut (a
number, a status) keeps its widest cell: when those do not fit, whole columns are left out, in the
table's drop order. Then the cuttable ones narrow: the `last` column first, down to LAST_KEPT, then
the widest others down to CELL_KEPT, then the last to its title, then the others to theirs; a cut
cell ends with "…". A table may give a column a floor of its own (a readable head of a reason, the
overrides that tell a sweep's members apart): it narrows no further than that, as if it were its
title. An empty column is left out rather than cut the last one below LAST_KEPT."""

from collections.abc import Mapping
from typing import NamedTuple

from jobtpu.render.text import cell_width as cell_len

LAST_KEPT = 24
CELL_KEPT = 10
GAP = 1  # rich's padding between two columns, on each side


class FitRules(NamedTuple):
    """What a table may do to fit: which columns (by key) may be cut, which go first when even
    that is not enough, which one gives way before the others."""

    cuttable: frozenset[str]
    drop_order: tuple[str, ...]  # never listed: never left out
    last: str = ""  # cut first, down to LAST_KEPT
    # The narrowest a cuttable column counts when choosing what to leave out: its title (0), or at
    # least this much of its cells, so a table keeps fewer columns that each still say something.
    readable: int = 0
    # Columns of names cut in the middle so that different cells stay different (render/names.py).
    apart: frozenset[str] = frozenset()


def fit(columns: list[tuple[str, str]], cells: list[list[str]], width: int,
        layout: FitRules, floors: Mapping[str, int] | None = None) -> tuple[list[int], list[int]]:
    """The indices of the columns kept (`columns`: (title, key)) and the width of each kept one;
    `floors`: the narrowest some columns (by key) may be, beside their titles."""
    widest = _widest(columns, cells)
    kept = columns_that_fit(columns, cells, width, layout, floors, widest)
    widths = fit_widths([columns[i] for i in kept], [], width, layout, floors, [widest[i] for i in kept])
    return kept, widths


def _widest(columns: list[tuple[str, str]], cells: list[list[str]]) -> list[int]:
    """Each column's width with nothing cut: its widest cell or its title (measured once a table)."""
    return [max([cell_len(title), *(cell_len(row[i]) for row in cells)]) for i, (title, _) in enumerate(columns)]


def natural_width(columns: list[tuple[str, str]], cells: list[list[str]]) -> int:
    """How wide the table is with no cell cut."""
    widths = _widest(columns, cells)
    return sum(widths) + 2 * GAP * (len(widths) - 1)


def columns_that_fit(columns: list[tuple[str, str]], cells: list[list[str]], width: int,
                     layout: FitRules, floors: Mapping[str, int] | None = None,
                     widest: list[int] | None = None) -> list[int]:
    """All the columns when each fits at its narrowest, else without the empty ones (also those that
    would cost the `last` column its first LAST_KEPT characters), then those first in the drop order.
    `widest`: _widest's, when the caller has it."""
    whole_widths = widest if widest is not None else _widest(columns, cells)
    said = [any(row[i] for row in cells) for i in range(len(columns))]

    def narrowest(i: int, roomy: bool = False) -> int:
        title, key = columns[i]
        whole = whole_widths[i]
        least = max(cell_len(title), layout.readable, (floors or {}).get(key, 0),
                    LAST_KEPT if roomy and key == layout.last else 0)
        return min(whole, least) if key in layout.cuttable else whole

    def wider(roomy: bool = False) -> bool:
        return sum(narrowest(i, roomy) for i in kept) + 2 * GAP * (len(kept) - 1) > width

    kept = list(range(len(columns)))
    droppable = [i for key in layout.drop_order for i in kept if columns[i][1] == key]
    droppable.sort(key=lambda i: said[i])  # a column with nothing to say goes first
    while droppable and not said[droppable[0]] and wider(roomy=True):
        kept.remove(droppable.pop(0))
    while droppable and wider():
        kept.remove(droppable.pop(0))
    return kept


def fit_widths(columns: list[tuple[str, str]], cells: list[list[str]], width: int, layout: FitRules,
               floors: Mapping[str, int] | None = None, widest: list[int] | None = None) -> list[int]:
    """Each column's width: its widest cell, narrowed as this module says until the table fits in
    `width`. On a terminal too narrow even for what may not be cut, rich cuts it (never wraps).
    `widest`: _widest's, when the caller has it (then `cells` is not read)."""
    widths = list(widest) if widest is not None else _widest(columns, cells)
    # A floor past a column's widest cell asks for nothing more than that cell.
    titles = [max(cell_len(title), min((floors or {}).get(key, 0), widths[i])) for i, (title, key) in enumerate(columns)]
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

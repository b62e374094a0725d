"""render/table.py draws what rich's Table (box=None, pad_edge=False, no_wrap, ellipsis) draws, at
the cost of a string a row: held to rich's own output over many seeded random tables (wide
characters, cuts, right-justified cells, styled columns, wrapped captions), plain and on a terminal."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jobtpu.render.table import FittedTable

pytestmark = pytest.mark.fast

PIECES = ["a", "b", " ", "日", "本", "é", "…", "xxx", "ü", "  "]


def by_rich(t: FittedTable, width: int) -> str:
    table = Table(box=None, header_style="bold", pad_edge=False, caption=t.caption, caption_justify="left",
                  caption_style="dim")
    for title, size, right in zip(t.titles, t.widths, t.right, strict=True):
        table.add_column(title, no_wrap=True, overflow="ellipsis", width=size, justify="right" if right else "left")
    for row in t.rows:
        table.add_row(*(Text(c, no_wrap=True, overflow="ellipsis") for c in row))
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue()


def by_us(t: FittedTable, width: int, terminal: bool) -> str:
    out = io.StringIO()
    t.write(Console(file=out, width=width, color_system=None, force_terminal=terminal))
    return out.getvalue()


def random_table(rnd: random.Random) -> FittedTable:
    k = rnd.randint(1, 5)

    def word(most: int) -> str:
        return "".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, most)))
    rows = [[word(15) for _ in range(k)] for _ in range(rnd.randint(0, 4))]
    styled = rnd.choice([None, *range(k)])
    return FittedTable(titles=[word(8) or "t" for _ in range(k)], widths=[rnd.randint(1, 12) for _ in range(k)],
                       right=[rnd.random() < 0.3 for _ in range(k)], rows=rows, styled=styled,
                       styles=None if styled is None else {row[styled]: "red" for row in rows},
                       caption=rnd.choice([None, "3 queued", "a caption long enough to wrap at the table's width, "
                                                             "as rich wraps a table's caption"]))


@pytest.mark.parametrize("seed", range(8))
def test_a_fitted_table_reads_as_richs_table(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(250):
        table = random_table(rnd)
        width = max(table.width, 10) + rnd.randint(0, 5)
        expected = by_rich(table, width)
        assert by_us(table, width, terminal=False) == expected, table
        assert by_us(table, width, terminal=True) == expected, table


def test_a_terminal_gets_the_status_in_its_colour() -> None:
    out = io.StringIO()
    FittedTable(["id", "status"], [2, 8], [True, False], [["1", "running"]], styled=1,
                styles={"running": "green"}).write(Console(file=out, width=20, force_terminal=True,
                                                           color_system="standard"))
    assert "\x1b[32mrunning \x1b[0m" in out.getvalue() and "\x1b[1mid  status  \x1b[0m" in out.getvalue()

"""A table whose columns are already fitted (columns.fit), drawn at the cost of one string a row.

rich's Table measures, wraps and pads every cell through its whole rendering pipeline: about a
millisecond a row, 10 s for `status --all` over 10,000 jobs. A jobs table needs none of that: every
cell is one line, cut to a width already chosen. This draws the same characters rich's Table
(box=None, pad_edge=False, no_wrap, overflow="ellipsis") would, as plain strings for a file or a
pipe, and as a few styled segments a row for a terminal or a live view; tests/test_table_names.py
holds it to rich's own output."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

from jobtpu.render.text import cell_width
from jobtpu.schema.msgspec_lib import msgspec

GAP = "  "  # rich's padding (0, 1) between two columns, none at the edges


def fit_cell(text: str, width: int, right: bool) -> str:
    """`text` in exactly `width` columns: padded (on the left when `right`), or cut with an ellipsis
    as rich cuts it (a wide character that does not fit leaves a space; a right-justified cell loses
    its trailing spaces first)."""
    if right:
        text = text.rstrip()
    if text.isascii():  # most cells: a character a column
        if len(text) <= width:
            return text.rjust(width) if right else text.ljust(width)
        return text[:width - 1] + "…" if width > 0 else ""
    size = cell_width(text)
    if size > width:
        from rich.cells import set_cell_size

        text = set_cell_size(text, width - 1) + "…" if width > 0 else ""
        size = width
    pad = " " * (width - size)
    return pad + text if right else text + pad


class FittedTable(msgspec.Struct, frozen=True):
    """`rows` of cells (strings), one per kept column, drawn `widths` wide. `styles`: a style per
    cell value of the column `styled` (a status's colour). `caption`: lines under the table, dim."""

    titles: Sequence[str]
    widths: Sequence[int]
    right: Sequence[bool]
    rows: Sequence[Sequence[str]]
    styled: int | None = None
    styles: dict[str, str] | None = None
    caption: str | None = None

    @property
    def width(self) -> int:
        return sum(self.widths) + len(GAP) * max(len(self.widths) - 1, 0)

    def header(self) -> str:
        return self.line(self.titles)

    def line(self, cells: Sequence[str]) -> str:
        return GAP.join(fit_cell(c, w, r) for c, w, r in zip(cells, self.widths, self.right, strict=True))

    def lines(self) -> Iterator[str]:
        """The header and the rows, without styles (what a file or a pipe gets)."""
        yield self.header()
        for row in self.rows:
            yield self.line(row)

    def write(self, console: Console) -> None:
        """Draw on `console`: plain strings where it has no terminal to style, else through rich."""
        if console.is_terminal or console.record:
            console.print(self)
            return
        console.file.write("".join(f"{line}\n" for line in self.lines()))
        if self.caption:  # wrapped at the table's width, as rich's Table does its caption
            console.print(self.caption, style="dim", highlight=False, width=self.width, justify="left")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment
        from rich.style import Style

        yield Segment(self.header(), Style(bold=True))
        yield Segment.line()
        styled, styles = self.styled, self.styles or {}
        for row in self.rows:
            if styled is None or not styles.get(row[styled]):
                yield Segment(self.line(row))
            else:
                cells = [fit_cell(c, w, r) for c, w, r in zip(row, self.widths, self.right, strict=True)]
                head = GAP.join(cells[:styled])
                yield Segment(head + (GAP if styled else ""))
                yield Segment(cells[styled], console.get_style(styles[row[styled]]))
                tail = GAP.join(cells[styled + 1:])
                yield Segment((GAP if tail or styled + 1 < len(cells) else "") + tail)
            yield Segment.line()
        if self.caption:
            text = console.render_str(self.caption, style="dim", highlight=False)
            yield from console.render(text, options.update(width=self.width, justify="left", height=None))

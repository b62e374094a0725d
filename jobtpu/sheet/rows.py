"""The sheet as jobtpu reads it (a SheetGrid: the cells and where its columns are, the rows with a
machine name, the hand claims) and the fewest cells that bring it to what a pass wants (a WritePlan);
finding and printing rows for `sheet find` and `sheet show`. Pure: no API, no files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jobtpu.decide.sheet_layout import COLUMNS, JOBTPU, TITLES, SheetLayout, SheetMachine, SheetRow, when
from jobtpu.errors import JobtpuError
from jobtpu.limits import cell
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.sheet.memo import Memo


class SheetGrid(msgspec.Struct, frozen=True):
    """One read of the worksheet: its cells and where jobtpu's columns are in them."""

    cells: list[list[str]]
    positions: dict[str, int]  # column key → 0-based column in the sheet
    taken: float = 0.0  # when it was read (epoch seconds); 0: not read from the API
    layout: SheetLayout = JOBTPU

    @property
    def rows(self) -> list[SheetRow]:
        """Rows with a machine name, first one of a name only (a copy further down is a person's)."""
        seen: set[str] = set()
        rows = []
        name_at = self.positions.get("name")
        if name_at is None:
            return []
        for index, line in enumerate(self.cells[1:], start=1):
            name = self.layout.machine_of(_at(line, name_at).strip())
            if not name or name in seen:
                continue
            seen.add(name)
            cells = {k: _at(line, i) for k, i in self.positions.items()}
            rows.append(SheetRow(index + 1, {**self.layout.known(name), **cells, "name": name}))
        return rows

    def row(self, name: str) -> SheetRow | None:
        name = self.layout.machine_of(name.strip()) or name  # an alias typed for a tpu-manager row
        return next((r for r in self.rows if r.name == name), None)

    def claims(self, memo: Memo, own: Mapping[str, str] | None = None) -> dict[str, str]:
        """Machine → who holds it by hand: a user cell jobtpu did not write (nor would write now,
        unless it was a claim already: a person's own jobs may run on the machine they claimed)."""
        own = own or {}
        return {row.name: holder for row in self.rows
                if is_claim(memo, row.name, holder := self.layout.holder(row), own.get(row.name, ""))}

    def titles(self, columns: Iterable[str]) -> list[str]:
        """The columns' titles as `sheet show` prints them: on a tab of fixed columns, its own header."""
        header = self.cells[0] if self.cells else []
        at = self.positions
        return [self.layout.header(c, _at(header, at[c]) if c in at else "") for c in columns]


def is_claim(memo: Memo, name: str, holder: str, mine: str) -> bool:
    """Whether a user cell holding `holder` is a person's claim, `mine` being what jobtpu would write
    there now. A cell jobtpu wrote is none; one that matches `mine` is none either (jobtpu's, its memo
    lost) unless the last read saw it as a claim: then it was typed before the job came."""
    if not holder or memo.mine(name, holder):
        return False
    return holder != mine or memo.claims.get(name) == holder


def _at(line: list[str], index: int) -> str:
    return line[index] if index < len(line) else ""


def grid_from_values(values: list[list[Any]], layout: SheetLayout = JOBTPU) -> SheetGrid:
    """The layout locates jobtpu's columns (on its own layout: by the header row's titles)."""
    rows = [[str(c) for c in line] for line in values]
    return SheetGrid(rows, layout.positions(rows[0] if rows else []), layout=layout)


class WritePlan(msgspec.Struct):
    """Cells to change, as (0-based row, 0-based column) → text, and the memo after the write."""

    cells: dict[tuple[int, int], str]
    memo: Memo

    def ranges(self, worksheet: str) -> list[dict[str, Any]]:
        """One A1 range per run of adjacent changed cells in a row: the body of one batchUpdate."""
        data = []
        for row in sorted({r for r, _ in self.cells}):
            columns = sorted(c for r, c in self.cells if r == row)
            start = prev = columns[0]
            for column in [*columns[1:], None]:
                if column is not None and column == prev + 1:
                    prev = column
                    continue
                values = [cell(self.cells[(row, c)]) for c in range(start, prev + 1)]  # never over Google's cap
                data.append({"range": f"{quote_title(worksheet)}!{_a1(row, start)}:{_a1(row, prev)}",
                             "values": [values]})
                if column is not None:
                    start = prev = column
        return data


def plan_write(grid: SheetGrid, wanted: Iterable[SheetMachine], memo: Memo, columns: tuple[str, ...],
               now: float) -> WritePlan:
    """The fewest cells that make the sheet show `wanted`, leaving claims, people's notes and
    columns jobtpu does not own alone. Empty when the sheet already shows it all."""
    positions, cells = _with_header(grid, columns)
    after = memo.copy()
    existing = {r.name: r for r in grid.rows}
    next_free = max(len(grid.cells), 1)
    for machine in wanted:
        if machine.name in memo.unregistered:
            continue
        row = existing.get(machine.name)
        if row is None and not grid.layout.adds_rows:
            continue  # a tab jobtpu does not keep: only rows people made are written
        if row is None:
            row = SheetRow(next_free + 1, {})
            next_free += 1
        target = _row_cells(grid.layout, row, machine, memo, after, now)
        if row.cells:
            target.pop("name", None)  # found by its name: leave it as typed (" v3-a " included)
        changed = {k: v for k, v in target.items() if k in positions and v != row.get(k)}
        if changed and "updated" in positions:
            changed["updated"] = when(now)
        for key, value in changed.items():
            cells[(row.number - 1, positions[key])] = value
    return WritePlan(cells, after)


def _with_header(grid: SheetGrid, columns: tuple[str, ...]) -> tuple[dict[str, int], dict[tuple[int, int], str]]:
    """Where each configured column is, adding the missing ones at the header's right end."""
    if not grid.layout.adds_rows:
        return dict(grid.positions), {}  # fixed columns: the tab's header is people's
    positions = {k: i for k, i in grid.positions.items() if k in columns}
    header = grid.cells[0] if grid.cells else []
    cells: dict[tuple[int, int], str] = {}
    free = len(header)
    for key in columns:
        if key not in positions:
            positions[key] = free
            cells[(0, free)] = TITLES[key]
            free += 1
    return positions, cells


render_row = JOBTPU.render


def render_rows(machines: Iterable[SheetMachine], columns: tuple[str, ...] = COLUMNS) -> list[list[str]]:
    """The header and one line per machine, in `columns` order (`updated` left empty: it is the write's time)."""
    return [[TITLES[c] for c in columns]] + [[render_row(m).get(c, "") for c in columns] for m in machines]


def _row_cells(layout: SheetLayout, row: SheetRow, machine: SheetMachine, memo: Memo, after: Memo,
               now: float) -> dict[str, str]:
    """The text each cell of a machine's row should hold; updates `after` with what jobtpu writes."""
    mine = ", ".join(machine.users)
    rendered = layout.render(machine)
    target = {k: rendered[k] for k in layout.always}
    if is_claim(memo, machine.name, layout.holder(row), mine):
        if not row.get("since"):  # a claim: the person's cell stays; note when jobtpu first saw it
            target["since"] = when(now)
    else:
        target.update({k: rendered[k] for k in layout.held})
        if mine:
            after.users[machine.name] = mine
        else:
            after.users.pop(machine.name, None)
    target.update(_note_cell(layout, row, machine, memo, after))
    return target


def _note_cell(layout: SheetLayout, row: SheetRow, machine: SheetMachine, memo: Memo, after: Memo) -> dict[str, str]:
    """The job's note in its cell while the job is there, and gone with it; `after.notes` keeps what
    jobtpu wrote. A person's edit of that text is theirs (never changed nor cleared); on a layout that
    keeps people's notes, a cell holding someone's text gets no job's note."""
    key, name = layout.note_cell, machine.name
    text, wrote, now = layout.job_note(machine), memo.notes.get(name), row.get(layout.note_cell)
    ours = now == wrote or (bool(text) and now == text)  # the text jobtpu wrote (or a write whose answer was lost)
    if text and text != wrote:  # a note arrived, or the jobs bringing it changed
        if ours or not now.strip() or layout.notes_over_people:
            after.notes[name] = text
            return {key: text}
        after.notes.pop(name, None)  # a person's text stays, and is not jobtpu's to clear later
    elif not text and wrote is not None:  # the jobs that brought it have gone (ended, killed, failed)
        after.notes.pop(name, None)
        return {key: ""} if ours else {}
    return {}


def _a1(row: int, column: int) -> str:
    letters = ""
    index = column + 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return f"{letters}{row + 1}"


def quote_title(title: str) -> str:
    """A worksheet title in an A1 range, always quoted (Google accepts it quoted whatever it holds)."""
    return "'" + title.replace("'", "''") + "'"


# ----------------------------------------------------------------------------- finding
def find(rows: Iterable[SheetRow], tokens: list[str], preemptible: bool | None = None) -> list[SheetRow]:
    """Rows whose accelerator matches every token the way `--req` matches machines (v3, v2,v3, v3+,
    v3-32, preemptible, on-demand); `preemptible` (-p / -n) adds a provisioning filter."""
    from jobtpu.decide.fit import accelerator_matches, parse_request

    request = parse_request(tokens)
    if request.resources:
        name = next(iter(request.resources))
        raise JobtpuError(f"sheet find: {name}=... is a resource; find filters by accelerator",
                          hint="accelerator patterns: v3-32 (exact), v3 (family), v2-32,v3-32 (either), v3+; -p, -n")
    want_preemptible = preemptible if preemptible is not None else request.preemptible
    found = []
    for row in rows:
        accelerator = row.get("accelerator").strip().lower()
        if not all(any(accelerator_matches(p, accelerator) for p in alternatives)
                   for alternatives in request.accelerators):
            continue
        if want_preemptible is not None and row.preemptible is not want_preemptible:
            continue
        found.append(row)
    return found


def format_rows(rows: list[SheetRow], columns: tuple[str, ...] = COLUMNS, layout: SheetLayout = JOBTPU,
                titles: list[str] | None = None, width: int | None = None) -> list[str]:
    """Aligned text lines: a header (`titles`, else the layout's), then one line per row (a cell's own
    line breaks become spaces). Widths are display cells (a CJK character takes two). With `width`
    (a terminal's), the table fits it as `status` does (jobtpu/render/columns.py): long cells are cut
    (`…`), then the layout's least needed columns left out; a machine's name, user and status stay whole."""
    from rich.cells import cell_len

    from jobtpu.render.columns import FitRules as Fit
    from jobtpu.render.columns import fit

    heads = [" ".join(t.split()) for t in titles or [layout.header(c, "") for c in columns]]
    cells = [[" ".join((r.get(c) or "-").split()) for c in columns] for r in rows]
    if width is None:
        kept = list(range(len(columns)))
        widths = [max(cell_len(line[i]) for line in [heads, *cells]) for i in kept]
    else:
        how = Fit(frozenset(columns) - set(layout.whole), layout.dropped_first, layout.cut_first, readable=8)
        kept, widths = fit(list(zip(heads, columns, strict=True)), cells, width, how)
    lines = ["  ".join(_fit(line[i], w) for i, w in zip(kept, widths, strict=True)).rstrip()
             for line in [heads, *cells]]
    return lines if width is None else [_fit(line, width).rstrip() for line in lines]


def _fit(text: str, width: int) -> str:
    """`text` in exactly `width` display cells: padded, or cut with `…`."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(text) > width:  # cut at a character's edge: a wide one is never split in two
        text = set_cell_size(text, max(width - 1, 0)).rstrip() + "…" if width > 0 else ""
    return text + " " * (width - cell_len(text))

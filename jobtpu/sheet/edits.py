"""The sheet commands that change one row: `sheet note`, `sheet release`, `sheet register` and
`sheet unregister`. Each reads the sheet, checks, writes once, and returns the line to print, or
raises a JobtpuError (one line, nothing changed)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from pathlib import Path

from jobtpu.decide.sheet_layout import TITLES, SheetMachine, SheetRow, when
from jobtpu.errors import JobtpuError, NotFoundError
from jobtpu.limits import MAX_SHEET_NOTE, check_length
from jobtpu.schema.sheet_config import SheetConfig
from jobtpu.sheet.api import SheetApi, read_sheet
from jobtpu.sheet.memo import Memo, load_memo, memo_lock, save_memo
from jobtpu.sheet.rows import SheetGrid, WritePlan, plan_write

_NOTE_SEPARATOR = "; "


def _require_row(grid: SheetGrid, name: str) -> SheetRow:
    row = grid.row(name)
    if row is None:
        names = ", ".join(r.name for r in grid.rows[:10]) or "none"
        raise NotFoundError(f"the sheet has no row for {name!r} (rows: {names})",
                            hint=grid.layout.missing_row_hint(name))
    return row


def _require_column(grid: SheetGrid, config: SheetConfig, column: str) -> int:
    """The column's place in the sheet: a header people wrote counts, even one jobtpu does not write."""
    if column not in grid.positions:
        hint = ("run `jobtpu sheet sync` to add it" if column in config.columns
                else f"add {column!r} to sheet.columns and run `jobtpu sheet sync`, or give a column the header {TITLES[column]!r}")
        raise JobtpuError(f"the sheet has no {TITLES[column]} column; nothing was changed", hint=hint)
    return grid.positions[column]


def _write_cells(config: SheetConfig, grid: SheetGrid, row: SheetRow, values: dict[str, str], now: float) -> None:
    cells = {(row.number - 1, grid.positions[k]): v for k, v in values.items() if k in grid.positions}
    if "updated" in grid.positions and "updated" in config.columns:
        cells[(row.number - 1, grid.positions["updated"])] = when(now)
    SheetApi(config).write(WritePlan(cells, Memo()).ranges(config.worksheet))


def set_note(config: SheetConfig, name: str, text: str, append: bool = False, now: float | None = None,
             me: Collection[str] = (), warn: Callable[[str], None] | None = None) -> str:
    """`sheet note NAME TEXT [--append]`: the note replaced, or TEXT added after it. On a row that
    someone other than `me` (the caller's names: user name, sheet name) holds, `warn` gets one line
    first; the note is still written (a note is how a team talks about a machine)."""
    check_length("the note", text, MAX_SHEET_NOTE, "keep the note short; it is shown in a sheet cell")
    grid = read_sheet(config)
    row = _require_row(grid, name)
    _require_column(grid, config, "note")
    others = held_by_others(grid.layout.holder(row), me)
    if others and warn is not None:
        warn(f"{row.name} is held by {', '.join(others)} in the sheet: the note is written on their row")
    old = row.get("note").strip()
    note = f"{old}{_NOTE_SEPARATOR}{text}" if append and old else text
    _write_cells(config, grid, row, {"note": note}, time.time() if now is None else now)
    return f"{name}: note: {note}" if note else f"{name}: note cleared"


def held_by_others(holder: str, me: Collection[str]) -> list[str]:
    """The people of a user cell who are not `me` (compared in any case)."""
    mine = {name.strip().casefold() for name in me}
    return [h.strip() for h in holder.split(",") if h.strip() and h.strip().casefold() not in mine]


def release(config: SheetConfig, name: str, memo_path: Path, user: str | None = None,
            now: float | None = None) -> str:
    """`sheet release NAME [--user U]`: empty a hand claim; with `user`, only when U holds it."""
    grid = read_sheet(config)
    row = _require_row(grid, name)
    name = row.name  # the memo knows machines by their names, not by an alias typed on a tpu-manager tab
    _require_column(grid, config, "user")
    holder = grid.layout.holder(row)
    memo = load_memo(memo_path)
    if not holder:
        raise JobtpuError(f"{name} is not claimed in the sheet; nothing was changed")
    if memo.mine(name, holder):
        raise JobtpuError(f"{name} is not claimed by hand: jobtpu's jobs of {holder} run there; nothing was changed",
                          hint=f"`jobtpu kill` their jobs to free {name}")
    holders = [h.strip() for h in holder.split(",")]
    if user is not None and user not in holders:
        raise JobtpuError(f"{name} is claimed by {holder}, not {user}; nothing was changed",
                          hint="leave out --user to release it anyway")
    _write_cells(config, grid, row, grid.layout.freed(), time.time() if now is None else now)
    with memo_lock(config, memo_path):  # passes that trust the last read must not keep the claim
        memo = load_memo(memo_path)
        memo.claims.pop(name, None)
        memo.written = ""
        save_memo(memo_path, memo)
    return f"{name}: released (was claimed by {holder})"


def register(config: SheetConfig, name: str, memo_path: Path, row: SheetMachine | None = None,
             now: float | None = None) -> str:
    """`sheet register NAME`: the machine gets its row now (and in every later pass)."""
    with memo_lock(config, memo_path):
        return _register(config, name, memo_path, row, time.time() if now is None else now)


def _register(config: SheetConfig, name: str, memo_path: Path, row: SheetMachine | None, now: float) -> str:
    memo = load_memo(memo_path)
    grid = read_sheet(config)
    memo.unregistered.discard(name)
    memo.written = ""  # the next pass writes the row as it knows it
    existing = grid.row(name)
    if existing is not None:
        save_memo(memo_path, memo)
        return f"{name}: already in the sheet (row {existing.number})"
    plan = plan_write(grid, [row or SheetMachine(name)], memo, config.columns, now)
    SheetApi(config).write(plan.ranges(config.worksheet))
    save_memo(memo_path, plan.memo)
    return f"{name}: added to the sheet"


def unregister(config: SheetConfig, name: str, memo_path: Path) -> str:
    """`sheet unregister NAME`: its row goes (the rows below move up, people's columns with them)
    and passes no longer write it, until `sheet register NAME`."""
    with memo_lock(config, memo_path):
        return _unregister(config, name, memo_path)


def _unregister(config: SheetConfig, name: str, memo_path: Path) -> str:
    grid = read_sheet(config)
    row = _require_row(grid, name)
    memo = load_memo(memo_path)
    memo.unregistered.add(name)
    memo.written = ""
    memo.users.pop(name, None)
    memo.notes.pop(name, None)
    width = max(len(line) for line in grid.cells)
    below = [line + [""] * (width - len(line)) for line in grid.cells[row.number:]] + [[""] * width]
    cells = {(row.number - 1 + r, c): value for r, line in enumerate(below) for c, value in enumerate(line)}
    SheetApi(config).write(WritePlan(cells, memo).ranges(config.worksheet))
    save_memo(memo_path, memo)
    return f"{name}: removed from the sheet"


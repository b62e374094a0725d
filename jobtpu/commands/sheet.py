"""`jobtpu sheet ...`: the team's TPU spreadsheet by hand (passes keep it on their own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobtpu.errors import ConfigError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.views.text import printable

if TYPE_CHECKING:
    from jobtpu.schema.machines import Fleet
    from jobtpu.sheet.api import SheetConfig


def _configured(home: Home) -> tuple[Fleet, SheetConfig]:
    from jobtpu.schema.machines import load_fleet

    fleet = load_fleet(home)
    if fleet.sheet is None:
        raise ConfigError(f"{home.machines_file.name} has no sheet section; nothing was changed",
                          hint=f'add "sheet": {{"spreadsheet": "KEY or URL"}} to {home.machines_file}')
    return fleet, fleet.sheet


def _say(lines: list[str] | str) -> None:
    for line in [lines] if isinstance(lines, str) else lines:
        print(printable(line))


def sync(home: Home) -> int:
    """Bring the sheet to the fleet's rows now; exit 1 (one line) when the API cannot be used."""
    from jobtpu.sheet.api import sync as sync_sheet
    from jobtpu.sheet.hook import memo_path, sheet_rows

    fleet, config = _configured(home)
    result = sync_sheet(config, sheet_rows(fleet, Store(home).load()), memo_path(home))
    if result.problem:
        from jobtpu.commands.common import note

        note(f"jobtpu: error: {result.problem}")
        return 1
    _say(f"sheet: wrote {result.cells} cell(s)" if result.wrote else "sheet: up to date")
    for name, holder in sorted(result.claims.items()):
        _say(f"{name}: claimed by {holder} in the sheet")
    return 0


def show(home: Home) -> int:
    from jobtpu.sheet.api import format_rows, read_sheet

    _, config = _configured(home)
    _say(format_rows(read_sheet(config).rows, config.columns, config.tab))
    return 0


def find(home: Home, types: list[str], preemptible: bool | None) -> int:
    """The sheet's rows (this home's machines or not) whose accelerator matches like --req."""
    from jobtpu.sheet.api import find as find_rows
    from jobtpu.sheet.api import format_rows, read_sheet

    _, config = _configured(home)
    rows = find_rows(read_sheet(config).rows, types, preemptible)
    _say(format_rows(rows, config.columns, config.tab) if rows else "no row in the sheet matches")
    return 0


def release(home: Home, name: str, user: str | None) -> int:
    from jobtpu.sheet.api import release as release_row
    from jobtpu.sheet.hook import memo_path

    _, config = _configured(home)
    _say(release_row(config, name, memo_path(home), user))
    return 0


def note(home: Home, name: str, text: str, append: bool) -> int:
    from jobtpu.sheet.api import set_note

    _, config = _configured(home)
    _say(set_note(config, name, text, append))
    return 0


def register(home: Home, name: str) -> int:
    """Add NAME's row: filled from the fleet when NAME is one of its machines, else the name alone."""
    from jobtpu.sheet.api import register as register_row
    from jobtpu.sheet.hook import memo_path, sheet_rows

    fleet, config = _configured(home)
    config.tab.check_rows_editable("register")
    rows = {row.name: row for row in sheet_rows(fleet, Store(home).load())} if name in fleet.machines else {}
    _say(register_row(config, name, memo_path(home), rows.get(name)))
    return 0


def unregister(home: Home, name: str) -> int:
    from jobtpu.sheet.api import unregister as unregister_row
    from jobtpu.sheet.hook import memo_path

    _, config = _configured(home)
    config.tab.check_rows_editable("unregister")
    _say(unregister_row(config, name, memo_path(home)))
    return 0

"""`jobtpu sheet ...`: the team's TPU spreadsheet by hand (passes keep it on their own)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.errors import ConfigError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.render.text import printable

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Fleet
    from jobtpu.schema.sheet_config import SheetConfig


def _configured(home: Home) -> tuple[Fleet, SheetConfig]:
    from jobtpu.home.machines import load_fleet

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
    from jobtpu.passes.sheet_hook import memo_path, sheet_rows
    from jobtpu.sheet.sync import sync as sync_sheet

    fleet, config = _configured(home)
    result = sync_sheet(config, sheet_rows(fleet, Store(home).load(), home), memo_path(home))
    if result.problem:
        from jobtpu.commands.common import note

        note(f"jobtpu: error: {result.problem}")
        return 1
    _say(f"sheet: wrote {result.cells} cell(s)" if result.wrote else "sheet: up to date")
    for name, holder in sorted(result.claims.items()):
        _say(f"{name}: claimed by {holder} in the sheet")
    return 0


def show(home: Home) -> int:
    from jobtpu.decide.sheet_layout import layout_of
    from jobtpu.sheet.api import read_sheet
    from jobtpu.sheet.rows import format_rows

    _, config = _configured(home)
    grid = read_sheet(config)
    _say(format_rows(grid.rows, config.columns, layout_of(config), grid.titles(config.columns), _screen_width()))
    return 0


def _screen_width() -> int | None:
    """The terminal's width ($COLUMNS first), or None when the output goes to a pipe or file:
    there every cell is printed whole."""
    import os
    import sys

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError):
        return None


def find(home: Home, types: list[str], preemptible: bool | None) -> int:
    """The sheet's rows (this home's machines or not) whose accelerator matches like --req."""
    from jobtpu.decide.sheet_layout import layout_of
    from jobtpu.sheet.api import read_sheet
    from jobtpu.sheet.rows import find as find_rows
    from jobtpu.sheet.rows import format_rows

    _, config = _configured(home)
    grid = read_sheet(config)
    rows = find_rows(grid.rows, types, preemptible)
    _say(format_rows(rows, config.columns, layout_of(config), grid.titles(config.columns), _screen_width())
         if rows else "no row in the sheet matches")
    return 0


def release(home: Home, name: str, user: str | None) -> int:
    from jobtpu.passes.sheet_hook import memo_path
    from jobtpu.sheet.edits import release as release_row

    _, config = _configured(home)
    _say(release_row(config, name, memo_path(home), user))
    return 0


def note(home: Home, name: str, text: str, append: bool) -> int:
    from jobtpu.commands.common import note as warn
    from jobtpu.sheet.edits import set_note

    _, config = _configured(home)
    _say(set_note(config, name, text, append, me=_my_names(home),
                  warn=lambda line: warn(f"jobtpu: warning: {line}")))
    return 0


def _my_names(home: Home) -> set[str]:
    """The names the sheet may know the caller by: their user name and their sheet_name."""
    from jobtpu.errors import JobtpuError
    from jobtpu.home.actor import resolve_user
    from jobtpu.passes.sheet_hook import sheet_names

    try:
        user = resolve_user(None)
    except JobtpuError:
        return set()
    return {user, *sheet_names(home, {user}).values()}


def register(home: Home, name: str) -> int:
    """Add NAME's row: filled from the fleet when NAME is one of its machines, else the name alone."""
    from jobtpu.decide.sheet_layout import layout_of
    from jobtpu.passes.sheet_hook import memo_path, sheet_rows
    from jobtpu.sheet.edits import register as register_row

    fleet, config = _configured(home)
    layout_of(config).check_rows_editable("register")
    rows = {row.name: row for row in sheet_rows(fleet, Store(home).load(), home)} if name in fleet.machines else {}
    _say(register_row(config, name, memo_path(home), rows.get(name)))
    return 0


def unregister(home: Home, name: str) -> int:
    from jobtpu.decide.sheet_layout import layout_of
    from jobtpu.passes.sheet_hook import memo_path
    from jobtpu.sheet.edits import unregister as unregister_row

    _, config = _configured(home)
    layout_of(config).check_rows_editable("unregister")
    _say(unregister_row(config, name, memo_path(home)))
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    parser = args.add_command(subparsers, "sheet")
    parser.set_defaults(func=_run_op)
    # Its operations parse as the commands do (one-line errors, did-you-mean): the same parser class.
    ops = parser.add_subparsers(dest="sheet_op", metavar="OP", parser_class=type(parser))
    ops.required = True

    def op(name: str, help_text: str) -> argparse.ArgumentParser:
        return ops.add_parser(name, help=help_text, description=help_text)

    op("sync", "write the machines' rows now (a pass does it on its own)")
    op("show", "print the sheet as jobtpu reads it")
    p = op("find", "the sheet's rows whose accelerator matches, like --req (v3, v2,v3, v3+, v3-32)")
    p.add_argument("types", nargs="*", metavar="TYPE", help="accelerator patterns, all of which must match")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("-p", "--preemptible", action="store_const", const=True, dest="preemptible",
                      help="only preemptible or spot machines")
    kind.add_argument("-n", "--on-demand", action="store_const", const=False, dest="preemptible",
                      help="only on-demand machines")
    p = op("release", "clear a claim made by hand in the sheet's user cell")
    p.add_argument("name", help="the machine's name in the sheet")
    p.add_argument("--user", help="only if this user holds it")
    p = op("note", "set a machine's note in the sheet")
    p.add_argument("name", help="the machine's name in the sheet")
    p.add_argument("text", help="the note (\"\" clears it)")
    p.add_argument("--append", action="store_true", help="add TEXT after the note instead of replacing it")
    p = op("register", "add a machine's row (passes write it again)")
    p.add_argument("name", help="a machine of machines.json, or any name (a TPU another home runs)")
    p = op("unregister", "remove a machine's row (passes leave it off until register)")
    p.add_argument("name", help="the machine's name in the sheet")


def _run_op(home: Home, a: argparse.Namespace) -> int:
    calls: dict[str, Callable[[], int]] = {
        "sync": lambda: sync(home), "show": lambda: show(home),
        "find": lambda: find(home, a.types, a.preemptible),
        "release": lambda: release(home, a.name, a.user),
        "note": lambda: note(home, a.name, a.text, a.append),
        "register": lambda: register(home, a.name), "unregister": lambda: unregister(home, a.name),
    }
    return calls[a.sheet_op]()

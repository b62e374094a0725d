"""The command table (jobtpu/commands/table.py, docs/design.md §5): one row per command word, from
which the parser build, `jobtpu --help`, completion's commands and the member/runner rule of a
shared home (docs/reference/home-files.md §1.3) are derived. These tests hold the table equal to
what the command modules add, every row's role given, `--help` free of command modules, and the
command line's output (every --help, the usage errors) as it was recorded in tests/golden/. That
the relayed rows are schema/acts.py's structs is tests/test_act_request.py's.

After a deliberate change of a command's help or a usage line, rewrite the golden files and read
their diff:

    JOBTPU_UPDATE_GOLDEN=1 python3 -m pytest -q -p no:cacheprovider tests/test_command_table.py"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobtpu.cli import build_parser, main
from jobtpu.commands import table
from jobtpu.commands.completion import complete
from jobtpu.commands.parsing import CommandParser, every_parser
from jobtpu.commands.table import COMMANDS, SharedRole

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("JOBTPU_UPDATE_GOLDEN") == "1"


def _words_added(module: str) -> list[str]:
    parser = CommandParser(prog="jobtpu")
    sub = parser.add_subparsers(dest="command", parser_class=CommandParser)
    importlib.import_module(table.module_name(module)).add_parser(sub)
    return list(sub.choices)


def test_every_word_a_module_adds_has_its_row_and_every_row_a_word_its_module_adds() -> None:
    adders = sorted(path.stem if path.parent.name == "commands" else f"{path.parent.name}.{path.stem}"
                    for path in (ROOT / "jobtpu").rglob("*.py") if "\ndef add_parser(" in path.read_text(encoding="utf-8"))
    assert sorted(table.MODULES) == adders  # a module that adds parsers has rows, and no row names another
    for module in table.MODULES:
        assert _words_added(module) == table.words_of(module), module
    assert len(table.ROWS) == len(COMMANDS)  # one row per word


def test_every_row_gives_its_role_and_its_summary() -> None:
    for row in COMMANDS:
        assert isinstance(row.role, SharedRole) and row.summary.strip() == row.summary != "", row
        assert not row.member_uses or row.role is SharedRole.RUNNER_ONLY, row  # exceptions to a refusal only


@pytest.mark.parametrize(("words", "member_may", "old_layout_may"), [
    (["status", "--all"], True, True),
    (["tail", "3"], True, True),
    (["exec", "box", "--", "ls"], True, True),
    (["completion", "bash"], True, True),
    (["submit", "--cmd", "x"], True, False),
    (["config", "set", "rule", "x"], True, False),
    (["serve"], True, False),
    (["kill", "3"], True, False),  # relayed before member_may is asked: the act is the runner's to do
    (["manage"], False, False),
    (["init"], False, False),
    (["user", "ls"], True, False),
    (["user", "add", "ann"], False, False),
    (["user"], False, False),
    (["sheet", "show"], True, False),
    (["sheet", "sync"], False, False),
    (["tpu", "status", "v4"], False, False),
])
def test_what_a_member_may_run(words: list[str], member_may: bool, old_layout_may: bool) -> None:
    assert table.member_may(words[0], words) is member_may
    assert table.old_layout_may(words[0]) is old_layout_may


def test_completion_offers_the_table_s_commands_in_its_order() -> None:
    assert complete([""], build_parser(), lambda kind, home: []) == [row.word for row in COMMANDS]
    assert complete(["--version", "st"], build_parser(), lambda kind, home: []) == ["status"]
    assert complete(["--version", "kill", "--sw"], build_parser(), lambda kind, home: []) == ["--sweep"]


def _modules_after(*words: str) -> set[str]:
    """The command modules (rows' modules) a fresh interpreter has imported after `jobtpu WORDS`."""
    probe = ("import contextlib, io, sys\nfrom jobtpu.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
             f"    main({list(words)!r})\n"
             "print('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()
    return {module for module in table.MODULES if table.module_name(module) in out}


def test_help_lists_every_command_without_importing_a_command_module() -> None:
    assert _modules_after("--help") == set()
    assert _modules_after("sbmit") == set()  # a mistyped command: the table's words are enough to say so
    assert _modules_after("tldr", "--help") == {"tldr"}
    assert _modules_after("check", "--help") == {"status"}  # the old tool's verb loads the command it means


def _every_path(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [words]
    commands = parser.commands if isinstance(parser, CommandParser) else None
    for name, sub in (commands.choices.items() if commands is not None else ()):
        found += _every_path(sub, (*words, name))
    return found


def _run(words: list[str]) -> tuple[int | str | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str | None = main(words)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


# Usage mistakes and shapes whose path through the parser is not one command's: none, a typo, an
# unknown top-level option before a command (the command's own parser still speaks first), the old
# tool's verbs.
CASES = [[], ["sbmit"], ["xyzzy", "3"], ["--bogus", "status"], ["--home", "h", "--bogus", "kill", "--nope"],
         ["queue", "--help"], ["check", "--help"], ["rel", "--help"], ["ls", "--help"], ["describe", "--help"],
         ["find", "--help"], ["-h", "submit"], ["status", "--stauts", "x"], ["sheet", "relase"], ["kill", "w=x"]]


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs: see its diff with JOBTPU_UPDATE_GOLDEN=1"


def test_every_help_is_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    shown = []
    for path in _every_path(every_parser()):
        code, out, _ = _run([*path, "--help"])
        assert code == 0, path
        shown.append(f"==> jobtpu {' '.join((*path, '--help'))}\n{out}")
    _check_golden("help.txt", "".join(shown))


def test_the_command_line_s_usage_lines_are_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("JOBTPU_HOME", "/nonexistent/jobtpu-home")
    shown = []
    for words in CASES:
        code, out, err = _run(words)
        shown.append(f"==> jobtpu {' '.join(words)}\nexit {code}\n--- stdout\n{out}--- stderr\n{err}")
    _check_golden("command_line.txt", "".join(shown))

"""Every long option `jobtpu CMD --help` shows is documented in the reference (issue 19): in the
section of docs/reference/commands.md for that command, or in §2.1 "Conventions", which holds what
all commands share (`--home`, `--json`, `--user`, `--force`); a command whose usage line takes
`[SELECTORS]` finds them in the table of `kill`'s section (§2.7). A test walks the real parser, so an
option added without its line in the docs fails here with the list of what is missing."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtpu.commands.parsing import every_parser

pytestmark = pytest.mark.fast

COMMANDS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "commands.md"
HEADING = re.compile(r"^(#{2,4}) (\d+(?:\.\d+)*)\.? (.*)$")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def long_options(parser: argparse.ArgumentParser) -> list[str]:
    """The `--xyz` options a parser's --help shows (help itself aside)."""
    return [opt for action in parser._actions if action.help != argparse.SUPPRESS
            and not isinstance(action, argparse._HelpAction)
            for opt in action.option_strings if opt.startswith("--")]


def every_command(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], list[str]]]:
    """(command words, long options) for the top level and every command and subcommand (`sheet find`)."""
    yield path, long_options(parser)
    for name, sub in _subcommands(parser).items():
        yield from every_command(sub, path + (name,))


def sections(text: str) -> dict[str, str]:
    """Each heading's number → the text under it, down to the next heading of the same or a higher level
    (so §2.2 holds §2.2.1 to §2.2.8)."""
    lines = text.splitlines()
    heads = [(i, len(m.group(1)), m.group(2)) for i, line in enumerate(lines) if (m := HEADING.match(line))]
    found = {}
    for k, (i, level, number) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1:] if lv <= level), len(lines))
        found[number] = "\n".join(lines[i:end])
    return found


def section_of(command: str, text: str) -> str | None:
    """The number of the section whose heading names `command` in backticks (`hold` and `release`)."""
    for line in text.splitlines():
        m = HEADING.match(line)
        if m and f"`{command}`" in m.group(3):
            return m.group(2)
    return None


def mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def missing_options() -> list[str]:
    text = COMMANDS_PAGE.read_text()
    by_number = sections(text)
    conventions = by_number["2.1"]
    missing = []
    for path, options in every_command(every_parser()):
        number = section_of(path[0], text) if path else None
        if path and number is None:
            missing.append(f"jobtpu {' '.join(path)}: no section of {COMMANDS_PAGE.name} names it")
            continue
        own = by_number[number] if number else ""
        if "[SELECTORS]" in own:  # its usage line names the selectors `kill`'s section tables for all
            own += by_number[section_of("kill", text) or ""]
        for option in options:
            if not (mentions(own, option) or mentions(conventions, option)):
                where = f"§{number} nor §2.1" if number else "§2.1"
                missing.append(f"jobtpu {' '.join(path + (option,))}  (not in {COMMANDS_PAGE.name} {where})")
    return missing


def test_the_walk_finds_subcommands_and_their_options() -> None:
    walked = dict(every_command(every_parser()))
    assert walked[()] == ["--home", "--version"]
    assert "--preemptible" in walked[("sheet", "find")] and "--on-demand" in walked[("sheet", "find")]
    assert "--sweep" in walked[("kill",)] and "--max-recoveries" in walked[("submit",)]
    assert len(walked) >= 30


def test_every_long_option_of_every_command_is_in_the_reference() -> None:
    missing = missing_options()
    assert not missing, "long options --help shows that docs/reference/commands.md does not document:\n  " + \
        "\n  ".join(missing)

"""The command line's parser, one for every use: each command module adds its own parser beside the
function it runs, and this assembles them (`build_parser`), with the parser class that says a
mistake in one line (exit 2). `jobtpu` parses a command line with it, and a member of a shared home
parses an act with it before sending its values to the runner (commands/relay.py): one parser, so
both mean the same by the same words. Which commands there are, and which module adds each, is the
command table's (commands/table.py)."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from jobtpu.commands import args as arguments
from jobtpu.errors import EXIT_USAGE

PROG = "jobtpu"


class CommandParser(arguments.Parser):
    def error(self, message: str) -> NoReturn:  # bad usage: exit 2, one line and a pointer to --help
        from jobtpu.render.text import printable  # a word typed with a control character: still one line

        hint = _usage_hint(message) or f"see `{self.prog} --help`"
        sys.stderr.write(f"jobtpu: error: {printable(message)}\nhint: {printable(hint)}\n")
        raise SystemExit(EXIT_USAGE)

    # A command's place in the full parser until a parse, completion or the old tool's shapes reach it
    # (build_parser): the command table's word and summary, none of its arguments yet.
    placeholder_in: arguments.Subparsers | None = None

    def loaded(self) -> arguments.Parser:
        """This parser; for a placeholder, its command's own: the module adds its parsers, which take
        the placeholders' places (the same words, in the same order)."""
        if self.placeholder_in is None:
            return self
        from jobtpu.commands.table import ROWS

        word = self.prog.removeprefix(f"{PROG} ")
        scratch = CommandParser(prog=PROG, add_help=False).add_subparsers(prog=PROG, parser_class=CommandParser)
        _module(ROWS[word].module).add_parser(scratch)
        for name, made in scratch.choices.items():
            self.placeholder_in.choices[name] = made
        real = self.placeholder_in.choices[word]
        assert isinstance(real, arguments.Parser)
        return real

    # Where every word after the first "--" goes, verbatim: `exec` and `ssh` a command's words (argparse
    # would settle an optional positional before it reached them, and call them unrecognized), `submit`
    # and `run` overrides that are not checked for the old tool's habits.
    after_dashes: str | None = None

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        if self.placeholder_in is not None:
            return self.loaded().parse_known_args(args, namespace)
        words = _attach_dashed_values(list(sys.argv[1:] if args is None else args))
        if self.prog == PROG:  # the whole command line: the old tool's shapes are jobtpu's too
            words = self.old_shapes(words)
        at = words.index("--") if self.after_dashes and "--" in words else len(words)
        if self.commands is None:  # a command's own parser: its mistakes are named with its own --help
            self._check_options(words[:at])
        parsed, extras = super().parse_known_args(words[:at], namespace)
        if self.after_dashes and at < len(words):
            setattr(parsed, self.after_dashes, [*getattr(parsed, self.after_dashes, []), *words[at + 1:]])
        if extras and self.commands is None:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def old_shapes(self, words: list[str]) -> list[str]:
        """The command line with the old tool's shapes (`rel NAME`, `run … -p`, `kill w=43`) as
        jobtpu's (docs/reference/commands.md §2.1); jobtpu's own words come back as they are."""
        from jobtpu.oldshapes import rewrite

        return rewrite(words, self._takes_value)

    def _takes_value(self, command: tuple[str, ...]) -> set[str]:
        """The options of a command (`("sheet", "release")`) that take the next word as their value."""
        parser: argparse.ArgumentParser = self
        for name in command:
            commands = parser.commands if isinstance(parser, arguments.Parser) else None
            if commands is None or name not in commands.choices:
                return set()
            chosen = commands.choices[name]
            parser = chosen.loaded() if isinstance(chosen, arguments.Parser) else chosen
        kept = parser.arguments if isinstance(parser, arguments.Parser) else []
        return {o for a in kept if a.option_strings and a.nargs != 0 for o in a.option_strings}

    def _check_options(self, words: list[str]) -> None:
        """`status --stauts running`: name the option nobody knows (and the one meant) before argparse
        tries the next word as something else. An override typed as an option gets its own hint."""
        from jobtpu.suggest import option_for

        if any(a.nargs == argparse.REMAINDER for a in self.arguments):
            return  # `tag 3 --x`: the words are the command's
        known = [o for a in self.arguments for o in a.option_strings if o.startswith("--")]
        takes_overrides = any(a.dest == "overrides" for a in self.arguments)
        for word in (w for w in words if w.startswith("--") and w != "--"):
            name = word.partition("=")[0]
            if any(o.startswith(name) for o in known) or ("=" in word and takes_overrides):
                continue  # an option or a unique prefix of one, as argparse takes it
            if " " in word:
                continue  # argparse takes a word with a space as a value (`note 3 "-- see above"`)
            meant = option_for(word, known)
            self.error(f"unrecognized option {name}" + (f": did you mean {meant}?" if meant else ""))

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # Narrow, and kept on purpose: argparse (3.11) has no public hook for the word that names a
        # subcommand (a `type` on the subparsers would be applied to every word after it too). Every
        # other argument's choices are checked by its `type` (arguments.Choice), in the same words.
        commands = self.commands
        if commands is None or action is not commands or value in commands.choices:
            return super()._check_value(action, value)
        if self.prog == PROG:
            from jobtpu.suggest import command_for

            meant = command_for(str(value), commands.choices)
            if meant:
                raise argparse.ArgumentError(None, f"{value!r} is not a jobtpu command: did you mean `{meant}`?")
        raise argparse.ArgumentError(action, str(arguments.Choice(commands.choices).refusal(value)))

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # Narrow, and kept on purpose: Python 3.11's argparse strips a "--" even from an option's
        # attached value, so `--name=--` would arrive as [] (and `--tag=--` as [[]]), and offers no
        # public way around it. An attached "--" is the user's value, verbatim.
        if action.option_strings and action.nargs in (None, argparse.OPTIONAL) and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


class _Version(argparse.Action):
    """`jobtpu --version`: the installed distribution's version, read only when asked (every other
    command's start-up stays free of the package metadata scan)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> NoReturn:
        sys.stdout.write(f"jobtpu {installed_version()}\n")
        raise SystemExit(0)


def installed_version() -> str:
    """The version pip installed (setup.cfg's `version`); `unknown` for a checkout run without installing."""
    from importlib import metadata

    try:
        return metadata.version("jobtpu")
    except metadata.PackageNotFoundError:
        return "unknown"


# Options whose value is itself command-line words, so usually starts with dashes: argparse would
# take `--on-resume --config.x=1` for two options and say the first lacks its value.
DASHED_VALUES = frozenset({"--on-resume"})


def _attach_dashed_values(words: list[str]) -> list[str]:
    """`--on-resume VALUE` → `--on-resume=VALUE` (before any "--", after which words are a command's)."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] == "--":
            return out + words[i:]
        if words[i] in DASHED_VALUES and i + 1 < len(words):
            out.append(f"{words[i]}={words[i + 1]}")
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out


def _usage_hint(message: str) -> str | None:
    """For `submit --cmd x --wd=0.1`: a config override typed as an option. argparse can only call it
    an unrecognized argument; say how to pass it."""
    if not message.startswith("unrecognized arguments: "):
        return None
    words = message.removeprefix("unrecognized arguments: ").split()
    override = next((w for w in words if re.fullmatch(r"--?[A-Za-z_][A-Za-z0-9_.\-]*=.*", w)), None)
    if override is None:
        return None
    bare = override.lstrip("-")
    return (f"{override} looks like a config override: write it without dashes ({bare}), or after `--` "
            f"(-- {override}); overrides come after the options")


def build_parser(command: str | None = None) -> CommandParser:
    """The command line's parser. With `command` (a word of the command table, commands/table.py):
    that command's module's parsers alone, so a command line imports and parses only its own
    command's module (a submit then costs little more than starting Python). Without (--help, a
    mistyped command, an old tool's verb, completion's first word): every command of the table, each
    a placeholder (CommandParser.loaded) until the parse reaches it, so `jobtpu --help` imports no
    command module."""
    from jobtpu.commands.table import COMMANDS, ROWS

    parser = CommandParser(prog=PROG, description="Run training jobs on TPU VMs, GPU boxes and this machine, "
                           "over SSH, through preemptions.")
    parser.add_argument("--home", help="the folder holding machines.json and state.json")
    parser.add_argument("--version", action=_Version, help="print jobtpu's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True
    if command in ROWS:
        _module(ROWS[command].module).add_parser(sub)
    else:
        for row in COMMANDS:  # the table's summary: the line --help shows, as the module's own parser has it
            placeholder = sub.add_parser(row.word, help=row.summary, description=row.summary)
            assert isinstance(placeholder, CommandParser)
            placeholder.placeholder_in = sub
    return parser


def every_parser() -> CommandParser:
    """Every command's parser, each module loaded (for what walks them all: the tests, the docs' checks)."""
    parser = build_parser()
    assert parser.commands is not None
    for placeholder in list(parser.commands.choices.values()):
        assert isinstance(placeholder, CommandParser)
        placeholder.loaded()
    return parser


def _module(name: str) -> ModuleType:
    from jobtpu.commands.table import module_name

    return importlib.import_module(module_name(name))


def command_word(words: Sequence[str]) -> str | None:
    """The command a command line names: its first word that is not a top-level option (nor --home's
    value); None when there is none before an option only the full parser knows."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--home":
            i += 2
            continue
        if word.startswith("--home="):
            i += 1
            continue
        return None if word.startswith("-") else word
    return None


def parse_command_line(typed: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """A command line's values, and its words with the old tool's shapes as jobtpu's (what `main`
    and a member's act both parse); a mistake is one usage line on stderr and SystemExit(2)."""
    parser = build_parser(command_word(typed))
    words = parser.old_shapes(list(typed))
    return parser.parse_args(words), words

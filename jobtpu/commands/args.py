"""What every command's `add_parser` shares: how a command joins the command line, the parser that
keeps its own record of its arguments and subcommands (argparse keeps them private), and the argument
types whose bad values are one usage line (exit 2) saying what to type instead."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that keeps its own record of what is added to it, as it is added: its
    arguments in order (`arguments`, a mutually exclusive group's among them) and its subcommands
    (`commands`), which argparse keeps only in private attributes. An argument with `choices` gets a
    `type` (Choice) that names the nearest choice of a mistyped word."""

    def __init__(self, *names: Any, **options: Any) -> None:
        self.arguments: list[argparse.Action] = []  # before argparse's own __init__ adds --help
        self.commands: Subparsers | None = None
        super().__init__(*names, **options)

    def add_argument(self, *names: str, **options: Any) -> argparse.Action:
        return self._kept(super().add_argument(*names, **with_choice_type(options)))

    def add_subparsers(self, **options: Any) -> Any:
        self.commands = super().add_subparsers(**options)
        return self.commands

    def add_mutually_exclusive_group(self, **options: Any) -> Any:
        return self._recording(super().add_mutually_exclusive_group(**options))

    def add_argument_group(self, *names: Any, **options: Any) -> Any:
        return self._recording(super().add_argument_group(*names, **options))

    def _recording(self, group: Any) -> Any:
        """A group whose arguments are recorded as this parser's (a group adds them past add_argument)."""
        add = group.add_argument

        def add_argument(*names: str, **given: Any) -> argparse.Action:
            return self._kept(add(*names, **with_choice_type(given)))

        group.add_argument = add_argument
        return group

    def _kept(self, action: argparse.Action) -> argparse.Action:
        self.arguments.append(action)
        return action

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every argument added (to check its metavar), and a formatter
        # given no width imports shutil to ask the terminal's: 2 ms of every command, for help only.
        return self.formatter_class(prog=self.prog, width=help_width())  # type: ignore[call-arg]

    def loaded(self) -> Parser:
        """This parser, with its arguments: a command's placeholder (commands/parsing.py's Deferred)
        loads its command's module first."""
        return self

    def option(self, name: str) -> argparse.Action | None:
        """The argument an option string (`--machine`, `-p`) names, if this parser takes it."""
        return next((a for a in self.arguments if name in a.option_strings), None)


def help_width() -> int:
    """The width argparse's help takes by shutil.get_terminal_size's rule ($COLUMNS, else the terminal
    on stdout, else 80 columns), less its margin of 2."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


class Choice:
    """The `type` of an argument with choices: a word that is none of them is one usage line, with the
    nearest choice when one is close (`invalid choice: 'ls': did you mean 'rm'? (choose from ...)`)."""

    def __init__(self, choices: Collection[Any], convert: Callable[[str], Any] | None = None) -> None:
        self.choices, self.convert = choices, convert
        self.__name__ = getattr(convert, "__name__", "choice")  # what argparse names a type that raised ValueError

    def __call__(self, text: str) -> Any:
        value = self.convert(text) if self.convert is not None else text
        refusal = self.refusal(value)
        if refusal is not None:
            raise argparse.ArgumentTypeError(refusal)
        return value

    def refusal(self, value: Any) -> str | None:
        """Why `value` is none of the choices, in argparse's words; None when it is one."""
        if value in self.choices:
            return None
        from jobtpu.suggest import nearest

        close = nearest(str(value), map(str, self.choices))
        listed = ", ".join(map(repr, self.choices))
        if close is None:
            return f"invalid choice: {value!r} (choose from {listed})"
        return f"invalid choice: {value!r}: did you mean {close!r}? (choose from {listed})"


def with_choice_type(options: dict[str, Any]) -> dict[str, Any]:
    """add_argument's options, an argument with choices given a Choice type (over its own type)."""
    if options.get("choices") is None:
        return options
    return {**options, "type": Choice(options["choices"], options.get("type"))}


def add_command(subparsers: Subparsers, name: str) -> argparse.ArgumentParser:
    """A command's parser, for a word of the command table (commands/table.py): the table's summary is
    its line in `jobtpu --help` and the top of its own --help."""
    from jobtpu.commands.table import ROWS

    summary = ROWS[name].summary
    return subparsers.add_parser(name, help=summary, description=summary)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0, like 60")
    return value


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 or more")
    return value


def tries(text: str) -> int:
    """--max-recoveries, --retries: a count up to the ceiling state.json holds (schema/names.py)."""
    from jobtpu.schema.names import MAX_TRIES

    value = count(text)
    if value > MAX_TRIES:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 to {MAX_TRIES}")
    return value


def priority(text: str) -> int:
    from jobtpu.schema.names import MAX_PRIORITY

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if abs(value) > MAX_PRIORITY:
        raise argparse.ArgumentTypeError(f"{text!r}: give -{MAX_PRIORITY} to {MAX_PRIORITY}")
    return value


def since(text: str) -> float:
    from jobtpu.decide.events import since_arg  # here: `--help` loads no more than it needs

    return since_arg(text)


def job_id(text: str) -> int:
    if "=" in text:  # `rerun 12 lr=0.1`: overrides are the job's own, as it was submitted
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id: a job keeps the overrides it was submitted "
                                         "with; submit it again to change them")
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (a positive number)")
    return int(text)

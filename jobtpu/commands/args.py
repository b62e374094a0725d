"""What every command's `add_parser` shares: how a command joins the command line, and the argument
types whose bad values are one usage line (exit 2) saying what to type instead."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_command(subparsers: Subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    """A command's parser: its line in `jobtpu --help` is also the top of its own --help."""
    return subparsers.add_parser(name, help=help_text, description=help_text)


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
    from jobtpu.tell.events import since_arg  # here: `--help` loads no more than it needs

    return since_arg(text)


def job_id(text: str) -> int:
    if "=" in text:  # `rerun 12 lr=0.1`: overrides are the job's own, as it was submitted
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id: a job keeps the overrides it was submitted "
                                         "with; submit it again to change them")
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (a positive number)")
    return int(text)

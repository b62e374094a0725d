"""A member's act as one typed request (docs/reference/home-files.md §1.3): parsed once, by the
command line's own parser, on the member's side; its values (the command's struct of schema/acts.py)
travel; the runner turns them back into the Namespace the command's function reads. The runner never
parses words, so both sides cannot mean different things by the same words."""

import argparse
import contextlib
import io
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from jobtpu.errors import JobtpuError, UsageError
from jobtpu.schema.acts import ActArgs
from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.home.layout import Home
    from jobtpu.schema.spool import ActRequest

VERSION: Literal[2] = 2
# The options of the fields whose option is not `--` and the field's name with dashes.
OPTION_OF = {"tags": "--tag", "names": "--name", "statuses": "--status", "sweeps": "--sweep", "priority_class": "--class"}
POSITIONAL = ("ids", "words")


class Act(NamedTuple):
    command: str
    args: ActArgs


def act_of(command: str, parsed: argparse.Namespace) -> Act:
    """The act a parse of the command line made: the values its command's function reads, within
    the struct's bounds (a UsageError, one line, when one is past them: nothing is sent)."""
    from jobtpu.schema.acts import ARGS

    kind = ARGS[command]
    values = {name: getattr(parsed, name) for name in kind.__struct_fields__}
    try:
        return Act(command, msgspec.convert(values, kind))
    except msgspec.ValidationError as e:
        raise UsageError(f"{command}: a value is out of bounds ({e})",
                         hint=f"see `jobtpu {command} --help`") from None


def parse_act(words: Sequence[str]) -> Act:
    """An act's words (the command first) through the command line's one parser; a mistake is a
    UsageError with the parser's own line and hint."""
    from jobtpu.commands.parsing import parse_command_line
    from jobtpu.schema.acts import ARGS

    if not words or words[0] not in ARGS:
        raise UsageError(f"{words[0] if words else 'nothing'!r} is not an act a member may request")
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            parsed, _ = parse_command_line(words)
    except SystemExit:
        lines = [line for line in said.getvalue().splitlines() if line.strip()]
        message = next((line.removeprefix("jobtpu: error: ") for line in lines if line.startswith("jobtpu: error: ")),
                       lines[0] if lines else f"the words of `{words[0]}` are not its command line")
        hint = next((line.removeprefix("hint: ") for line in lines if line.startswith("hint: ")), None)
        raise UsageError(message, hint=hint) from None
    act = act_of(words[0], parsed)
    _values(act)  # what could not travel as a request is refused here too, in the same line
    return act


def encode(act: Act, user: str, limit: int, reply_key: bytes = b"") -> bytes:
    """The request file's content; a UsageError when it cannot be one (past `limit` bytes, or text
    that is not Unicode, like a word of bytes the terminal did not decode)."""
    from jobtpu.schema.spool import ActRequest

    try:
        data = msgspec.json.encode(ActRequest(v=VERSION, command=act.command, args=msgspec.Raw(_values(act)),
                                              user=user, at=round(time.time(), 3), reply_key=reply_key))
    except (msgspec.EncodeError, UnicodeEncodeError):  # the user's name, or the key
        raise UsageError(f"{act.command}: a value is not text (bytes the terminal did not decode?)",
                         hint="type it again in UTF-8") from None
    if len(data) > limit:
        raise UsageError(f"{act.command}: the request is {len(data)} bytes, more than the {limit} a request may be",
                         hint="name fewer jobs or shorter values, or act in two requests")
    return data


def _values(act: Act) -> bytes:
    """The act's values as JSON; a UsageError for one that is no text (a lone surrogate: bytes the
    terminal did not decode), whichever side reads the words."""
    try:
        return msgspec.json.encode(act.args)
    except (msgspec.EncodeError, UnicodeEncodeError):
        raise UsageError(f"{act.command}: a value is not text (bytes the terminal did not decode?)",
                         hint="type it again in UTF-8") from None


def decode(request: "ActRequest") -> Act:
    """A request's values as its command's struct; a JobtpuError (one line) for anything else."""
    from jobtpu.schema.acts import ARGS

    if request.command not in ARGS:
        raise JobtpuError(f"{request.command[:40]!r} is not an act a member may request")
    try:
        return Act(request.command, msgspec.json.decode(request.args, type=ARGS[request.command]))
    except msgspec.DecodeError as e:
        raise JobtpuError(f"the values of this `{request.command}` are not ones jobtpu sends: {str(e)[:200]}") from None


def namespace(act: Act) -> argparse.Namespace:
    """The Namespace the command's function reads, as the command line's parse gives it."""
    values: dict[str, Any] = msgspec.to_builtins(act.args)
    return argparse.Namespace(command=act.command, **values)


def function_of(command: str) -> Callable[["Home", argparse.Namespace], Any]:
    """The function the command line's parser calls for `command` (its module's `func`)."""
    from jobtpu.commands.parsing import build_parser

    commands = build_parser(command).commands
    assert commands is not None  # the top-level parser always has its commands
    func: Callable[[Home, argparse.Namespace], Any] = commands.choices[command].get_default("func")
    return func


def in_words(act: Act) -> str:
    """Pure: the act as a command line a person reads (`kill --name sweep-* 5`), for replies and
    listings; never parsed."""
    words = [act.command]
    tail: list[str] = []
    for name in act.args.__struct_fields__:
        value = getattr(act.args, name)
        if name in POSITIONAL:
            tail += [str(v) for v in value]
            continue
        option = OPTION_OF.get(name, "--" + name.replace("_", "-"))
        if value is True:
            words.append(option)
        elif isinstance(value, list):
            words += [_given(option, v) for v in value]
        elif value is not None and value is not False:
            words.append(_given(option, value))
    return " ".join(words + tail)


def _given(option: str, value: object) -> str:
    """`--sweep 12`, as people type it; `--name=--` where a value could be read as an option or nothing."""
    text = str(value)
    return f"{option}={text}" if not text or text.startswith("-") or " " in text else f"{option} {text}"

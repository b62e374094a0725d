"""Every jobtpu file read as its msgspec type, and the one translator of what msgspec refuses into one
line naming the key or the path of the bad value (docs/reference/machines-json.md §3,
docs/reference/state-json.md §4).

A file people write (machines.json, settings, users.json, secrets.json) is told in its keys: the
description its type gives the key (`Meta(description=...)`, which ends the sentence "'key' ..."), or
the whole file's description, with the value found there. A file jobtpu writes (state.json) is
told in JSON paths and msgspec's words, with the job's id or the machine's name first: that is what a
person repairing it by hand searches for. A syntax error is told by parse_json_file, with its line
and column."""

import itertools
import re
import reprlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, get_args, get_origin, get_type_hints

from jobtpu.errors import ConfigError
from jobtpu.schema.msgspec_lib import Meta, Raw, Struct, msgspec


class FileRefused(Exception):
    """One line saying what is wrong in a file; the loader names the file and says what to do."""


# ---- the translator ------------------------------------------------------------------------------

_ERROR = re.compile(r"(?P<problem>.*?)(?: - at `\$(?P<at>.*)`)?", re.S)
_STEP = re.compile(r"\.([^.\[]+)|(\[[^\]]*\])")  # .name or [3] or [...] (a dict's value)
# The file as plain values, for the "(got ...)" of a message: 1e400 too, as inf (msgspec refuses it by default).
_ANY_VALUE = msgspec.json.Decoder(float_hook=float)
_UNSEEN = object()
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
# Labels a path of a file told in paths: `job 7: ` for the job at $.jobs[3].
Labeler = Callable[[str, Any], tuple[str, str]]


def decode(data: bytes | Raw, kind: Any, *, owner: str | None = None, paths: Labeler | None = None) -> Any:
    """`data` as `kind`, or FileRefused saying what is wrong where. `owner` is "machine 'x'" for one
    machine's entry of machines.json, None for a whole file. `paths`: the file is told in JSON paths,
    and this labels each (a file people write passes None: told in keys). Text that is not JSON raises
    msgspec.DecodeError (the caller says it with line and column)."""
    try:
        try:
            return msgspec.json.decode(data, type=kind)
        except msgspec.ValidationError as e:
            problem = str(e)
        # msgspec stops at the first wrong type, unread text after it may not be JSON at all: that is
        # said first (this read raises), as a user would fix it first.
        raw = _ANY_VALUE.decode(data)
    except RecursionError:
        raise FileRefused("nested too deeply to be a jobtpu file") from None
    raise FileRefused(explain(problem, kind, raw, owner=owner, paths=paths))


def decode_sent(data: bytes | Raw, kind: Any) -> Any:
    """What another account wrote (a request in a shared home's spool) as `kind`: msgspec.DecodeError
    for anything that is not one, nesting past the interpreter's stack included (msgspec raises
    RecursionError there, which no caller of a decode expects)."""
    try:
        return msgspec.json.decode(data, type=kind)
    except RecursionError:
        raise msgspec.DecodeError("nested too deeply to be a jobtpu file") from None


def plain_values(data: bytes | Raw) -> Any:
    """A file's JSON as plain values, whatever its type (a huge number read as inf)."""
    return _ANY_VALUE.decode(data)


def explain(error: str, kind: Any, raw: Any, *, owner: str | None = None, paths: Labeler | None = None) -> str:
    """One line from msgspec's error (`Expected `int`, got `str` - at `$.port``)."""
    if paths is not None:
        return _in_paths(error, kind, raw, paths)
    return _in_keys(error, kind, raw, owner)


def _in_keys(error: str, kind: Any, raw: Any, owner: str | None) -> str:
    """The key, what its type's description says it must be, and the value that was there."""
    match = _ERROR.fullmatch(error)
    problem, steps = (match["problem"], [name or index for name, index in _STEP.findall(match["at"] or "")]) \
        if match else (error, [])
    if unknown := re.fullmatch(r"Object contains unknown field `(.*)`", problem):
        return _unknown_key(kind, steps, unknown[1], owner)
    missing = re.fullmatch(r"Object missing required field `(.*)`", problem)
    if missing:
        steps = [*steps, missing[1]]
    # A list item's or a map value's fault is told as its container's: `'tags' must be a list of ...`.
    names = list(itertools.takewhile(lambda step: not step.startswith("["), steps))
    if not names:
        return description_of(kind) or f"{owner or 'the top level'} must be an object"
    prefix = f"{owner}: " if owner else ""
    value = _value_at(raw, names)
    key = ".".join(names)
    description = description_of(type_at(kind, names))
    if description is None:
        whole = description_of(kind)  # only the whole file's type says what it must be
        return f"{prefix}{whole}" if whole else f"{prefix}'{key}' is not valid ({problem.replace('`', chr(39))})"
    if missing and names == steps:
        return f"{prefix}'{key}' is missing: it {description}"
    return f"{prefix}'{key}' {description}" + ("" if value is _UNSEEN else f" (got {_SHORT.repr(value)})")


def _unknown_key(kind: Any, steps: list[str], key: str, owner: str | None) -> str:
    """`unknown key 'prot' in machine 'm' (valid: ...)`; in the file's own sections, `... in gcp`."""
    where = owner or (steps[0] if steps else "the top level")
    inside = steps if owner else steps[1:]
    path = "".join(step if step.startswith("[") else f".{step}" for step in [*inside, key]).lstrip(".")
    struct = _struct_in(type_at(kind, [step for step in steps if not step.startswith("[")]))
    valid = f" (valid: {', '.join(keys_of(struct))})" if struct else ""
    return f"unknown key {path!r} in {where}{valid}"


def must(kind: Any, *names: str) -> str:
    """What the schema says the key must be: "'zone' must be a zone, or ..."."""
    return f"'{'.'.join(names)}' {description_of(type_at(kind, list(names)))}"


def _value_at(raw: Any, names: list[str]) -> Any:
    for name in names:
        raw = raw.get(name, _UNSEEN) if isinstance(raw, dict) else _UNSEEN
    return raw


def type_at(kind: Any, names: list[str]) -> Any:
    """The declared type (with its Annotated description) of the key at `names`; None past the schema."""
    declared = kind
    for name in names:
        struct = _struct_in(declared)
        if struct is None or name not in struct.__struct_fields__:
            return None
        declared = _hints(struct)[name]
    return declared


def _struct_in(declared: Any) -> type[Struct] | None:
    """The Struct a declared type holds, looking through Annotated, unions and list items."""
    if isinstance(declared, type) and issubclass(declared, Struct):
        return declared
    for arg in get_args(declared):
        found = _struct_in(arg)
        if found is not None:
            return found
    return None


def description_of(declared: Any) -> str | None:
    if get_origin(declared) is Annotated:
        for meta in declared.__metadata__:
            if isinstance(meta, Meta) and meta.description:
                return meta.description
    return None


def keys_of(struct: type[Struct]) -> tuple[str, ...]:
    """A Struct's keys in the order its classes declare them, from its first class with keys down to
    itself, and the keys of that first class (the connection keys `defaults` shares) last: a
    machine's `kind` comes first."""
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for cls in reversed(struct.__mro__):
        fields = cls.__struct_fields__ if issubclass(cls, Struct) and cls is not Struct else ()
        own = tuple(k for k in fields if k not in seen)
        seen.update(own)
        if own:
            groups.append(own)
    ordered = [*groups[1:], *groups[:1]]
    return tuple(itertools.chain.from_iterable(ordered))


@cache
def _hints(struct: type[Struct]) -> dict[str, Any]:
    return get_type_hints(struct, include_extras=True)


# ---- a file told in JSON paths -------------------------------------------------------------------

def _in_paths(message: str, kind: Any, data: Any, label: Labeler) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.jobs[3].n`" as "job 7: $.jobs[3].n: expected int,
    got str": the label first (the path alone would make a reader count), the valid words of an
    enum, the valid keys of an object that has an unknown one."""
    what, _, path = message.partition(" - at ")
    path = path.strip("`") or "$"
    what = what.replace("`", "")
    prefix, path = label(path, data)
    if what.startswith("Invalid enum value"):
        words = _enum_words(type_at(kind, _names_of(path)))
        what += f" (valid: {', '.join(words)})" if words else ""
    elif what.startswith("Object contains unknown field"):
        struct = _struct_in(type_at(kind, _names_of(path)))
        if struct is not None:
            what += f" (valid: {', '.join(sorted(struct.__struct_fields__))})"
    if what[1:2].islower():  # "Expected int" reads on after a colon as "expected int"
        what = what[:1].lower() + what[1:]
    return f"{prefix}{path}: {what}"


def _names_of(path: str) -> list[str]:
    """The keys along a JSON path, through list items and map values: $.jobs[3].ending.status →
    jobs, ending, status; $.machines['m'].setup → machines, setup."""
    return [name for name, _ in _STEP.findall(re.sub(r"\[[^\]]*\]", "[]", path[1:]))
            if name] if path != "$" else []


def _enum_words(declared: Any) -> tuple[str, ...]:
    """The words an enum or Literal at a path may be, looking through unions, lists and Annotated."""
    if isinstance(declared, type) and issubclass(declared, str) and hasattr(declared, "__members__"):
        return tuple(member.value for member in declared.__members__.values())
    if get_origin(declared) is Literal:
        return tuple(str(word) for word in get_args(declared))
    for arg in get_args(declared):
        found = _enum_words(arg)
        if found:
            return found
    return ()


# ---- syntax --------------------------------------------------------------------------------------

def parse_json_file(path: Path, text: str | bytes) -> Any:
    """Parse JSON (any file a typed decode refused, to say why); a syntax error is reported as
    `file:line:col: message`, in the standard library's words."""
    import orjson  # here, not at the top: `--help` never parses anything

    hint = f"fix {path} by hand; jobtpu has not changed it" + (
        f" (its last good copy is {path.name}.bak)" if path.name == "state.json" else "")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    import json  # only for a file orjson refused

    # orjson refused it: the standard library names the line and column of a syntax error, and the
    # hooks refuse what orjson could not write back (NaN, Infinity, integers beyond 64 bits).
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path.name}:{e.lineno}:{e.colno}: {e.msg}", hint=hint) from None
    except _BadNumber as e:
        raise ConfigError(f"{path.name}: {e}", hint=hint) from None
    except RecursionError:  # orjson stops at 1024 levels; the standard library at the stack's end
        raise ConfigError(f"{path.name}: nested too deeply to be a jobtpu file", hint=hint) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path.name}: not valid JSON text ({str(e)[:80]})", hint=hint) from None


class _BadNumber(Exception):
    pass


def _refuse_constant(word: str) -> Any:
    raise _BadNumber(f"{word} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 19 or not -2**63 <= int(text) < 2**64:
        raise _BadNumber(f"the number {text[:30]}{'…' if len(text) > 30 else ''} is too large")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _BadNumber(f"the number {text[:30]} is too large")
    return value


def read_file(data: bytes, kind: Any, path: Path, where: str, hint: str) -> Any:
    """A file people write, as its type: every loader of one asks here. Anything wrong is one
    ConfigError `<where>: <what is wrong>` with `hint`; a syntax error is told with its line and
    column."""
    try:
        try:
            return decode(data, kind)
        except msgspec.DecodeError as e:
            refuse_syntax(path, data, e)
    except FileRefused as e:
        raise ConfigError(f"{where}: {e}", hint) from None


def refuse_syntax(path: Path, data: bytes, error: msgspec.DecodeError) -> NoReturn:
    """What is wrong in the standard library's words, with line and column (parse_json_file raises
    its ConfigError); FileRefused when it is not even UTF-8 text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileRefused(f"not UTF-8 text (byte {e.start} cannot be decoded)") from None
    parse_json_file(path, text)  # raises
    raise FileRefused(f"not valid JSON text ({error})")

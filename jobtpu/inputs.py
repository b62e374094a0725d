"""Checks and conversions of what a user types: user names, durations, --env, config overrides. Pure."""

from __future__ import annotations

import re
from collections.abc import Collection

from jobtpu.errors import JobtpuError, UsageError
from jobtpu.schema.names import MAX_SECONDS

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, option: str) -> float:
    """'90', '90s', '30m', '12h', '2d' → seconds."""
    match = _DURATION.match(text.strip())
    if not match or float(match[1]) <= 0:
        raise JobtpuError(f"{option} {text!r} is not a duration", hint="use a number with s, m, h or d, like 30m")
    seconds = float(match[1]) * _UNITS[match[2]]
    if seconds > MAX_SECONDS:  # state.json holds no longer time (schema/names.py)
        raise JobtpuError(f"{option} {text!r} is longer than {MAX_SECONDS // 86400} days, the most jobtpu keeps",
                          hint="give a shorter duration, like 30d")
    return seconds


def parse_stall(text: str) -> float:
    """--stall: a duration, or 0 (`0`, `0s`, `0m` …): no stall watch, even where one is the default."""
    match = _DURATION.match(text.strip())
    if match and float(match[1]) == 0:
        return 0.0
    return parse_duration(text, "--stall")


def parse_exit_codes(text: str, retries: int) -> str:
    """--retry-on-exit: the list as the record keeps it (schema/exit_codes.py), refused in one line
    when it does not parse or when there is no --retries for it to choose among."""
    from jobtpu.schema import exit_codes

    try:
        codes = exit_codes.normal(text)
    except ValueError as e:
        raise JobtpuError(str(e), hint="like --retries 3 --retry-on-exit 42,127-255") from None
    if not retries:
        raise JobtpuError(f"--retry-on-exit {text!r} chooses which exits --retries retries, and there is no --retries",
                          hint=f"give --retries N too, like --retries 3 --retry-on-exit {codes}")
    return codes


def parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise JobtpuError(f"--env {pair!r} is not NAME=VALUE with a valid variable name")
        if name.startswith("JOBTPU_"):
            raise JobtpuError(f"--env {name}: JOBTPU_* variables are set by jobtpu itself")
        env[name] = value
    return env


def override_parts(word: str) -> tuple[str, str]:
    """A KEY=VALUE word → (KEY without leading dashes, VALUE); settings.config_overrides names KEY in full."""
    key, sep, value = word.partition("=")
    key = key.lstrip("-")
    if not sep or not _KEY.match(key):
        raise JobtpuError(f"{word!r} is not a KEY=VALUE config override",
                          hint="put options before the overrides; overrides look like lr=0.01")
    return key, value


# Words the tool teams used before jobtpu read among a run's arguments as its own (`tpu run v2-32 ann
# tag=x rule=resume dir=2`): here they would reach the program as --tag=x without a word said.
_OLD_TOOL_WORDS = {
    "tag": "use --tag {value}",
    "rule": "use --rule {value}",
    "dir": "use --dir {value}",
    "ssn": "the machine's note in the team sheet is --sheet-note {value}",
    "w": "jobs have ids, not windows (`jobtpu status` lists them; kill, tail and the rest take the id)",
}


def override_mistake(word: str, aliases: Collection[str] = ()) -> str | None:
    """What is wrong with an override word the user most likely meant as something else (one of the
    old tool's own words, unless an alias in force makes it a config key, or an empty value), as one
    line saying what to type; None when it is fine."""
    import shlex

    key, sep, value = word.partition("=")
    key = key.lstrip("-")
    if not sep:
        return None  # not KEY=VALUE at all: override_parts says so
    if key in _OLD_TOOL_WORDS and key not in aliases:
        shown = shlex.quote(value) if value else key.upper()
        return f"{word} is not a config override here: " + _OLD_TOOL_WORDS[key].format(value=shown)
    if value == "":
        return f"{word} has no value: give it one, or put it after `--` (-- {word}) to pass it empty"
    return None


def check_overrides_typed(words: list[str], aliases: Collection[str]) -> None:
    """Refuse the first mistaken override (override_mistake); the words after `--` are not passed
    here: there an override reaches the program as it is."""
    for word in words:
        mistake = override_mistake(word, aliases)
        if mistake:
            raise UsageError(mistake)

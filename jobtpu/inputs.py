"""Checks and conversions of what a user types: user names, durations, --env, config overrides. Pure."""

from __future__ import annotations

import os
import re

from .errors import JobtpuError
from .model import USER_NAME

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def resolve_user(explicit: str | None) -> str:
    user = explicit or os.environ.get("JOBTPU_USER") or _login_name()
    if not USER_NAME.match(user):
        raise JobtpuError(f"user name {user!r} is not valid: use 1–32 of a-z, 0-9, '_' or '-', starting "
                          "with a letter or '_'", hint="pass --user NAME or set JOBTPU_USER")
    return user


def _login_name() -> str:
    import getpass  # here, not at the top: `jobtpu status` starts on every watch tick

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def parse_duration(text: str, option: str) -> float:
    """'90', '90s', '30m', '12h', '2d' → seconds."""
    match = _DURATION.match(text.strip())
    if not match or float(match[1]) <= 0:
        raise JobtpuError(f"{option} {text!r} is not a duration", hint="use a number with s, m, h or d, like 30m")
    return float(match[1]) * _UNITS[match[2]]


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

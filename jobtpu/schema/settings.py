"""A user's settings file (`users/<name>/settings.json`, docs/reference/commands.md §2.16) as its
msgspec type; home/settings.py reads, checks and writes it."""

from __future__ import annotations

from typing import Any

import msgspec


class UserSettings(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    rule: str | None = None
    req: list[str] = []
    columns: list[str] = []
    time_zone: str | None = None
    dirs: dict[str, str] = {}  # "N" → an absolute folder
    aliases: dict[str, str] = {}  # short name → full config key
    notify: list[Any] = []  # the user's own webhook destinations (notify.parse_destinations checks them)

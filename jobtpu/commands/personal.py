"""A user's own settings: `config` (defaults for submit and status), `dir` (numbered working
directories) and `alias` (config aliases, over the team's and the built-in ones)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.errors import JobtpuError, NotFoundError
from jobtpu.home.actor import resolve_user
from jobtpu.home.layout import Home
from jobtpu.home.settings import (
    CONFIG_KEYS,
    UserSettings,
    alias_levels,
    check_columns,
    check_req,
    check_rule,
    dir_number,
    load_settings,
    sheet_name_refusal,
    update_settings,
    zone_of,
)
from jobtpu.render.text import printable

# ---- config ---------------------------------------------------------------------------------------


def _config_value(key: str, values: list[str]) -> object:
    """The value to store for `key` from the words typed after it, checked."""
    if not any(value.strip(" ,") for value in values):  # `config reset KEY` is how a value goes
        raise JobtpuError(f"`config set {key}` needs a value", hint=f"{key}: {CONFIG_KEYS[key][0]}")
    if key == "notify":
        return _notify_value(values)
    if key == "sheet_name":  # a name may hold spaces: the words are joined as typed
        name = " ".join(values)
        why = sheet_name_refusal(name)
        if why is not None:
            raise JobtpuError(f"sheet_name {name[:40]!r}: {why}", hint="`jobtpu config set sheet_name Lyy`")
        return name
    if key in ("rule", "time_zone"):
        if len(values) != 1:
            raise JobtpuError(f"{key} takes one value, got {len(values)}: {' '.join(values)}")
        if key == "rule":
            check_rule(values[0])
        else:
            zone_of(values[0])
        return values[0]
    words = [w for value in values for w in (value.split(",") if key == "columns" else [value]) if w]
    (check_columns if key == "columns" else check_req)(words)
    return words


def _notify_value(values: list[str]) -> list[Any]:
    """`config set notify JSON`: the list, checked as a pass will read it."""
    import json

    from jobtpu.decide.destinations import parse_destinations

    try:
        doc = json.loads(" ".join(values))
    except ValueError as e:
        raise JobtpuError(f"notify: not JSON ({e})", hint=f"quote it for the shell: {CONFIG_KEYS['notify'][0]}") from None
    parse_destinations(doc, "notify", owner="")
    return list(doc)


def _check_private_webhooks(home: Home, doc: Any) -> None:
    """Each webhook checked as a pass checks it when it sends (docs/design.md §7): one at a private
    address is refused, unless the home's runner.json (trusted as its owner's) allows private
    webhooks: then it is kept with a warning, and the pass, run by that owner, decides at send time."""
    from jobtpu.tell.webhooks import check

    allowed_by: str | None = None
    for i, entry in enumerate(doc):
        checked = check(entry["webhook"])
        if checked.why is None:
            continue
        where = f"notify[{i}].webhook"
        if not checked.private:
            raise JobtpuError(f"{where}: {checked.why}", hint="check the URL's host: a pass could not post there either")
        allowed_by = allowed_by or _runner_allowing_private(home)
        if allowed_by is None:
            raise JobtpuError(f"{where}: {checked.why}: the pass would post there from its own host",
                              hint="name a public address, or ask the account that runs the passes to allow it: "
                                   '"allow_private_webhooks": true in its runner.json')
        note(f"warning: {where}: {checked.why}: kept, as runner.json allows private webhooks; "
             f"passes run by {allowed_by} post it, others skip it")


def _runner_allowing_private(home: Home) -> str | None:
    """The account whose runner.json allows private webhooks, when that file is trusted as its
    owner's (no link, nobody else can write it): the account whose passes honour it."""
    from jobtpu.home.trust import RUNNER_FILE, account_name, load_runner

    try:
        owner = os.stat(home.root / RUNNER_FILE, follow_symlinks=False).st_uid
    except OSError:
        return None
    return account_name(owner) if load_runner(home.root, owner).allow_private_webhooks else None


def _shown(key: str, settings: UserSettings) -> str | None:
    value = getattr(settings, key)
    if value in (None, []):
        return None
    if key == "notify":
        import json

        return json.dumps(value)
    return ",".join(value) if key == "columns" else " ".join(value) if isinstance(value, list) else str(value)


def config(home: Home, action: str, key: str | None, values: list[str], user: str | None) -> int:
    who = resolve_user(user)
    if key is not None and key not in CONFIG_KEYS:
        raise JobtpuError(f"unknown setting {key!r}", hint=f"settings: {', '.join(CONFIG_KEYS)}")
    if action == "get":
        return _config_get(home, who, key)
    if action == "set":
        if key is None:
            raise JobtpuError("`config set` needs a KEY and a VALUE", hint=f"settings: {', '.join(CONFIG_KEYS)}")
        value = _config_value(key, values)
        if key == "notify":
            _check_private_webhooks(home, value)
        update_settings(home, who, lambda s: setattr(s, key, value))
        note(f"{key} = {_shown(key, load_settings(home, who))}")
        return 0
    if values:
        raise JobtpuError("`config reset` takes at most a KEY", hint="`jobtpu config reset rule`, or all: `jobtpu config reset`")
    keys = [key] if key is not None else list(CONFIG_KEYS)
    defaults = UserSettings()

    def reset(settings: UserSettings) -> None:
        for k in keys:
            setattr(settings, k, getattr(defaults, k))

    update_settings(home, who, reset)
    note(f"reset {', '.join(keys)} to the default" + ("" if key else " (working directories and aliases are kept)"))
    return 0


def _config_get(home: Home, user: str, key: str | None) -> int:
    settings = load_settings(home, user)
    if key is not None:
        shown = _shown(key, settings)
        if shown is None:
            note(f"{key} is not set (so: {CONFIG_KEYS[key][1]}); it is {CONFIG_KEYS[key][0]}")
        else:
            print(printable(shown))
        return 0
    for name, (_, default) in CONFIG_KEYS.items():
        shown = _shown(name, settings)
        print(printable(f"{name} = {shown}" if shown is not None else f"{name} = (not set: {default})"))
    return 0


# ---- dir ------------------------------------------------------------------------------------------


def dir_command(home: Home, action: str, numbers: list[str], path: str | None, user: str | None) -> int:
    who = resolve_user(user)
    if action == "ls":
        return _dir_ls(home, who)
    checked = [dir_number(n) for n in numbers]
    if action == "set":
        folder = Path(path).expanduser() if path else Path.cwd()
        if not folder.is_dir():
            raise JobtpuError(f"{folder} is not a folder", hint="give an existing folder, or run `dir set N` inside it")
        resolved = str(folder.resolve())
        update_settings(home, who, lambda s: s.dirs.__setitem__(checked[0], resolved))
        note(f"working directory {checked[0]} = {resolved}")
    elif action == "rm":
        def remove(s: UserSettings) -> None:
            if s.dirs.pop(checked[0], None) is None:
                raise _unset(checked[0])
        update_settings(home, who, remove)
    else:  # swap
        def swap(s: UserSettings) -> None:
            a, b = checked
            if a not in s.dirs and b not in s.dirs:
                raise _unset(a)
            first, second = s.dirs.pop(a, None), s.dirs.pop(b, None)
            s.dirs.update({k: v for k, v in ((a, second), (b, first)) if v is not None})
        update_settings(home, who, swap)
    return _dir_ls(home, who) if action == "swap" else 0


def _unset(number: str) -> NotFoundError:
    return NotFoundError(f"working directory {number} is not set", hint="`jobtpu dir ls` lists yours")


def _dir_ls(home: Home, user: str) -> int:
    dirs = load_settings(home, user).dirs
    if not dirs:
        note("no working directories yet: `jobtpu dir set 1` makes the current folder number 1")
    for number in sorted(dirs, key=int):
        folder = dirs[number]
        gone = "" if os.path.isdir(folder) else "  (missing)"
        print(printable(f"{number}  {folder}{gone}"))
    return 0


# ---- alias ----------------------------------------------------------------------------------------


def alias(home: Home, action: str, name: str | None, full: str | None, user: str | None) -> int:
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.settings import check_alias

    who = resolve_user(user)
    if action == "ls":
        levels = alias_levels(load_fleet(home).config_aliases, load_settings(home, who).aliases)
        width = max(map(len, levels), default=0)
        key_width = max((len(found[-1][1]) for found in levels.values()), default=0)
        for alias_name in sorted(levels):
            source, key = levels[alias_name][-1]
            over = [s for s, _ in levels[alias_name][:-1]]
            where = source + (f" (over {' and '.join(over)})" if over else "")
            print(printable(f"{alias_name:<{width}}  {key:<{key_width}}  {where}"))
        return 0
    assert name is not None
    if action == "add":
        assert full is not None
        check_alias(name, full)
        update_settings(home, who, lambda s: s.aliases.__setitem__(name, full))
        note(f"{name} = {full} (yours)")
        return 0

    def remove(s: UserSettings) -> None:
        if s.aliases.pop(name, None) is None:
            levels = alias_levels(load_fleet(home).config_aliases, {})
            if name in levels:
                source = levels[name][-1][0]
                where = "machines.json's config_aliases" if source == "team" else "jobtpu"
                raise JobtpuError(f"{name} is a {source} alias, not one of yours", hint=f"it is set by {where}; "
                                  f"`jobtpu alias add {name} KEY` overrides it for you")
            raise NotFoundError(f"no alias {name!r}", hint="`jobtpu alias ls` lists them")
    update_settings(home, who, remove)
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    """config, dir, alias: a user's own settings."""
    as_user = "act on this user's settings (default: $JOBTPU_USER, else your login)"
    p = args.add_command(subparsers, "config")
    p.add_argument("action", choices=("get", "set", "reset"), help="show, set or reset (to the default) a setting")
    p.add_argument("key", nargs="?", metavar="KEY", help="rule, req, columns, time_zone, sheet_name or notify "
                   "(get/reset: all when absent)")
    p.add_argument("values", nargs="*", metavar="VALUE", help="the value (req and columns take several)")
    p.add_argument("--user", help=as_user)
    p.set_defaults(func=lambda home, a: config(home, a.action, a.key, a.values, a.user))

    p = args.add_command(subparsers, "dir")
    p.add_argument("action", choices=("set", "ls", "rm", "swap"),
                   help="set N [PATH] (default: here), ls, rm N, swap N M")
    p.add_argument("args", nargs="*", metavar="N|PATH", help="the number(s), and for set an optional folder")
    p.add_argument("--user", help=as_user)
    p.set_defaults(func=_dir_args)

    p = args.add_command(subparsers, "alias")
    p.add_argument("action", choices=("add", "ls", "rm"), help="add NAME FULL, ls (with where each comes from), rm NAME")
    p.add_argument("args", nargs="*", metavar="NAME|FULL", help="the alias's name, and for add its full config key")
    p.add_argument("--user", help=as_user)
    p.set_defaults(func=_alias_args)


def _dir_args(home: Home, a: argparse.Namespace) -> int:
    low, high = {"set": (1, 2), "ls": (0, 0), "rm": (1, 1), "swap": (2, 2)}[a.action]
    if not low <= len(a.args) <= high:
        counts = f"{low}" if low == high else f"{low} or {high}"
        raise JobtpuError(f"`dir {a.action}` takes {counts} argument(s), got {len(a.args)}",
                          hint="dir set N [PATH], dir ls, dir rm N, dir swap N M")
    if a.action == "set":
        return dir_command(home, "set", a.args[:1], (a.args[1:] or [None])[0], a.user)
    return dir_command(home, a.action, a.args, None, a.user)


def _alias_args(home: Home, a: argparse.Namespace) -> int:
    needs = {"add": 2, "ls": 0, "rm": 1}[a.action]
    if len(a.args) != needs:
        raise JobtpuError(f"`alias {a.action}` takes {needs} argument(s), got {len(a.args)}",
                          hint="alias add NAME FULL, alias ls, alias rm NAME")
    name, full = (list(a.args) + [None, None])[:2]
    return alias(home, a.action, name, full, a.user)

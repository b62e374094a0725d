"""Per-user settings: `users/<name>/settings.json` in the home, written by `jobtpu config`, `dir` and
`alias`, and hand-editable like machines.json. A file that does not read as settings is refused with
one line naming the file and the key, and nothing is changed.

    {"rule": "resume", "req": ["v3-16"], "columns": ["id", "status", "submitted"],
     "time_zone": "Asia/Shanghai", "dirs": {"1": "/home/ann/proj"}, "aliases": {"dr": "config.model.dropout"}}
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from jobtpu.errors import ConfigError, JobtpuError
from jobtpu.home.layout import Home, make_dirs, write_atomic
from jobtpu.home.safefs import CAP_SMALL, read_regular
from jobtpu.schema.decode import read_file
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.settings import UserSettings

# The keys `jobtpu config` sets, and what each means when it is not set.
CONFIG_KEYS: dict[str, tuple[str, str]] = {  # key → (what it sets, what applies while it is not set)
    "rule": ("the default --rule of submit and run", "the machine's rule"),
    "req": ("the default --req of submit and run, one or more requests", "none"),
    "columns": ("the columns `status` shows, in that order", "every column but 'submitted'"),
    "time_zone": ("the time zone times are shown in: an IANA name like Asia/Shanghai, UTC or local", "local"),
    "notify": ("your own webhooks for notifications about your jobs, as JSON: "
               '\'[{"webhook": "https://hooks.slack.com/…", "events": ["failed", "finished"]}]\'', "none"),
    "sheet_name": ("the name the team sheet's User cells show for you (as your teammates know you there)",
                   "your user name"),
}
MAX_DIR = 99  # working directories are numbered 1..99
_DIR_NUMBER = re.compile(r"^[1-9][0-9]?$")
ALIAS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONFIG_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")  # as inputs.override_parts takes a key


# The most users' settings a pass reads (their own webhooks), and the most lines it gives for those
# it cannot use: a member who fills users/ with 20,000 folders costs each pass one line, not 20,000
# reads and lines (docs/reference/machines-json.md §3.10).
MAX_SETTINGS_READ = 1000
MAX_SETTINGS_LINES = 5


def settings_users(home: Home) -> tuple[list[str], int]:
    """The users whose settings a pass reads, by name (at most MAX_SETTINGS_READ of them), and how
    many more there were. One listing of users/: a plain file, or an entry that is not a valid user
    name, is no user's settings and is not counted."""
    from jobtpu.schema.names import USER_NAME

    try:
        with os.scandir(home.root / "users") as entries:
            names = sorted(e.name for e in entries if USER_NAME.match(e.name) and not e.is_file(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return [], 0
    return names[:MAX_SETTINGS_READ], max(0, len(names) - MAX_SETTINGS_READ)


def settings_file(home: Home, user: str) -> Path:
    return home.root / "users" / user / "settings.json"


def load_settings(home: Home, user: str, own: bool = True) -> UserSettings:
    """The user's settings (all defaults when the file is absent); ConfigError when it is malformed.
    `own`: for this account's own use (its submit's folders and aliases, its views): in a shared home
    only a file in a folder of this account's counts, never one another member made (one line says
    whose it is); False for a runner reading a member's webhooks as data."""
    path = settings_file(home, user)
    try:
        if own:
            _check_own(home, user)
        data = read_regular(home.root, path, CAP_SMALL)
    except FileNotFoundError:
        offered = _offer(home, user)  # what the shared home's runner imported for this user, if anything
        if offered is None:
            return UserSettings()
        path, data = offered_file(home, user), offered
    where = f"{path.name} of user {user}"
    hint = f"fix {path} by hand, or `jobtpu config reset` and set it again; nothing was changed"
    settings: UserSettings = read_file(data, UserSettings, path, where, hint)
    try:
        check_settings(settings)
    except JobtpuError as e:
        raise ConfigError(f"{where}: {e.message}", hint=hint) from None
    return settings


def viewer_settings(home: Home) -> UserSettings:
    """The settings of whoever runs a listing (`status`, `machines`): theirs, or the defaults for a
    login jobtpu cannot take as a user name (such a login has no settings to read)."""
    from jobtpu.home.actor import resolve_user

    try:
        viewer = resolve_user(None)
    except JobtpuError:
        return UserSettings()
    try:
        return load_settings(home, viewer)
    except NotYours as e:  # a listing still lists: with the defaults, and one line saying why
        import sys

        sys.stderr.write(f"jobtpu: {e.message}; showing the defaults\n")
        return UserSettings()


def viewer_zone(settings: UserSettings) -> Any:
    return zone_of(settings.time_zone) if settings.time_zone else None


def check_settings(settings: UserSettings) -> None:
    """What the types cannot say: known rules, columns and zones, valid requests, dirs and aliases."""
    if settings.rule is not None:
        check_rule(settings.rule)
    if settings.req:
        check_req(settings.req)
    if settings.columns:
        check_columns(settings.columns)
    if settings.time_zone is not None:
        zone_of(settings.time_zone)
    if settings.sheet_name is not None and sheet_name_refusal(settings.sheet_name):
        raise JobtpuError(f"'sheet_name' {settings.sheet_name[:40]!r}: {sheet_name_refusal(settings.sheet_name)}")
    if settings.notify:
        from jobtpu.decide.destinations import parse_destinations

        parse_destinations(settings.notify, "'notify'", owner="")
    for number, folder in settings.dirs.items():
        if not _DIR_NUMBER.match(number):
            raise JobtpuError(f"'dirs': {number!r} is not a working directory number (1 to {MAX_DIR})")
        if not Path(folder).is_absolute():
            raise JobtpuError(f"'dirs': {number} must be an absolute path (got {folder!r})")
    for name, full in settings.aliases.items():
        check_alias(name, full)


def sheet_name_refusal(name: object) -> str | None:
    """Why `name` cannot be a user's name in the sheet's User cells (None: it can). Cells jobtpu
    writes list a machine's users joined by ", ", so a comma would make two names of one."""
    if not isinstance(name, str) or not name.strip():
        return "not a name"
    if len(name) > 64 or not name.isprintable() or "," in name or name != name.strip():
        return "a sheet name is one line of at most 64 printable characters, no comma, no outer spaces"
    return None


def check_rule(rule: str) -> None:
    from jobtpu.decide.rules import RULES

    if rule not in RULES:
        raise JobtpuError(f"'rule' {rule!r} is not a rule: use one of {', '.join(RULES)}")


def check_req(tokens: list[str]) -> None:
    from jobtpu.decide.fit import parse_request

    parse_request(tokens)


def check_columns(columns: list[str]) -> None:
    from jobtpu.render.job_columns import JOB_COLUMN_TITLES

    for column in columns:
        if column not in JOB_COLUMN_TITLES:
            raise JobtpuError(f"'columns': {column!r} is not a status column: use some of {', '.join(JOB_COLUMN_TITLES)}")
    if len(set(columns)) != len(columns):
        raise JobtpuError("'columns' names a column twice")


def zone_of(name: str) -> Any:
    """A tzinfo for a time zone setting ("local": None, the machine's own)."""
    if name == "local":
        return None
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise JobtpuError(f"'time_zone' {name!r} is not a time zone: use an IANA name like Asia/Shanghai "
                          "or America/New_York, UTC, or local") from None


def check_alias(name: str, full: str) -> None:
    if not ALIAS_NAME.match(name):
        raise JobtpuError(f"alias name {name!r} must be letters, digits and '_', not starting with a digit")
    if not CONFIG_KEY.match(full):
        raise JobtpuError(f"alias {name}: {full!r} is not a config key (like config.training.learning_rate)")


def dir_number(text: str) -> str:
    """A working directory number as the user typed it, checked: "1" to "99"."""
    if not _DIR_NUMBER.match(text):
        raise JobtpuError(f"{text!r} is not a working directory number: use 1 to {MAX_DIR}")
    return text


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    from jobtpu.home.store import hold_lock

    make_dirs(path.parent)
    with hold_lock(path.with_name(path.name + ".lock"), 30.0, what=path.name):
        yield


def offered_file(home: Home, user: str) -> Path:
    """In a shared home: the settings its runner imported for another member (`import`), read as that
    member's until the member keeps settings of their own (docs/reference/home-files.md §1.6)."""
    return home.root / "users" / ".offered" / f"{user}.json"


def _offer(home: Home, user: str) -> bytes | None:
    import os

    from jobtpu.home.roles import Layout, role_of

    role = role_of(home.root)
    if role.layout is not Layout.SHARED:
        return None
    path = offered_file(home, user)
    try:
        if os.stat(path, follow_symlinks=False).st_uid != role.runner_uid:
            return None  # only the runner's offer counts
        return read_regular(home.root, path, CAP_SMALL)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _offers_instead(home: Home, user: str) -> bool:
    """Whether this account, a shared home's runner, writes `user`'s settings as an offer: `user` is
    not its own name and keeps no folder of the runner's."""
    import os

    from jobtpu.home.roles import Layout, role_of
    from jobtpu.home.trust import account_name

    role = role_of(home.root)
    if role.layout is not Layout.SHARED or not role.is_runner or user == account_name(os.geteuid()):
        return False
    try:
        os.stat(settings_file(home, user).parent, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return False  # the member's own folder (or the runner's): written there, or refused, as ever


def update_settings(home: Home, user: str, change: Callable[[UserSettings], None]) -> UserSettings:
    """Read, change, check and write the user's settings under their lock; a change that raises, or
    leaves the settings invalid, writes nothing. A shared home's runner writing another member's
    settings (`import`) leaves them as an offer the member's commands read until they keep their own."""
    if _offers_instead(home, user):
        path = offered_file(home, user)
        with _locked(path):
            settings = load_settings(home, user, own=False)
            change(settings)
            check_settings(settings)
            write_atomic(path, msgspec.json.format(msgspec.json.encode(settings), indent=2) + b"\n")
        return settings
    path = settings_file(home, user)
    _check_writer(path, user)
    with _locked(path):
        settings = load_settings(home, user)
        change(settings)
        check_settings(settings)
        write_atomic(path, msgspec.json.format(msgspec.json.encode(settings), indent=2) + b"\n")
    return settings


def check_may_write(home: Home, user: str) -> None:
    """update_settings's refusal, asked ahead: `import` checks every user before it writes anything."""
    _check_writer(settings_file(home, user), user)


class NotYours(ConfigError):
    """Settings another account made where this account's would be."""


def _check_own(home: Home, user: str) -> None:
    """In a shared home, users/<user>/ and its settings must be this account's to be used as its own
    (docs/reference/home-files.md §1.3): another member could have made them first."""
    import os

    from jobtpu.home.roles import Layout, role_of

    if role_of(home.root).layout is Layout.PRIVATE:
        return
    me = os.geteuid()
    for path in (settings_file(home, user).parent, settings_file(home, user)):
        owner = os.stat(path, follow_symlinks=False).st_uid  # FileNotFoundError: no settings
        if owner != me:
            from jobtpu.home.trust import account_name

            raise NotYours(f"users/{user}/{'' if path.is_dir() else path.name} is account {account_name(owner)}'s, "
                              f"not {account_name(me)}'s: not used as your settings",
                              hint=f"the runner's next pass moves users/{user} aside when {user} is your account's "
                                   "name; else use a user name of your own (--user, $JOBTPU_USER)")


def _check_writer(path: Path, user: str) -> None:
    """A user's settings (working directories, aliases, webhooks) are changed only by the account
    that owns the file, or by the account the user's name is (docs/design.md §7): `JOBTPU_USER=ann`
    does not let another account repoint ann's working directory."""
    import os

    try:
        owner = os.stat(path, follow_symlinks=False).st_uid
    except FileNotFoundError:
        return
    me = os.geteuid()
    if owner == me:
        return
    from jobtpu.home.trust import account_name

    if user != account_name(me):
        raise JobtpuError(f"users/{user}/settings.json is account {account_name(owner)}'s: "
                          f"account {account_name(me)} may not change it",
                          hint="change your own settings, or ask its owner")


# ---- which folder a submit snapshots ----------------------------------------------------------------

# A folder holding one of these, or below one that does, is a project: `submit` without --dir
# snapshots it rather than the user's working directory 1.
PROJECT_MARKERS = (".git", ".jobtpu", "pyproject.toml", "setup.py")


def is_project(folder: Path) -> bool:
    return any((f / marker).exists() for f in (folder, *folder.parents) for marker in PROJECT_MARKERS)


def source_folder(asked: str | None, settings: UserSettings, here: Path) -> tuple[Path, str | None]:
    """The folder `submit --dir` means, and a line saying why when it is a working directory the
    user did not name: a bare number N is working directory N; no --dir is `here` when `here` is a
    project or working directory 1 is not set, else working directory 1."""
    if asked is None:
        if "1" in settings.dirs and not is_project(here):
            folder = settings.dirs["1"]
            return Path(folder), (f"jobtpu: snapshotting working directory 1 ({folder}): the current folder is "
                                  f"not a project (none of {', '.join(PROJECT_MARKERS)} here or above)")
        return here, None
    if asked.isdigit():
        number = dir_number(asked)
        numbered = settings.dirs.get(number)
        if numbered is None:
            raise JobtpuError(f"working directory {number} is not set",
                              hint=f"`jobtpu dir set {number} PATH` sets it, `jobtpu dir ls` lists yours; "
                                   f"for a folder named {asked} here, pass --dir ./{asked}")
        return Path(numbered), None
    return Path(asked).expanduser(), None


# ---- config aliases at three levels -------------------------------------------------------------------

BUILTIN_ALIASES = {
    "lr": "config.training.learning_rate",
    "bs": "config.training.batch_size",
    "ep": "config.training.num_epochs",
    "wd": "config.training.weight_decay",
    "b1": "config.training.adam_b1",
    "b2": "config.training.adam_b2",
    "ckpt": "config.training.checkpoint_per_epoch",
}
ALIAS_SOURCES = ("built-in", "team", "yours")


def alias_levels(team: dict[str, str], own: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """Each alias name → its (source, full key) at every level that defines it, lowest first: the
    last one is the one in force (yours over the team's in machines.json over the built-in)."""
    levels: dict[str, list[tuple[str, str]]] = {}
    for source, aliases in zip(ALIAS_SOURCES, (BUILTIN_ALIASES, team, own), strict=True):
        for name, full in aliases.items():
            levels.setdefault(name, []).append((source, full))
    return levels


def effective_aliases(team: dict[str, str], own: dict[str, str]) -> dict[str, str]:
    return {**BUILTIN_ALIASES, **team, **own}


def full_key(key: str, team: Mapping[str, str], own: Mapping[str, str]) -> str:
    """The config key an override's KEY stands for: your alias, else the team's, else a built-in one,
    else KEY itself. The one place an override gets its full name, whichever way it was typed."""
    for level in (own, team, BUILTIN_ALIASES):
        if key in level:
            return level[key]
    return key


def config_overrides(words: list[str], team: Mapping[str, str], own: Mapping[str, str]) -> list[str]:
    """KEY=VALUE words (typed, or a sweep's combination) → shell-quoted `--FULL.KEY=VALUE` words."""
    import shlex

    from jobtpu.inputs import override_parts

    return [shlex.quote(f"--{full_key(key, team, own)}={value}") for key, value in map(override_parts, words)]

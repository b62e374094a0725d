"""What a move from the old shared layout sets aside (docs/reference/home-files.md §1.3): trust never
transfers by copying. A file whose meaning depends on who wrote it, and which the group could write
in the old layout, is not copied into a file of the runner's: it goes into `aside/` (the runner's
alone, 0700, files 0600), one line each, until the runner looks at it and adopts it on purpose
(`jobtpu adopt`, commands/adopt.py).

The class, from the readers that ask who owns a file (trust.py, privileged.py, settings.py,
fleet/reach.py, transport/hostkeys.py):
- `runner.json`: consent to run members' local jobs as the runner, and privileged keys;
- machines.json's privileged keys (privileged.py): the file stays, for the fleet, rewritten by the
  runner without them; the original is kept aside;
- `known_hosts`: which host keys the runner's connections accept;
- `home_id`: the mark a pass recognises (and kills) its job processes by; a forged one names another
  home's. Set aside only when no job of the home is active: a job running now carries it, and a new
  id would orphan it (then it is kept, and the line says so);
- `users/.offered/<name>.json`: read as that member's settings because the runner wrote it;
- `users/<name>/settings.json`: read as that member's own (the owner of the file is the proof).
What is left is safe whoever wrote it: state.json's records are held to their submitters' specs
(migrate.settle_records), a snapshot is checked against its name (a digest) before it is sent, secrets.json gives a job only the names its spec lists, users.json is a
guard against typos rather than a boundary (users.py), the outbox and the sheet memo name only
destinations and cells the current files name."""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Sequence
from typing import Any

from jobtpu.home import safefs
from jobtpu.home.privileged import SECTIONS
from jobtpu.home.trust import account_name
from jobtpu.schema.names import USER_NAME

ASIDE = "aside"
FOLDER_MODE = 0o700
FILE_MODE = 0o600
WHOLE = ("runner.json", "known_hosts", "home_id")  # top files set aside whole
MACHINES = "machines.json"
OFFERED = "offered-"  # aside/offered-<name>.json: was users/.offered/<name>.json
SETTINGS = "settings-"  # aside/settings-<name>.json: was users/<name>/settings.json


# ---- pure ------------------------------------------------------------------------------------------

def why_exposed(st: os.stat_result, folder: os.stat_result, owner: int) -> str | None:
    """Pure: why the group could have written this file, which only account `owner` should have
    (None: only that account could). A folder the group may write and that is not sticky lets a
    member swap the file; a file the group may write lets a member rewrite it in place."""
    if st.st_uid != owner:
        return f"it was {account_name(st.st_uid)}'s"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "the group could write it"
    if st.st_nlink != 1:
        return "it had other hard links"
    if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not folder.st_mode & stat.S_ISVTX:
        return "the group could write its folder"
    if folder.st_uid != owner:
        return f"its folder was {account_name(folder.st_uid)}'s"
    return None


def split_privileged(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Pure: machines.json's document without its privileged keys (the ones privileged.py refuses
    from an untrusted file), those keys in machines.json's shape, and their names."""
    kept = copy.deepcopy(doc)
    taken: dict[str, Any] = {}
    names: list[str] = []
    defaults = kept.get("defaults")
    if isinstance(defaults, dict) and defaults.get("identity_file") is not None:
        taken["defaults"] = {"identity_file": defaults.pop("identity_file")}
        names.append("defaults.identity_file")
    machines = kept.get("machines")
    for name, entry in (machines.items() if isinstance(machines, dict) else ()):
        if not isinstance(entry, dict):
            continue
        local = entry.get("kind") == "local"
        for key in ("identity_file", "root", "setup"):  # as privileged._strip takes them
            value = entry.get(key)
            if value is not None if key == "identity_file" else local and bool(value):
                taken.setdefault("machines", {}).setdefault(name, {})[key] = entry.pop(key)
                names.append(f"machines.{name}.{key}")
    for section, section_keys in SECTIONS.items():
        part = kept.get(section)
        for key in section_keys:
            if isinstance(part, dict) and part.get(key) is not None:
                taken.setdefault(section, {})[key] = part.pop(key)
                names.append(f"{section}.{key}")
    notify = kept.get("notify")
    if isinstance(notify, list):
        commands = [d for d in notify if isinstance(d, dict) and "command" in d]
        if commands:
            kept["notify"] = [d for d in notify if not (isinstance(d, dict) and "command" in d)]
            taken["notify"] = commands
            names += [f"notify command {d['command']!r}" for d in commands]
    return kept, taken, names


def put_back(doc: dict[str, Any], taken: dict[str, Any]) -> dict[str, Any]:
    """Pure: machines.json's document with the privileged keys `split_privileged` took laid back
    over it (a machine it no longer has gets none; a notify command it has already is not doubled)."""
    out = copy.deepcopy(doc)
    for section in ("defaults", *SECTIONS):
        if isinstance(taken.get(section), dict):
            part = out.get(section)
            if not isinstance(part, dict):
                part = out[section] = {}
            part.update(taken[section])
    machines = out.get("machines")
    for name, keys in (taken.get("machines") or {}).items():
        entry = machines.get(name) if isinstance(machines, dict) else None
        if isinstance(entry, dict) and isinstance(keys, dict):
            entry.update(keys)
    if isinstance(taken.get("notify"), list):
        mine = out.get("notify")
        mine = list(mine) if isinstance(mine, list) else []
        out["notify"] = mine + [d for d in taken["notify"] if d not in mine]
    return out


def origin_of(item: str) -> str | None:
    """Pure: the home path an item of aside/ was set aside from (None: not a name the move gives)."""
    if item in (*WHOLE, MACHINES):
        return item
    for prefix, where in ((OFFERED, "users/.offered/{}.json"), (SETTINGS, "users/{}/settings.json")):
        if item.startswith(prefix) and item.endswith(".json") and USER_NAME.match(item[len(prefix):-5]):
            return where.format(item[len(prefix):-5])
    return None


# ---- the move -------------------------------------------------------------------------------------

class _Aside:
    """aside/ in the home's open top folder, made (0700, the runner's) when first needed; a planted
    entry of that name is renamed away first (the walk then takes it over as any other)."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.fd: int | None = None

    def open(self) -> int:
        if self.fd is None:
            self.fd = open_aside(self.top, create=True)
        return self.fd

    def write(self, item: str, data: bytes) -> None:
        """aside/<item>, 0600, in the home's group as every path of the home is (docs/reference/home-files.md §1.6)."""
        fd = self.open()
        safefs.write_in(fd, item, data, FILE_MODE)
        os.chown(item, -1, os.fstat(self.top).st_gid, dir_fd=fd, follow_symlinks=False)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def open_aside(top: int, create: bool = False) -> int:
    """aside/ of the home open in `top`: the runner's own folder, 0700 (FileNotFoundError: none)."""
    st = safefs.lstat_in(top, ASIDE)
    if st is not None and (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()):
        if not create:
            raise safefs.UnsafePath(ASIDE, "is not a folder of this home's runner")
        os.rename(ASIDE, f"{ASIDE}.{os.urandom(6).hex()}.not-ours", src_dir_fd=top, dst_dir_fd=top)
        st = None
    if st is None:
        if not create:
            raise FileNotFoundError(ASIDE)
        os.mkdir(ASIDE, FOLDER_MODE, dir_fd=top)
    fd = os.open(ASIDE, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    os.fchmod(fd, FOLDER_MODE)
    return fd


def set_aside(top: int, top_st: os.stat_result, active: Sequence[int]) -> list[str]:
    """Every file of the class the group could write, moved into aside/ (machines.json: its
    privileged keys); `top_st` is the top folder as the old layout had it, `active` the jobs whose
    processes may run now. One line each."""
    aside = _Aside(top)
    lines: list[str] = []
    me = os.geteuid()
    if top_st.st_mode & stat.S_IWGRP and safefs.lstat_in(top, ASIDE) is not None and not _as_a_move_left_it(top):
        away = f"{ASIDE}.{os.urandom(6).hex()}.old"  # a member's, or a folder a member renamed there
        os.rename(ASIDE, away, src_dir_fd=top, dst_dir_fd=top)
        lines.append(f"{ASIDE}: not the runner's own folder as a move leaves it; renamed to {away} (nothing in it "
                     "is adopted)")
    try:
        for name in WHOLE:
            st = safefs.lstat_in(top, name)
            why = None if st is None or not stat.S_ISREG(st.st_mode) else why_exposed(st, top_st, me)
            if why is None:
                continue  # absent, ours alone, or a link/FIFO the walk removes
            if name == "home_id" and active:
                lines.append(f"home_id: kept although {why}: jobs {', '.join(map(str, active[:5]))} run with it and "
                             "would be lost to a new one (see docs/reference/home-files.md §1.3)")
                continue
            lines.append(_move(top, name, aside, name, why))
        lines += _machines(top, top_st, aside, me)
        lines += _users(top, aside, me)
    finally:
        aside.close()
    return [line for line in lines if line]


def _as_a_move_left_it(top: int) -> bool:
    """Whether aside/ is the runner's, 0700, holding only files of the runner's, 0600, one link each:
    nobody else could have put anything into it, even in a top folder the group could write."""
    me = os.geteuid()
    try:
        fd = os.open(ASIDE, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if st.st_uid != me or stat.S_IMODE(st.st_mode) != FOLDER_MODE:
            return False
        for name in os.listdir(fd):
            entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if (not stat.S_ISREG(entry.st_mode) or entry.st_uid != me or stat.S_IMODE(entry.st_mode) != FILE_MODE
                    or entry.st_nlink != 1):
                return False
        return True
    finally:
        os.close(fd)


def _said(origin: str, item: str, why: str) -> str:
    return (f"{origin}: set aside as aside/{item} ({why}): not used until you adopt it; `jobtpu adopt` shows "
            f"it, `jobtpu adopt {item}` uses it")


def _move(dir_fd: int, name: str, aside: _Aside, item: str, why: str, origin: str | None = None) -> str:
    """The file's bytes into aside/<item> (a new file of ours: a descriptor a member still holds on the
    old one writes nowhere we read), then the file removed."""
    origin = origin or name
    try:
        fd = safefs.open_in(dir_fd, name, shown=origin)
        try:
            data = safefs.read_capped(fd, origin, safefs.CAP_CONFIG)
        finally:
            os.close(fd)
        aside.write(item, data)
        os.unlink(name, dir_fd=dir_fd)
    except (OSError, safefs.UnsafePath) as e:
        return f"{origin}: {why}, and it cannot be set aside ({getattr(e, 'strerror', None) or e}); move it away by hand"
    return _said(origin, item, why)


def _machines(top: int, top_st: os.stat_result, aside: _Aside, me: int) -> list[str]:
    st = safefs.lstat_in(top, MACHINES)
    why = None if st is None or not stat.S_ISREG(st.st_mode) else why_exposed(st, top_st, me)
    if why is None:
        return []
    try:
        fd = safefs.open_in(top, MACHINES)
        try:
            data = safefs.read_capped(fd, MACHINES, safefs.CAP_CONFIG)
        finally:
            os.close(fd)
        doc = json.loads(data)
    except (OSError, safefs.UnsafePath, ValueError, RecursionError):
        return []  # unreadable as JSON: no key of it is used; fleet.py says what is wrong with it
    if not isinstance(doc, dict):
        return []
    kept, _, names = split_privileged(doc)
    if not names:
        return []
    try:
        aside.write(MACHINES, data)
        safefs.write_in(top, MACHINES, (json.dumps(kept, indent=2) + "\n").encode(), 0o640)
    except OSError as e:
        return [f"{MACHINES}: {why}, and its privileged keys cannot be set aside ({e.strerror or e}); "
                "take them out by hand"]
    return [f"{MACHINES}: its privileged keys ({', '.join(names)}) set aside, the original as aside/{MACHINES} "
            f"({why}): not used until you adopt them; `jobtpu adopt` shows them, `jobtpu adopt {MACHINES}` "
            "puts them back"]


def _users(top: int, aside: _Aside, me: int) -> list[str]:
    """users/.offered/<name>.json (the runner's offers) and users/<name>/settings.json (each member's own)."""
    try:
        users = os.open("users", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    except OSError:
        return []
    lines: list[str] = []
    try:
        for name in sorted(os.listdir(users)):
            try:
                folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=users)
            except OSError:
                continue  # not a folder: nobody reads it
            try:
                folder_st = os.fstat(folder)
                if name == ".offered":
                    for entry in sorted(os.listdir(folder)):
                        user = entry[:-5] if entry.endswith(".json") else ""
                        lines += _one(folder, entry, folder_st, me, aside, f"{OFFERED}{user}.json",
                                      f"users/.offered/{entry}") if USER_NAME.match(user) else []
                elif USER_NAME.match(name):
                    lines += _one(folder, "settings.json", folder_st, folder_st.st_uid, aside,
                                  f"{SETTINGS}{name}.json", f"users/{name}/settings.json")
            finally:
                os.close(folder)
    finally:
        os.close(users)
    return lines


def _one(folder: int, name: str, folder_st: os.stat_result, owner: int, aside: _Aside, item: str,
         origin: str) -> list[str]:
    st = safefs.lstat_in(folder, name)
    if st is None or not stat.S_ISREG(st.st_mode):
        return []
    why = why_exposed(st, folder_st, owner)
    if why is None:
        return []
    return [_move(folder, name, aside, item, why, origin)]

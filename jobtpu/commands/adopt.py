"""`jobtpu adopt`: what a move from the old shared layout set aside (home/aside.py), shown in full,
and put back as the runner's on purpose (docs/reference/home-files.md §1.3). The runner's alone:
members are refused before this module runs (RUNNER_ONLY in commands/table.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jobtpu.commands import args
from jobtpu.commands.common import note, say
from jobtpu.errors import ConfigError, JobtpuError
from jobtpu.home import aside, safefs
from jobtpu.home.layout import Home
from jobtpu.render.text import printable


class Damaged(JobtpuError):
    """An item of aside/ that cannot be adopted as it is: one line, the item left where it is."""


def adopt(home: Home, names: list[str], every: bool) -> int:
    from jobtpu.home.roles import Layout, role_of
    from jobtpu.home.store import hold_lock
    from jobtpu.timing import current

    if role_of(home.root).layout is Layout.PRIVATE:
        note("nothing is set aside: this home is not shared (only a move from the old shared layout sets files "
             "aside)")
        return 0
    if names and every:
        raise JobtpuError("`jobtpu adopt` takes names or --all, not both", hint="`jobtpu adopt` lists what is set aside")
    top = os.open(home.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            folder = aside.open_aside(top)
        except FileNotFoundError:
            note("nothing is set aside in this home")
            return 0
        try:
            items = sorted(n for n in os.listdir(folder) if not n.startswith("."))
            if not names and not every:
                return _show(folder, items)
            wanted = items if every else names
            missing = [n for n in wanted if n not in items]
            if missing:
                raise JobtpuError(f"{', '.join(map(repr, missing))} {'is' if len(missing) == 1 else 'are'} not set "
                                  "aside in this home; nothing adopted", hint="`jobtpu adopt` lists what is")
            failed = 0
            with hold_lock(home.pass_lock, current().act_lock_wait, "the pass lock (manage.lock)"):
                for item in wanted:
                    try:
                        line = _adopt_one(home, top, folder, item)
                        os.unlink(item, dir_fd=folder)
                    except (Damaged, ConfigError, safefs.UnsafePath) as e:
                        failed += 1
                        line = f"aside/{item}: {e.message}; left there"
                    except OSError as e:
                        failed += 1
                        line = f"aside/{item}: {e.strerror or e}; left there"
                    note(printable(line))
            return 1 if failed else 0
        finally:
            os.close(folder)
    except safefs.UnsafePath as e:
        raise JobtpuError(f"{e.message}: nothing adopted", hint="move it away by hand") from None
    finally:
        os.close(top)


def _read(folder: int, item: str, shown: str | None = None) -> bytes:
    shown = shown or f"aside/{item}"
    fd = safefs.open_in(folder, item, shown=shown)
    try:
        return safefs.read_capped(fd, shown, safefs.CAP_CONFIG)
    finally:
        os.close(fd)


def _show(folder: int, items: list[str]) -> int:
    """Each item, where it was and what adopting it brings back, in full."""
    if not items:
        note("nothing is set aside in this home")
        return 0
    for item in items:
        origin = aside.origin_of(item)
        try:
            if origin is None:
                raise Damaged("not a name a move gives; adopt leaves it alone")
            brings = _brings(item, _read(folder, item))
        except (Damaged, safefs.UnsafePath) as e:
            say(printable(f"aside/{item}: {e.message}"))
            continue
        except OSError as e:
            say(printable(f"aside/{item}: cannot read it ({e.strerror or e})"))
            continue
        say(printable(f"{item} (was {origin}): `jobtpu adopt {item}` brings back {brings[0]}"))
        for text in brings[1:]:
            for line in text.splitlines():
                say("    " + printable(line))
    return 0


def _brings(item: str, data: bytes) -> list[str]:
    """What adopting `item` would bring back: a summary, then the text itself."""
    text = data.decode("utf-8", "replace")
    if item == aside.MACHINES:
        _, taken, names = aside.split_privileged(_json("it", data))
        return [f"these privileged keys into machines.json: {', '.join(names) or 'none'}", json.dumps(taken)]
    if item == "runner.json":
        return ["this runner.json (its consent and privileged keys, used by your passes):", text.rstrip()]
    if item == "known_hosts":
        return ["these host keys into known_hosts:", text.rstrip()]
    if item == "home_id":
        return [f"the home id {text.strip()!r} (the mark of the jobs that carried it)"]
    user = item.split("-", 1)[1][:-5]
    return [f"these settings of user {user}:", text.rstrip()]


def _json(what: str, data: bytes) -> dict[str, object]:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        raise Damaged(f"{what} is not a JSON object")
    return doc


def _adopt_one(home: Home, top: int, folder: int, item: str) -> str:
    """Put one item back as the runner's; its line."""
    from jobtpu.home.trust import parse_runner

    if aside.origin_of(item) is None:
        raise Damaged("not a name a move gives; adopt leaves it alone")
    data = _read(folder, item)
    if item == "runner.json":
        parse_runner(data)  # refuse what a pass would refuse
        _write_new(top, "runner.json", data, 0o644)
        return "runner.json: adopted; your passes use it from the next one"
    if item == aside.MACHINES:
        _, taken, names = aside.split_privileged(_json("it", data))
        try:
            current = _json("the home's machines.json", _read(top, aside.MACHINES, aside.MACHINES))
        except FileNotFoundError:
            raise Damaged("the home has no machines.json to put its keys back into") from None
        safefs.write_in(top, aside.MACHINES, (json.dumps(aside.put_back(current, taken), indent=2) + "\n").encode(),
                        0o640)
        return f"machines.json: adopted its privileged keys ({', '.join(names) or 'none'})"
    if item == "known_hosts":
        return _adopt_known_hosts(top, data)
    if item == "home_id":
        return _adopt_home_id(home, top, data)
    return _adopt_settings(home, item, data)


def _write_new(folder: int, name: str, data: bytes, mode: int) -> None:
    """`name`, made in the open folder; refused when one is there already (the runner's own since the move)."""
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        safefs.write_in(folder, name, data, mode)
        return
    raise Damaged(f"the home has a {name} already; compare the two and merge them by hand")


def _adopt_known_hosts(top: int, data: bytes) -> str:
    try:
        now = _read(top, "known_hosts", "known_hosts").splitlines()
    except FileNotFoundError:
        now = []
    added = [line for line in data.splitlines() if line.strip() and line not in now]
    safefs.write_in(top, "known_hosts", b"".join(line + b"\n" for line in [*now, *added]), 0o640)
    return f"known_hosts: adopted {len(added)} host key line{'s' * (len(added) != 1)}"


def _adopt_home_id(home: Home, top: int, data: bytes) -> str:
    from jobtpu.fleet.reach import HOME_ID
    from jobtpu.home.store import Store

    if not HOME_ID.match(data.decode("ascii", "replace").strip()):
        raise Damaged("does not hold a home id (16 hex digits)")
    active = [job.id for job in Store(home).load().jobs if job.active]
    if active:
        raise Damaged(f"jobs {', '.join(map(str, active[:5]))} run with the current home id; adopt it when none does")
    safefs.write_in(top, "home_id", data, 0o640)
    return "home_id: adopted; jobs started from now carry it"


def _adopt_settings(home: Home, item: str, data: bytes) -> str:
    """A user's settings: the runner's own back in its folder; another member's as the runner's offer
    (users/.offered/<name>.json), read as theirs until they keep settings of their own."""
    from jobtpu.home.settings import check_settings
    from jobtpu.home.trust import account_name
    from jobtpu.schema.decode import read_file
    from jobtpu.schema.settings import UserSettings

    user = item.split("-", 1)[1][:-5]
    check_settings(read_file(data, UserSettings, Path(item), f"aside/{item}", "it stays in aside/"))
    me = os.geteuid()
    if item.startswith(aside.SETTINGS) and user == account_name(me):
        fd = safefs.open_dir(home.root, f"users/{user}", create=True)
        try:
            if os.fstat(fd).st_uid != me:
                raise Damaged(f"users/{user}/ is not your folder")
            _write_new(fd, "settings.json", data, 0o640)
        finally:
            os.close(fd)
        return f"{item}: adopted as your settings (users/{user}/settings.json)"
    fd = safefs.open_dir(home.root, "users/.offered")
    try:
        if os.fstat(fd).st_uid != me:
            raise Damaged("users/.offered/ is not your folder")
        safefs.write_in(fd, f"{user}.json", data, 0o640)
    finally:
        os.close(fd)
    return (f"{item}: adopted as your offer to {user} (users/.offered/{user}.json), read as {user}'s settings "
            "until they keep settings of their own")


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "adopt")
    p.add_argument("names", nargs="*", metavar="NAME", help="the items to put back (as `jobtpu adopt` lists them)")
    p.add_argument("--all", action="store_true", dest="every", help="put back every item")
    p.set_defaults(func=lambda home, a: adopt(home, a.names, a.every))

"""Team commands: `init` (a home, private or shared with a Unix group) and `user` (the user list)."""

from __future__ import annotations

import os
from pathlib import Path

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home, make_dirs, write_atomic
from jobtpu.home.users import add_user, load_users, remove_user

# What `init` writes when the home has no machines.json: the built-in local machine, spelt out.
LOCAL_ONLY = b'{\n  "machines": {\n    "local": {"kind": "local"}\n  }\n}\n'


def init(home: Home, group: str | None) -> int:
    """Make the home; with `group`, share it in the one-writer layout (docs/reference/home-files.md
    §1.3): this account is its runner and writes every shared file, the group reads them and writes
    only into the spool and its own folders. A home of the old shared layout is moved to it."""
    from jobtpu.home.roles import Layout, role_of

    root = home.root
    if root.exists() and not root.is_dir():
        raise JobtpuError(f"{root} exists and is not a folder", hint="name a new or existing folder")
    gid = _group_id(group) if group is not None else None
    make_dirs(root.parent)
    root.mkdir(mode=0o700, exist_ok=True)
    if gid is not None:
        role = role_of(root)
        if role.runner_uid is not None and not role.is_runner or os.stat(root).st_uid != os.geteuid():
            raise JobtpuError(f"{root} is another account's: only its owner makes it a shared home's runner",
                              hint="ask its owner to run this command")
        if role.layout is Layout.OLD_SHARED:
            from jobtpu.home.migrate import migrate

            for line in migrate(home):
                note(line)
        from jobtpu.home.migrate import make_one_writer

        for line in make_one_writer(root, gid):
            note(line)
    if not home.machines_file.exists():
        write_atomic(home.machines_file, LOCAL_ONLY, mode=0o640 if gid is not None else None)
        note(f"wrote {home.machines_file} with the local machine; add your machines there")
    shared = f", shared with group {group} (you are its runner: run its passes)" if group else ""
    print(f"{root}{shared}")
    return 0


def _group_id(group: str) -> int:
    import grp

    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise JobtpuError(f"there is no Unix group {group!r}",
                          hint="create it (groupadd NAME, then usermod -aG NAME each account), or name one "
                               "of yours (`id -Gn`)") from None
    if os.geteuid() != 0 and gid not in os.getgroups() and gid != os.getegid():
        raise JobtpuError(f"you are not in the group {group!r}, so you cannot share a home with it",
                          hint="name one of your groups (`id -Gn`), or ask an admin to add you to it")
    return gid


def user(home: Home, op: str, name: str | None) -> int:
    if op == "ls":
        if name is not None:
            raise JobtpuError("`jobtpu user ls` takes no name", hint="`jobtpu user ls`")
        names = load_users(home)
        if names is None:
            note("this home keeps no user list: any user name is accepted (`jobtpu user add NAME` starts one)")
            return 0
        for each in names:
            print(each)
        return 0
    if name is None:
        raise JobtpuError(f"`jobtpu user {op}` needs a user name", hint=f"`jobtpu user {op} NAME`")
    if op == "add":
        if add_user(home, name):
            note(f"added {name} to this home's users")
        else:
            note(f"{name} is already one of this home's users")
        return 0
    remove_user(home, name)
    note(f"removed {name}; their jobs keep their name, and acting as {name} is refused from now on")
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "init")
    p.add_argument("dir", nargs="?", metavar="DIR", help="the home to make (default: --home, $JOBTPU_HOME or ~/.jobtpu)")
    p.add_argument("--shared", metavar="GROUP", help="share it with this Unix group: you run its passes and write "
                   "its files, the group reads them and sends you submits and acts (never world-readable)")
    p.set_defaults(func=lambda home, a: init(home if a.dir is None else Home(Path(a.dir).expanduser().resolve()),
                                             a.shared))

    p = args.add_command(subparsers, "user")
    p.add_argument("op", choices=("add", "ls", "rm"), help="add NAME, ls, or rm NAME")
    p.add_argument("name", nargs="?", help="the user name (add, rm)")
    p.set_defaults(func=lambda home, a: user(home, a.op, a.name))

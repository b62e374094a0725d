"""Team commands: `init` (a home, private or shared with a Unix group) and `user` (the user list)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from jobtpu.commands.common import note
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home, make_dirs, write_atomic
from jobtpu.home.users import add_user, load_users, remove_user

# What `init` writes when the home has no machines.json: the built-in local machine, spelt out.
LOCAL_ONLY = b'{\n  "machines": {\n    "local": {"kind": "local"}\n  }\n}\n'


def init(home: Home, group: str | None) -> int:
    """Make the home (and with `group`, share it: setgid, group-owned, group-writable, not world)."""
    root = home.root
    if root.exists() and not root.is_dir():
        raise JobtpuError(f"{root} exists and is not a folder", hint="name a new or existing folder")
    gid = _group_id(group) if group is not None else None
    make_dirs(root.parent)
    root.mkdir(mode=0o700, exist_ok=True)
    if gid is not None:
        _share(root, gid, group or "")
    if not home.machines_file.exists():
        write_atomic(home.machines_file, LOCAL_ONLY)
        note(f"wrote {home.machines_file} with the local machine; add your machines there")
    shared = f", shared with group {group}" if group else ""
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


def _share(root: Path, gid: int, group: str) -> None:
    """The folder and what jobtpu already wrote in it become the group's: folders 2770 (setgid, so
    what is made in them keeps the group), files 0660, nothing for others. An existing private home
    is shared the same way; an entry another account owns is left as it is and named."""
    not_mine: list[str] = []
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_uid != os.geteuid() and os.geteuid() != 0:
            if st.st_gid != gid or st.st_mode & 0o007:
                not_mine.append(str(path.relative_to(root)) or ".")
            continue
        rel = path.relative_to(root).parts
        try:
            _give_to_group(path, gid, consent=bool(rel) and rel[0] in ("specs", "runner.json"))
        except PermissionError as e:
            raise JobtpuError(f"cannot give {path} to group {group!r}: {e.strerror}",
                              hint="run `jobtpu init --shared` as the home's owner") from None
    if not_mine:
        note(f"left as they are (another account's): {', '.join(not_mine[:5])}; its owner runs "
             f"`jobtpu init --shared {group}` to share them")


def _give_to_group(path: Path, gid: int, consent: bool = False) -> None:
    """Through a descriptor opened without following a symlink: a group member who swaps an entry for
    a link meanwhile never gets one of our files elsewhere chmodded. A file that carries its owner's
    consent (a job spec, runner.json: docs/design.md §7) stays writable by its owner alone (0640),
    and the specs folder gets the sticky bit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:  # became a symlink since it was listed: not ours to change
            return
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() and os.geteuid() != 0:
            return
        os.fchown(fd, -1, gid)
        # A file keeps its owner's execute bit for the group; nothing is ever the world's.
        folder = stat.S_ISDIR(st.st_mode)
        if consent:
            os.fchmod(fd, 0o3770 if folder else 0o640)
            return
        os.fchmod(fd, 0o2770 if folder else (0o660 | (0o110 if st.st_mode & 0o100 else 0)))
    finally:
        os.close(fd)


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

"""Who writes a home (docs/reference/home-files.md §1.3): the layout a home has, and whether this
process is its runner (the one account that writes every shared file) or a member (who writes only
into the spool and their own folder).

A *private* home is written by whoever can write it, as always. A *shared* home made by
`init --shared` has one writer: the account that owns its top folder, the runner. Its top folder is
not group-writable; the group writes only the sticky `spool/`, `users/` and `results/` folders, each
entry there its maker's. A home whose top folder is group-writable is a shared home of the old
layout, where every member wrote every file: its runner's next command moves it to the new one."""

import enum
import os
import stat
from pathlib import Path
from typing import NamedTuple

SPOOL = "spool"  # members' requests: submits (with their snapshot) and acts, each file its sender's
REPLIES = "replies"  # the runner's answer to each request, by the request's name


class Layout(enum.Enum):
    PRIVATE = "private"
    SHARED = "shared"  # one writer: the runner
    OLD_SHARED = "old shared"  # group-writable top folder: every member wrote every file


class Role(NamedTuple):
    layout: Layout
    runner_uid: int | None  # the account that writes a shared home's files
    euid: int

    @property
    def is_member(self) -> bool:
        """A member of a shared home who is not its runner: writes only requests and its own folder."""
        return self.layout is not Layout.PRIVATE and self.runner_uid != self.euid

    @property
    def is_runner(self) -> bool:
        return self.layout is not Layout.PRIVATE and self.runner_uid == self.euid


def layout_of(root_st: os.stat_result | None, spool_st: os.stat_result | None) -> Layout:
    """Pure: a home's layout from the stat of its top folder and of its `spool/` (None: absent)."""
    if root_st is None or not stat.S_ISDIR(root_st.st_mode):
        return Layout.PRIVATE
    if root_st.st_mode & stat.S_IWGRP:
        return Layout.OLD_SHARED
    if (spool_st is not None and stat.S_ISDIR(spool_st.st_mode) and spool_st.st_uid == root_st.st_uid
            and spool_st.st_mode & stat.S_ISVTX):
        return Layout.SHARED
    return Layout.PRIVATE


def role_of(root: Path) -> Role:
    """The home's layout and this process's place in it (two lstats, no read)."""
    try:
        root_st: os.stat_result | None = os.stat(root)
    except OSError:
        root_st = None
    try:
        spool_st: os.stat_result | None = os.lstat(root / SPOOL)
    except OSError:
        spool_st = None
    layout = layout_of(root_st, spool_st)
    runner = root_st.st_uid if root_st is not None and layout is not Layout.PRIVATE else None
    return Role(layout, runner, os.geteuid())


def runner_name(role: Role) -> str:
    from jobtpu.home.trust import account_name

    return account_name(role.runner_uid if role.runner_uid is not None else os.geteuid())

"""What every front end does before a command's function runs, the same for each: the command line
(cli.py), the Python API (api.py) and `jobtpu serve` open the home here, and a member of a shared
home sends an act as a request or is refused what only the runner does (docs/reference/home-files.md
§1.3). Below the front ends, so none of them imports another for it (docs/design.md §5.1)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home, find_home


def open_home(path: str | None) -> Home:
    """The home a command works in (--home, $JOBTPU_HOME, or found: layout.find_home); the Python
    API's `Home` opens it here too."""
    home = find_home(path)
    if home.root.exists() and not home.root.is_dir():
        raise JobtpuError(f"the home {home.root} is not a folder",
                          hint="pass --home DIR (or set $JOBTPU_HOME) naming a folder, new or existing")
    return home


def as_member(home: Home, command: str, argv: Sequence[str], parsed: argparse.Namespace | None = None) -> int | None:
    """A member of a shared home sends an act as a request (its exit status), and is refused what only
    the runner may do; None: the command runs here (the runner's, or a private home). `parsed`: the
    command line's parse of `argv`, when made already (else the act's words are parsed here, by the
    same parser)."""
    from jobtpu.home.roles import Layout, role_of

    role = role_of(home.root)
    if role.is_member:  # one writer (docs/reference/home-files.md §1.3): a member's acts are requests
        from jobtpu.commands import relay, table

        words = relay.command_words(argv, command)
        if role.layout is Layout.OLD_SHARED and not table.old_layout_may(command):
            raise relay.refuse_old_layout(role, command)
        if command in table.RELAYED:
            from jobtpu.commands.act_request import act_of, parse_act
            from jobtpu.home.users import known_user

            act = act_of(command, parsed) if parsed is not None else parse_act(words)
            return relay.send_act(home, role, act, known_user(home, None))
        if not table.member_may(command, words):
            raise relay.refuse_runner_only(role, command)
    return None

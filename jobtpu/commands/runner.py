"""`jobtpu runner`: the home's runner lease (who runs its passes, who stands by) and a planned
handover (docs/reference/home-files.md §1.7); the lease's lines `status` and `doctor` show."""

from __future__ import annotations

import os
import time

from jobtpu.commands import args
from jobtpu.commands.common import note, say
from jobtpu.errors import ConfigError
from jobtpu.home.layout import Home
from jobtpu.render.text import printable


def lease_lines(home: Home) -> list[tuple[str, bool]]:
    """The lease in lines (line, problem); [] in a home without one; one line when it cannot be read."""
    from jobtpu.home import lease
    from jobtpu.home.lease_view import lease_lines as lines_of

    if not lease.in_use(home):
        return []
    try:
        top, current = lease.current(home)
    except OSError as e:
        return [(f"runner lease: cannot be read ({e.strerror or e}): the home's filesystem may be gone", True)]
    return lines_of(top, current, lease.standbys(home), time.time())


def filesystem_check(home: Home) -> tuple[str, bool]:
    """`doctor`'s line on the home's filesystem: where a standby can work."""
    from jobtpu.home.lease_view import filesystem_line, filesystem_of

    try:
        with open("/proc/mounts") as f:
            mounts = f.read()
    except OSError:
        mounts = ""
    return filesystem_line(filesystem_of(os.path.realpath(home.root), mounts))


def show(home: Home) -> int:
    lines = lease_lines(home) or [("runner lease: none: passes run without a standby (start one on another box "
                                   "with `jobtpu manage --loop SECONDS --standby` or `jobtpu cron install --standby`)",
                                   False)]
    for line, _ in [*lines, filesystem_check(home)]:  # where one is planned: can a standby work here?
        say(printable(line))
    return 0


def handover(home: Home) -> int:
    """Ask the runner holding the lease to hand it over: its next round releases it and keeps it
    standing by; a standby takes the released lease at its next round, without waiting a lease."""
    from jobtpu.home import lease

    if not lease.in_use(home):
        raise ConfigError("this home has no runner lease to hand over",
                          hint="start a standby first: `jobtpu manage --loop SECONDS --standby` on another box")
    top, current = lease.current(home)
    if current is None:
        raise ConfigError(f"lease/{top} is damaged: nobody can hand it over",
                          hint="a standby takes a damaged lease over after one lease; `jobtpu runner` shows it")
    if current.released:
        note(f"the lease (token {top}) is already handed over; a standby takes it at its next round")
        return 0
    lease.ask_handover(home, lease.me().name)
    note(printable(f"asked {current.holder} to hand the lease over (token {top}): its next round releases it, "
                   "and a standby takes it over at its own"))
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "runner")
    p.add_argument("op", nargs="?", choices=("show", "handover"), default="show",
                   help="show (default): the lease, its runner and the standbys; handover: ask the runner to hand "
                   "the lease to a standby (a planned move)")
    p.set_defaults(func=lambda home, a: handover(home) if a.op == "handover" else show(home))

"""`jobtpu hold` and `jobtpu release`: keep queued jobs from starting, and let them start again."""

from __future__ import annotations

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.commands.select import (
    Selection,
    add_selection_args,
    announce,
    require_some,
    select_current,
    selection_from,
)
from jobtpu.home.layout import Home
from jobtpu.home.users import check_owners, known_user


def hold(home: Home, sel: Selection, release: bool, force: bool = False, dry_run: bool = False) -> int:
    """`hold`: queued jobs stay queued until released; `release`: they may start again."""
    from jobtpu.passes.session import locked_session

    verb = "release" if release else "hold"
    require_some(sel, verb)
    with locked_session(home) as session:
        chosen = select_current(home, session.state.jobs, sel, verb)
        if sel.ids:  # named by id: say why one is left as it is
            for job in chosen:
                if job.status != "queued":
                    note(f"job {job.id} is {job.status}; only a queued job is held or released")
        acting = [j for j in chosen if j.status == "queued" and j.held == release]
        check_owners(home, acting, known_user(home, None), force, verb, record=not dry_run)
        announce(verb, acting, sel, dry_run)
        if dry_run:
            return 0
        for job in acting:
            job.held = not release
            if not release:
                job.keeps = []  # a held job no longer keeps the machines it waited to resume on
            job.waiting = None if release else "held by hold"
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    for name, release in (("hold", False), ("release", True)):
        p = args.add_command(subparsers, name)
        add_selection_args(p, "the queued jobs", dry_run=True)
        p.set_defaults(func=lambda home, a, release=release: hold(home, selection_from(a), release, a.force,
                                                                  a.dry_run))

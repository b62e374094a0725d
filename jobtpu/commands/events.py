"""`jobtpu events`: what happened to jobs and machines (the home's events.jsonl), oldest first."""

from __future__ import annotations

from jobtpu.commands import args
from jobtpu.commands.common import emit_json
from jobtpu.home.layout import Home


def events(home: Home, follow: bool, job: int | None, machine: str | None, since: float | None,
           as_json: bool) -> int:
    from jobtpu.decide import events as ev
    from jobtpu.home.settings import viewer_settings, viewer_zone
    from jobtpu.tell import eventlog
    from jobtpu.tell.follow import follow as follow_log

    zone = None if as_json else viewer_zone(viewer_settings(home))  # times as the user's time_zone reads them
    found = follow_log(home.root, job, machine, since) if follow else eventlog.read(home.root, job, machine, since)
    for event in found:
        if as_json:
            emit_json(event.to_json())
        else:
            print(ev.render_line(event, zone), flush=follow)
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "events")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events until interrupted")
    p.add_argument("--job", type=int, metavar="ID", help="only this job's events")
    p.add_argument("--machine", metavar="M", help="only this machine's events")
    p.add_argument("--since", type=args.since, metavar="T", help="only events since T: a duration ago (10m, 2h, 1d) "
                   "or an ISO time (2026-01-31T12:00)")
    p.add_argument("--json", action="store_true", help="one JSON object per event")
    p.set_defaults(func=lambda home, a: events(home, a.follow, a.job, a.machine, a.since, a.json))

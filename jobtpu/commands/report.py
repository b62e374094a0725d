"""`jobtpu report`: what preemptions and failures cost each job (time per attempt, each interruption
split into its phases, work redone, goodput), as text, JSON or one HTML page."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.commands.select import Selection, add_selection_args, chosen_jobs, selection_from
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store

if TYPE_CHECKING:
    from jobtpu.decide.goodput import JobReport
    from jobtpu.schema.events import Event
    from jobtpu.schema.fleet import Fleet, Machine
    from jobtpu.schema.state import Job, State


def chips_of(machine: Machine | None, job: Job) -> tuple[int | None, str]:
    """What an attempt of `job` held on `machine`, and its unit: a TPU's chips from its type (v2/v3/
    v4/v5p names count TensorCores, two a chip; v5e/v6e names count chips); on a box, the GPUs the
    job asked for (`--req gpu=N`), not all the box has. None when unknown or none were asked."""
    if machine is None:
        return None, "chip"
    from jobtpu.fleet.drivers import driver_for

    whole = driver_for(machine).whole_accelerator(machine)
    if whole is not None:
        return whole
    from jobtpu.decide.fit import parse_request

    try:
        gpus = parse_request(job.req).resources.get("gpu")
    except JobtpuError:  # a request state.json holds that no longer parses: unknown, not a failed report
        gpus = None
    return gpus or None, "GPU"


def report_jobs(home: Home, state: State, sel: Selection) -> list[Job]:
    """The jobs the selection names, as `status` picks them (a cleaned job too, by id); without any
    selector, your jobs that ran."""
    chosen = chosen_jobs(home, sel, state)
    return chosen if sel.given else [j for j in chosen if j.attempts]


def job_reports(fleet: Fleet, jobs: list[Job], log: list[Event], now: float) -> list[JobReport]:
    """What each job's attempts and interruptions cost (also the dashboard's and `metrics`' figures)."""
    from jobtpu.decide import goodput
    from jobtpu.decide.progress import Progress
    from jobtpu.schema.msgspec_lib import msgspec

    reports = []
    for job in jobs:
        attempts = [goodput.AttemptRecord.from_json(msgspec.to_builtins(a), *chips_of(fleet.get(a.machine), job))
                    for a in job.attempts]
        progress = {a.n: Progress.from_json(a.progress) for a in job.attempts}
        reports.append(goodput.job_report(job.id, job.name, attempts, log, progress, now))
    return reports


def report(home: Home, sel: Selection, html: str | None, usage_since: float | None = None,
           as_json: bool = False) -> int:
    from jobtpu.schema.msgspec_lib import msgspec

    if as_json and (html is not None or usage_since is not None):
        raise JobtpuError("--json goes without --html and --usage",
                          hint="give --json alone for the costs as JSON, or drop it for the page or the usage tables")

    from jobtpu.home.machines import load_fleet
    from jobtpu.tell import eventlog
    from jobtpu.views import report as goodput_report

    state = Store(home).load()
    fleet = load_fleet(home)
    if usage_since is not None and not sel.given:  # a lead's view: every user's jobs, the cleaned ones too
        from jobtpu.views.listing import history

        jobs = [*state.jobs, *history(home)]
    else:
        jobs = report_jobs(home, state, sel)
    now = time.time()
    reports = job_reports(fleet, jobs, eventlog.read(home.root), now)
    if usage_since is not None:
        from jobtpu.views.usage import render_usage, usage

        users = {job.id: job.user for job in jobs}
        by_user, by_machine = usage(((users[r.job], r) for r in reports), usage_since, now)
        since_text = time.strftime("%Y-%m-%d %H:%M", time.localtime(usage_since))
        print(render_usage(by_user, by_machine, f"since {since_text}"))
        return 0
    if as_json:
        from jobtpu.schema.published import ReportDocument

        sys.stdout.buffer.write(msgspec.json.encode(ReportDocument(reports)) + b"\n")
        sys.stdout.flush()
        return 0
    if html is not None:
        path = Path(html).expanduser()
        path.write_text(goodput_report.render_html(reports, now=now), encoding="utf-8")
        note(f"wrote {path}")
        return 0
    print(goodput_report.render_text(reports) if reports else
          "no job matches the selection" if sel.given else "no job has run yet")
    return 0



def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "report")
    add_selection_args(p, "these jobs, whoever submitted them (default: your jobs that ran)")
    p.add_argument("--html", metavar="FILE", help="write one self-contained HTML page with a timeline instead")
    p.add_argument("--usage", action="store_true", help="chip-hours and GPU-hours used and lost to preemption, by "
                   "user and by machine (every user's jobs, cleaned ones too, unless a selector is given)")
    p.add_argument("--since", type=args.since, metavar="WHEN", help="with --usage: the period's start "
                   "(2026-12-01, 7d, 12h; default: 7 days ago)")
    p.add_argument("--json", action="store_true", help="each job's costs as JSON (its schema: "
                   "jobtpu/schemas/report.v1.schema.json)")
    p.set_defaults(func=lambda home, a: report(home, selection_from(a), a.html, _usage_since(a), a.json))


def _usage_since(parsed: argparse.Namespace) -> float | None:
    if parsed.since is not None and not parsed.usage:
        raise JobtpuError("--since goes with --usage", hint="`jobtpu report --usage --since 7d`")
    if not parsed.usage:
        return None
    return parsed.since if parsed.since is not None else time.time() - 7 * 86400

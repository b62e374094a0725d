"""What the dashboard's charts read (docs/reference/commands.md §2.29): the jobs of state.json and
history.jsonl, the event log, `report`'s figures and the sweep members' logs, handed to the pure
functions of charts.py and dashboard.py. Like every page, nothing here contacts a machine."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.web import charts, dashboard

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Fleet
    from jobtpu.schema.state import Job, State

SWEEP_LOG = 1024 * 1024  # a sweep member's log: its last MiB is read for its progress markers
SWEEP_MEMBERS = 64  # members a sweep's chart compares (the first this many)


def chips_counter(fleet: Fleet) -> dashboard.Chips:
    """How many chips (or GPUs) a job's current attempt holds, as `report` counts them."""
    from jobtpu.commands.report import chips_of

    def chips(job: Job) -> tuple[int | None, str]:
        machine = job.machine or (job.attempts[-1].machine if job.attempts else None)
        return chips_of(fleet.get(machine) if machine else None, job)
    return chips


def summary(home: Home, state: State, zone: Any, now: float) -> dashboard.Summary:
    from jobtpu.home.machines import load_fleet

    return dashboard.summary(state.jobs, chips_counter(load_fleet(home)), charts.day_start(now, zone))


def overview_charts(home: Home, state: State, zone: Any) -> list[charts.Chart]:
    """The charts page: chips in use per user over the last days, goodput and preemptions per day."""
    from jobtpu.commands.report import chips_of, job_reports
    from jobtpu.decide import events as ev
    from jobtpu.home.machines import load_fleet
    from jobtpu.tell import eventlog
    from jobtpu.views.listing import history

    now = time.time()
    since = charts.days_back(now, zone)[0]
    fleet = load_fleet(home)
    jobs = [j for j in (*state.jobs, *history(home)) if j.attempts]
    spans = []
    for job in jobs:
        for a in job.attempts:
            if a.started is None or (a.ended is not None and a.ended <= since):
                continue
            n, unit = chips_of(fleet.get(a.machine), job)
            if n:
                spans.append(charts.Span(job.user, float(a.started), None if a.ended is None else float(a.ended),
                                         n, unit))
    log = eventlog.read(home.root, since=since)
    recent = [j for j in jobs if (j.attempts[-1].ended or now) >= since]
    reports = job_reports(fleet, recent, log, now)
    preempted = [e.time for e in log if e.kind == ev.PREEMPTED]
    return [charts.chips_over_time(spans, since, now), charts.goodput_per_day(reports, preempted, now, zone)]


def job_timeline(report: Any) -> charts.Chart | None:
    """A job's timeline from its report (None before its first attempt started)."""
    return charts.timeline(report) if report is not None and report.attempts else None


def sweep_chart(home: Home, members: list[Job], metric: str | None) -> tuple[charts.Chart | None, list[str], str]:
    """A sweep's members compared on `metric` (default: the first the markers report), the metrics
    to choose from, and the one shown."""
    from jobtpu.home.logfiles import log_rel, read_end

    points: dict[str, list[dict[str, float]]] = {}
    for job in members[:SWEEP_MEMBERS]:
        if not job.attempts:
            continue
        try:
            data, _ = read_end(home.root, log_rel(job.id, job.attempts[-1].n, 0), SWEEP_LOG)
        except (OSError, JobtpuError):  # gone, unreadable, or a link or FIFO (UnsafePath): that member is
            continue  # left out of the chart, never the whole jobs page refused for it
        label = f"{job.id} " + " ".join(f"{k}={v}" for k, v in sorted(job.sweep_values.items()))
        points[label.strip()] = charts.marker_values(data.decode(errors="replace").splitlines())
    names = charts.metrics_in(points)
    chosen = metric if metric in names else (names[0] if names else "")
    return (charts.sweep_metric(points, chosen) if chosen else None), names, chosen

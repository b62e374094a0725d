"""The dashboard's charts as data (docs/reference/commands.md §2.29): pure functions from attempts,
reports, events and log lines to a `Chart`, which the page hands to static/charts.js (uPlot, shipped
in static/) as JSON in an attribute. No file, no clock: the caller reads and passes `now`.

A chart is uPlot's aligned form: one x list and, per series, one value per x (None where it has
none). `kind` says how charts.js draws it: "steps" (chips in use), "bars" and "line"."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.schema.job_report import JobReport

CHART_POINTS = 2000  # x values a chart draws at most (the newest): a page stays quick however long the history
DAYS = 14  # per-day charts: the last this many days


class Series(msgspec.Struct):
    label: str
    values: list[float | None]
    axis: str = "y"  # "y" (left) or "y2" (right): two figures of unlike scales on one chart


class Chart(msgspec.Struct):
    id: str
    title: str
    kind: str  # steps | bars | line | timeline
    x: list[float]
    series: list[Series]
    time_x: bool = True  # x holds epoch seconds (else a plain number: a step)

    def json(self) -> str:
        return msgspec.json.encode(self).decode()


class Span(msgspec.Struct):
    """An attempt's hold on accelerators: whose, from when until when (None: still running)."""

    user: str
    start: float
    end: float | None
    chips: int
    unit: str


def chips_over_time(spans: Iterable[Span], since: float, now: float) -> Chart:
    """Chips (GPUs apart) in use per user from `since` to `now`: a step series per user and unit,
    changing where an attempt started or ended."""
    changes: dict[float, dict[str, int]] = {}
    start_at: dict[str, int] = {}
    for s in spans:
        end = now if s.end is None else s.end
        if end <= since or s.chips <= 0:
            continue
        key = f"{s.user} ({s.unit}s)"
        if s.start <= since:
            start_at[key] = start_at.get(key, 0) + s.chips
        else:
            changes.setdefault(s.start, {}).setdefault(key, 0)
            changes[s.start][key] += s.chips
        if end < now:
            changes.setdefault(end, {}).setdefault(key, 0)
            changes[end][key] -= s.chips
    keys = sorted(set(start_at) | {k for c in changes.values() for k in c})
    xs = [since, *sorted(t for t in changes if since < t < now), now]
    level = {k: start_at.get(k, 0) for k in keys}
    values: dict[str, list[float | None]] = {k: [] for k in keys}
    for x in xs:
        for k, d in changes.get(x, {}).items():
            level[k] += d
        for k in keys:
            values[k].append(float(level[k]))
    xs, values = xs[-CHART_POINTS:], {k: v[-CHART_POINTS:] for k, v in values.items()}
    return Chart("chips", "chips and GPUs in use, per user", "steps", xs, [Series(k, values[k]) for k in keys])


def day_start(t: float, zone: Any) -> float:
    """The midnight (in `zone`; None: this machine's) that begins the day `t` falls in."""
    when = datetime.fromtimestamp(t, zone)
    return when.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def days_back(now: float, zone: Any, days: int = DAYS) -> list[float]:
    """The midnights of the last `days` days, oldest first, today's last."""
    today = datetime.fromtimestamp(day_start(now, zone), zone)
    return [(today - timedelta(days=i)).replace(hour=0).timestamp() for i in range(days - 1, -1, -1)]


def goodput_per_day(reports: Sequence[JobReport], preempted_at: Iterable[float], now: float, zone: Any) -> Chart:
    """Per day: the goodput of the jobs whose last attempt ended that day (a running one: today), as
    `report` figures it (productive over total time), and the preemptions the event log holds."""
    days = days_back(now, zone)
    productive = dict.fromkeys(days, 0.0)
    total = dict.fromkeys(days, 0.0)
    preemptions = dict.fromkeys(days, 0.0)
    for r in reports:
        if not r.attempts:
            continue
        last = r.attempts[-1].ended
        day = day_start(now if last is None else last, zone)
        if day in total:
            productive[day] += r.productive
            total[day] += r.total
    for t in preempted_at:
        day = day_start(t, zone)
        if day in preemptions:
            preemptions[day] += 1
    goodput = [round(100 * productive[d] / total[d], 1) if total[d] > 0 else None for d in days]
    return Chart("goodput", "goodput (%) and preemptions per day", "bars", days,
                 [Series("goodput %", goodput), Series("preemptions", [preemptions[d] for d in days], "y2")])


# The phases `report` splits an interruption into, in their order (decide/goodput.py's definitions).
PHASES = (("detection", "detection"), ("recreate", "delete+create"), ("setup", "setup"), ("launch", "launch"))


def timeline(report: JobReport) -> Chart:
    """A job's attempts and, between them, each interruption split as `report` splits it: one series
    per kind of time (running, then each phase), 1 while that kind of time lasts, 0 otherwise."""
    segments: list[tuple[float, float, str]] = []
    for a in report.attempts:
        segments.append((a.run_from, a.run_until, "running"))
    for gap in report.interruptions:
        at = gap.lost_at
        for field, label in PHASES:
            took = float(getattr(gap, field))
            if took > 0:
                segments.append((at, at + took, label))
                at += took
    labels = ["running", *(label for _, label in PHASES)]
    xs = sorted({t for a, b, _ in segments for t in (a, b)})
    series = []
    for label in labels:
        mine = [(a, b) for a, b, kind in segments if kind == label]
        series.append(Series(label, [1.0 if any(a <= x < b for a, b in mine) else 0.0 for x in xs]))
    return Chart("timeline", f"job {report.job}: attempts and interruptions", "timeline", xs, series)


# A progress marker's other numbers: `JOBTPU_PROGRESS step=1200 loss=0.42 acc=0.91`.
_MARKER = re.compile(r"JOBTPU_PROGRESS\b(?P<rest>.*)")
_NUMBER = re.compile(r"\b([A-Za-z_][A-Za-z0-9_.]{0,40})=(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?=\s|$)")
NOT_METRICS = frozenset({"step", "checkpoint"})


def marker_values(lines: Iterable[str]) -> list[dict[str, float]]:
    """Each progress marker's numbers (its step among them), in the log's order."""
    out = []
    for line in lines:
        found = _MARKER.search(line)
        if found:
            numbers = {k: float(v) for k, v in _NUMBER.findall(found.group("rest"))}
            if "step" in numbers:
                out.append(numbers)
    return out


def metrics_in(members: dict[str, list[dict[str, float]]]) -> list[str]:
    """The metric names the members' markers report beside step and checkpoint, sorted."""
    return sorted({k for points in members.values() for p in points for k in p} - NOT_METRICS)


def sweep_metric(members: dict[str, list[dict[str, float]]], metric: str) -> Chart:
    """The sweep's members compared: `metric` against the step, one line per member."""
    steps = sorted({p["step"] for points in members.values() for p in points if metric in p})[-CHART_POINTS:]
    series = []
    for label, points in members.items():
        at = {p["step"]: p[metric] for p in points if metric in p}
        series.append(Series(label, [at.get(s) for s in steps]))
    return Chart("sweep", f"{metric} by step", "line", steps, series, time_x=False)

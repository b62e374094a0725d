"""The goodput report for people: plain lines for a terminal, or one self-contained HTML page with a
timeline per machine and each job's numbers. Every name from a job or a machine is made safe."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime

from jobtpu.render.text import printable
from jobtpu.schema.job_report import JobReport
from jobtpu.schema.state import FINISHED


def duration(seconds: float | None) -> str:
    """2h03m, 4m05s, 12s; ? when unknown."""
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _percent(value: float | None) -> str:
    return "?" if value is None else f"{100 * value:.1f}%"


def _chip_hours(chip_seconds: float | None, unit: str = "chip") -> str:
    """`1.5 GPU-h`, `0.25 chip-h`, `<0.01 chip-h` (a short job's is not 0), `? chip-h` when unknown."""
    if chip_seconds is None:
        return f"? {unit}-h"
    hours = chip_seconds / 3600
    amount = f"{hours:.1f}" if hours >= 1 else f"{hours:.2f}" if hours >= 0.01 or hours == 0 else "<0.01"
    return f"{amount} {unit}-h"


def render_text(reports: Sequence[JobReport]) -> str:
    """Plain lines, terminal-safe."""
    out = []
    for r in reports:
        name = f" {r.name!r}" if r.name else ""
        out.append(f"job {r.job}{name}: goodput {_percent(r.goodput)} "
                   f"(productive {duration(r.productive)} of {duration(r.total)})")
        for a in r.attempts:
            where = a.machine if a.slices == 1 else f"{a.slices} slices from {a.machine} ({a.slice_hours:.2f} slice-hours)"
            out.append(f"  attempt {a.n} on {where}: wall {duration(a.wall)}, accelerator "
                       f"{_chip_hours(a.accelerator, a.unit)}, ran {duration(a.running)}, {a.outcome or 'running'}")
        for g in r.interruptions:
            if g.by_hand:
                out.append(f"  after attempt {g.after} (killed): {duration(g.total)} until it ran again, "
                           "waiting on a person (not counted)")
                continue
            steps = f" ({g.redone_steps} steps)" if g.redone_steps is not None else ""
            out.append(f"  interruption after attempt {g.after} ({g.machine_from} -> {g.machine_to}): "
                       f"{duration(g.total)} = detection {duration(g.detection)}, delete+create "
                       f"{duration(g.recreate)}, setup {duration(g.setup)}, launch {duration(g.launch)}; "
                       f"work redone {duration(g.redone)}{steps}")
            if g.slices:  # a gang: every slice waited the whole interruption, each for its own reason
                each = ", ".join(f"{s.machine} {'lost, back' if s.lost else 'kept, ready'} after "
                                 f"{duration(max(0.0, s.ready_at - g.lost_at))}" for s in g.slices)
                out.append(f"    {len(g.slices)} slices, {g.slice_hours_lost:.2f} slice-hours lost: {each}")
        if r.redone_unknown:
            out.append("  (work redone unknown where the job reported no progress or checkpoint: "
                       "print JOBTPU_PROGRESS step=N checkpoint=N)")
    return "\n".join(printable(line) for line in out)


_CSS = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
.timeline{border:1px solid #ccc;padding:8px;width:100%;box-sizing:border-box}
.row{display:flex;align-items:stretch;border-top:1px solid #eee}
.label{width:160px;flex:none;padding:4px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.lane{position:relative;flex:1;min-height:22px}
.bar{position:absolute;height:16px;min-width:3px;border-radius:2px;background:#3b82f6;
     overflow:hidden;font-size:11px;line-height:16px;padding-left:3px;box-sizing:border-box;color:#fff;white-space:nowrap}
.bar.finished{background:#16a34a}.bar.failed{background:#dc2626}.bar.running{background:#3b82f6}
.bar.interrupted{background:#f59e0b}
.mark{position:absolute;top:0;bottom:0}
.mark.preempted{width:3px;margin-left:-1px;background:#7f1d1d}
.mark.recreate{background:repeating-linear-gradient(45deg,#fca5a5 0 4px,transparent 4px 8px);min-width:3px}
.mark.setup{background:repeating-linear-gradient(45deg,#c4b5fd 0 4px,transparent 4px 8px);min-width:3px}
.axis{display:flex;justify-content:space-between;margin-left:169px;color:#666;font-size:12px}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:middle}
table{border-collapse:collapse;margin-top:8px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
"""


def render_html(reports: Sequence[JobReport], title: str = "jobtpu report", now: float | None = None) -> str:
    """One self-contained page (no script, no external URL): a timeline with a row per machine and a
    bar per attempt (`data-attempt="job 3 attempt 1"`), marks for preemptions, recreations and
    setups, then each job's numbers. Every name from a job or a machine is escaped."""
    e = html.escape
    spans = [(a.started, a.ended if a.ended is not None else (now or a.started + a.wall))
             for r in reports for a in r.attempts]
    start = min((s for s, _ in spans), default=0.0)
    end = max((t for _, t in spans), default=start + 1.0)
    width = max(end - start, 1e-9)

    def x(t: float) -> str:
        return f"{100 * min(max(t - start, 0.0), width) / width:.3f}%"

    def w(a: float, b: float) -> str:
        return f"{100 * max(min(b, end) - max(a, start), 0.0) / width:.3f}%"

    machines: dict[str, list[str]] = {}
    tracks: dict[str, list[float]] = {}  # per machine, where each track's last bar ends
    for r in reports:
        for a in sorted(r.attempts, key=lambda a: a.started):
            a_end = a.ended if a.ended is not None else a.started + a.wall
            lane = tracks.setdefault(a.machine, [])
            track = next((i for i, busy in enumerate(lane) if busy <= a.started), len(lane))
            lane[track:track + 1] = [a_end]  # jobs side by side on one machine get a track each
            interrupted = any(g.after == a.n for g in r.interruptions)
            kind = "running" if a.ended is None else "interrupted" if interrupted else (
                "finished" if a.outcome == FINISHED else "failed")
            label = f"job {r.job} attempt {a.n}"
            tip = f"{label}{' ' + r.name if r.name else ''}: {a.outcome or 'running'}, wall {duration(a.wall)}"
            machines.setdefault(a.machine, []).append(
                f'<div class="bar {kind}" data-attempt="{e(label)}" data-outcome="{e(a.outcome or "running")}" '
                f'title="{e(tip)}" style="left:{x(a.started)};width:{w(a.started, a_end)};top:{3 + 20 * track}px">'
                f"{e(label)}</div>")
        for m in r.marks:
            machines.setdefault(m.machine, [])
            tip = f"{m.kind} {_clock(m.start)}" + (f" – {_clock(m.end)}" if m.end > m.start else "")
            style = f"left:{x(m.start)}" + (f";width:{w(m.start, m.end)}" if m.kind != "preempted" else "")
            mark = f'<div class="mark {m.kind}" data-mark="{e(m.kind)}" title="{e(tip)}" style="{style}"></div>'
            if mark not in machines[m.machine]:  # two jobs on one machine share its marks
                machines[m.machine].insert(0, mark)
    rows = "\n".join(f'<div class="row" data-machine="{e(name)}"><div class="label" title="{e(name)}">{e(name)}</div>'
                     f'<div class="lane" style="height:{6 + 20 * max(1, len(tracks.get(name, [])))}px">'
                     f'{"".join(items)}</div></div>' for name, items in sorted(machines.items()))
    legend = ('<p class="legend"><span><i style="background:#16a34a"></i>finished</span>'
              '<span><i style="background:#f59e0b"></i>interrupted</span><span><i style="background:#dc2626"></i>failed</span>'
              '<span><i style="background:#3b82f6"></i>running</span><span><i style="background:#7f1d1d"></i>preempted</span>'
              '<span><i style="background:#fca5a5"></i>delete + create</span><span><i style="background:#c4b5fd"></i>setup</span></p>')
    tables = "\n".join(_job_table(r) for r in reports)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"<style>{_CSS}</style></head><body>\n<h1>{e(title)}</h1>\n{legend}\n"
            f'<div class="axis"><span>{_clock(start)}</span><span>{_clock(end)}</span></div>\n'
            f'<div class="timeline">\n{rows}\n</div>\n{tables}\n</body></html>\n')


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _job_table(r: JobReport) -> str:
    e = html.escape
    head = f"job {r.job}" + (f" {r.name}" if r.name else "")
    rows = "".join(f"<tr><td>attempt {a.n}</td><td>{e(a.machine)}</td><td>{duration(a.wall)}</td>"
                   f"<td>{_chip_hours(a.accelerator, a.unit)}</td><td>{duration(a.running)}</td><td>{e(a.outcome or 'running')}</td></tr>"
                   for a in r.attempts)
    gaps = "".join(f"<tr><td>after attempt {g.after}</td><td>{duration(g.total)}</td><td>{duration(g.detection)}</td>"
                   f"<td>{duration(g.recreate)}</td><td>{duration(g.setup)}</td><td>{duration(g.launch)}</td>"
                   f"<td>{duration(g.redone)}</td></tr>" for g in r.interruptions)
    gap_table = ("<table><tr><th>interruption</th><th>total</th><th>detection</th><th>delete+create</th>"
                 f"<th>setup</th><th>launch</th><th>work redone</th></tr>{gaps}</table>") if gaps else ""
    return (f'<h2 data-job="{r.job}">{e(head)}: goodput {_percent(r.goodput)} (productive {duration(r.productive)} '
            f"of {duration(r.total)})</h2><table><tr><th>attempt</th><th>machine</th><th>wall</th><th>accelerator</th>"
            f"<th>ran</th><th>outcome</th></tr>{rows}</table>{gap_table}")

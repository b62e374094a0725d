"""Goodput: what preemptions and failures cost a job, from its attempts, the event log and the
progress it reported. Pure functions: no files, no clock (the caller passes `now`).

Wiring (the only calls the pass and the CLI make):

- submit `--progress REGEX`: `compile_progress(text)` validates it (ValueError, one line); the job keeps
  the text. A pass, for each running attempt, feeds the new complete log lines of worker 0 to
  `scan(lines, now, regex, record)`, which returns the attempt's updated `Progress` (store
  `record.to_json()` with the attempt, e.g. as `progress`; `Progress.from_json` reads it back).
- `jobtpu report [ID | --tag T] [--html FILE]`: for each job,
  `job_report(job.id, job.name, [AttemptRecord.from_json(a.to_json()) for a in job.attempts],
  events.read(home.root), {a.n: Progress.from_json(a.progress) for a in ...}, now=time.time())`
  (`chips` of an attempt, when known, is its machine's accelerator chip count), then print
  `render_text(reports)` or write `render_html(reports)` (write it with home.write_atomic or a plain
  open: it is the user's file).

Definitions (all times in seconds):

- An attempt's *wall time* is ended − started (now, while it runs); its *accelerator time* is wall
  time × the chips (a TPU's) or GPUs (what the job asked of a box) it held, in `unit` (unknown when
  the count is).
- An attempt *runs* from its first `job_running` event (else its start) until it ended; when it was
  interrupted (another attempt followed it), only until it was last known alive: the later of
  `last_alive` (the last pass that saw it running) and its last progress report, else its end.
- An *interruption* is the time between an attempt that did not finish and the next one: from the
  moment it was last known alive until the next attempt runs, split at the milestones the event log
  holds, each clamped into the interruption, a missing one taking no time:
  detection (until the first `preempted` event of its job or machine, else until the attempt was
  marked ended), delete+create (until the last `tpu_create_done` on the next attempt's machine),
  setup (until the last `tpu_setup_done` there), launch (the rest: waiting in the queue, unpacking,
  starting).
- The *work redone* after an interruption: when the next attempt resumes, the steps between the last
  checkpoint and the last step the interrupted attempt reported, at the rate that attempt made
  progress (steps since it started, over its running time); when it reruns, everything the
  interrupted attempt ran. Never more than the next attempt ran. Unknown (and counted as 0) when the
  job reports no progress, or resumes without ever reporting a checkpoint.
- *Productive* time = the sum of the attempts' running times − the work redone.
  *Total* = from the first attempt's start until the last one ended (now, while it runs), less the
  interruptions after an attempt a person killed: until a person resumes it, the job waits on them,
  which is no cost of an interruption (like the queue before the first attempt).
  *Goodput* = productive / total. Time queued before the first attempt is not counted: it is the
  fleet's load, not what interruptions cost.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobtpu.tell import events as ev
from jobtpu.tell.events import Event
from jobtpu.views.text import printable

FINISHED = "finished"
KILLED = "killed"  # an attempt a person stopped (`jobtpu kill`): a pass never kills on its own
# What happens to a machine, whichever job's pass reported it (a preemption seen through job 4 ended job 3 too).
_MACHINE_KINDS = frozenset({ev.PREEMPTED, ev.MACHINE_STATE, ev.TPU_DELETE_STARTED, ev.TPU_DELETE_DONE,
                            ev.TPU_CREATE_STARTED, ev.TPU_CREATE_DONE, ev.TPU_CREATE_FAILED, ev.TPU_SETUP_STARTED,
                            ev.TPU_SETUP_DONE, ev.TPU_SETUP_FAILED})

# ---- progress -----------------------------------------------------------------------------------------

_MARKER = re.compile(r"JOBTPU_PROGRESS\b(?P<rest>.*)")
_FIELD = re.compile(r"\b(step|checkpoint)=(\d+)\b")


PATTERN_LIMIT = 1000  # characters of a --progress pattern (docs/reference/commands.md §2.2.8)
MATCH_LIMIT = 4096  # characters of a log line a --progress pattern is matched against (its start)


class ProgressPattern:
    """A `--progress` pattern compiled by RE2 (linear time in the line, docs/design.md "Progress
    patterns"): never Python's backtracking `re`. Built only by `compile_progress`."""

    def __init__(self, regex: Any, text: str) -> None:
        self._regex, self.text = regex, text
        self.named = bool(set(regex.groupindex) & {"step", "checkpoint"})

    def search(self, line: str) -> tuple[int | None, int | None] | None:
        """(step, checkpoint) in the first MATCH_LIMIT characters of `line`, or None."""
        match = self._regex.search(line[:MATCH_LIMIT])
        if not match:
            return None
        if self.named:
            groups = match.groupdict()
            return _int(groups.get("step")), _int(groups.get("checkpoint"))
        return _int(match.group(1)), None


def compile_progress(text: str) -> ProgressPattern:
    """A user's `--progress` regex in RE2's syntax: one capturing group (the step), or named groups
    `step` and/or `checkpoint`. ValueError with one line otherwise (a backreference or lookaround
    included: RE2 cannot take them, and they are what makes a match take exponential time)."""
    import re2  # only a pass or a submit with a pattern matches one: `status` never loads it

    if len(text) > PATTERN_LIMIT:
        raise ValueError(f"--progress is {len(text)} characters, over the limit of {PATTERN_LIMIT}")
    options = re2.Options()
    options.log_errors = False  # the error comes back to us as one line; RE2 would print its own to stderr
    try:
        regex = re2.compile(text, options)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(f"--progress {text!r} is not a valid regular expression for RE2 ({why}; "
                         "no backreferences or lookarounds)") from None
    named = set(regex.groupindex) & {"step", "checkpoint"}
    if not named and regex.groups != 1:
        raise ValueError(f"--progress {text!r} must capture the step number in one group, like 'step (\\d+)', "
                         "or name groups (?P<step>…) and (?P<checkpoint>…)")
    return ProgressPattern(regex, text)


def progress_of(line: str, regex: ProgressPattern | None = None) -> tuple[int | None, int | None] | None:
    """(step, checkpoint) a log line reports, either possibly None; None for a line that reports
    nothing. `JOBTPU_PROGRESS step=1200 checkpoint=1000` always counts; `regex` adds the job's own."""
    marker = _MARKER.search(line)
    if marker:
        found = dict(_FIELD.findall(marker.group("rest")))
        if found:
            return _int(found.get("step")), _int(found.get("checkpoint"))
    if regex is None:
        return None
    mine = regex.search(line)
    if mine is None:
        return None
    step, checkpoint = mine
    return None if step is None and checkpoint is None else (step, checkpoint)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass
class Progress:
    """The last progress one attempt reported, and when the pass saw it."""

    step: int | None = None
    step_at: float | None = None
    checkpoint: int | None = None
    checkpoint_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, doc: Any) -> Progress:
        if not isinstance(doc, dict):
            return cls()
        return cls(**{k: doc[k] for k in ("step", "step_at", "checkpoint", "checkpoint_at")
                      if isinstance(doc.get(k), int | float) and not isinstance(doc.get(k), bool)})


def scan(lines: Iterable[str], now: float, regex: ProgressPattern | None = None,
         record: Progress | None = None) -> Progress:
    """`record` updated with what the new complete `lines` report (seen at `now`)."""
    result = Progress(**(record.__dict__ if record else {}))
    for line in lines:
        found = progress_of(line, regex)
        if found is None:
            continue
        step, checkpoint = found
        if step is not None:
            result.step, result.step_at = step, now
        if checkpoint is not None:
            result.checkpoint, result.checkpoint_at = checkpoint, now
    return result


# ---- the report ---------------------------------------------------------------------------------------

@dataclass
class AttemptRecord:
    n: int
    machine: str
    started: float | None = None
    ended: float | None = None
    outcome: str | None = None
    workers: int = 1
    chips: int | None = None  # accelerator chips (or GPUs) the attempt held, all workers together
    unit: str = "chip"  # what `chips` counts: "chip" (a TPU's) or "GPU"
    resume: bool = False
    last_alive: float | None = None

    @classmethod
    def from_json(cls, doc: dict[str, Any], chips: int | None = None, unit: str = "chip") -> AttemptRecord:
        known = {k: doc[k] for k in ("n", "machine", "started", "ended", "outcome", "workers", "resume", "last_alive")
                 if k in doc}
        return cls(**known, chips=chips if chips is not None else doc.get("chips"), unit=unit)


@dataclass
class AttemptCost:
    n: int
    machine: str
    outcome: str | None
    started: float
    ended: float | None  # None: still running
    wall: float
    accelerator: float | None  # chip-seconds (GPU-seconds when unit is "GPU")
    running: float  # seconds it ran (see the module's definitions)
    run_from: float
    run_until: float
    unit: str = "chip"


@dataclass
class Interruption:
    after: int  # the attempt interrupted
    before: int  # the attempt that followed
    machine_from: str
    machine_to: str
    lost_at: float
    back_at: float
    detection: float
    recreate: float
    setup: float
    launch: float
    redone_steps: int | None
    redone: float | None  # seconds of work done again; None: unknown
    by_hand: bool = False  # after an attempt a person killed: waiting on them, not counted in the total

    @property
    def total(self) -> float:
        return self.back_at - self.lost_at


@dataclass
class Mark:
    machine: str
    kind: str  # preempted | recreate | setup
    start: float
    end: float


@dataclass
class JobReport:
    job: int
    name: str
    attempts: list[AttemptCost]
    interruptions: list[Interruption]
    total: float
    productive: float
    marks: list[Mark] = field(default_factory=list)
    redone_unknown: bool = False

    @property
    def goodput(self) -> float | None:
        return self.productive / self.total if self.total > 0 else None


def job_report(job: int, name: str, attempts: Sequence[AttemptRecord], log: Sequence[Event],
               progress: dict[int, Progress], now: float) -> JobReport:
    """What the job's attempts cost (see the module's definitions). `log` may hold every event of
    the home: the job's and its machines' are picked out."""
    tried = sorted((a for a in attempts if a.started is not None), key=lambda a: a.n)
    machines = {a.machine for a in tried}
    mine = sorted((e for e in log if e.job == job or (e.machine in machines and e.kind in _MACHINE_KINDS)),
                  key=lambda e: e.time)
    costs: list[AttemptCost] = []
    gaps: list[Interruption] = []
    for i, attempt in enumerate(tried):
        following = tried[i + 1] if i + 1 < len(tried) else None
        costs.append(_cost(job, attempt, following is not None, mine, progress.get(attempt.n), now))
    for i in range(len(tried) - 1):
        gaps.append(_interruption(job, tried, i, costs, mine, progress))
    if not costs:
        return JobReport(job, name, [], [], 0.0, 0.0)
    total = (costs[-1].ended if costs[-1].ended is not None else now) - costs[0].started
    total -= sum(g.total for g in gaps if g.by_hand)
    redone = sum(g.redone or 0.0 for g in gaps)
    productive = max(0.0, sum(c.running for c in costs) - redone)
    window = (costs[0].started, costs[-1].ended if costs[-1].ended is not None else now)
    return JobReport(job, name, costs, gaps, total, productive, _marks(mine, machines, window),
                     any(g.redone is None for g in gaps))


def _running_event(job: int, n: int, log: Sequence[Event]) -> float | None:
    for e in log:
        if e.kind == ev.JOB_RUNNING and e.job == job and e.attempt == n:
            return e.time
    return None


def _last_alive(attempt: AttemptRecord, progress: Progress | None) -> float:
    end = attempt.ended if attempt.ended is not None else float("inf")
    signs = [t for t in (attempt.last_alive, progress.step_at if progress else None,
                         progress.checkpoint_at if progress else None) if t is not None and t <= end]
    if signs:
        return max(signs)
    return attempt.ended if attempt.ended is not None else float(attempt.started or 0.0)


def _cost(job: int, attempt: AttemptRecord, interrupted: bool, log: Sequence[Event],
          progress: Progress | None, now: float) -> AttemptCost:
    started = float(attempt.started or 0.0)
    end = attempt.ended if attempt.ended is not None else now
    run_from = min(max(_running_event(job, attempt.n, log) or started, started), end)
    run_until = max(run_from, min(_last_alive(attempt, progress), end)) if interrupted else end
    wall = max(0.0, end - started)
    accelerator = wall * attempt.chips if attempt.chips else None
    return AttemptCost(attempt.n, attempt.machine, attempt.outcome, started, attempt.ended, wall, accelerator,
                       run_until - run_from, run_from, run_until, attempt.unit)


def _first(log: Sequence[Event], kinds: set[str], start: float, end: float, where: set[str], job: int) -> float | None:
    for e in log:
        if e.kind in kinds and start <= e.time <= end and (e.machine in where or e.job == job):
            return e.time
    return None


def _last(log: Sequence[Event], kind: str, start: float, end: float, machine: str) -> float | None:
    found = None
    for e in log:
        if e.kind == kind and start <= e.time <= end and e.machine == machine:
            found = e.time
    return found


def _interruption(job: int, tried: Sequence[AttemptRecord], i: int, costs: Sequence[AttemptCost],
                  log: Sequence[Event], progress: dict[int, Progress]) -> Interruption:
    was, now_ = tried[i], tried[i + 1]
    lost_at, back_at = costs[i].run_until, max(costs[i + 1].run_from, costs[i].run_until)
    ended = min(max(was.ended if was.ended is not None else lost_at, lost_at), back_at)
    detected = _or(_first(log, {ev.PREEMPTED}, lost_at, back_at, {was.machine}, job), ended)
    created = _or(_last(log, ev.TPU_CREATE_DONE, detected, back_at, now_.machine), detected)
    set_up = _or(_last(log, ev.TPU_SETUP_DONE, created, back_at, now_.machine), created)
    steps, redone = _redone(tried, i, costs, progress)
    return Interruption(was.n, now_.n, was.machine, now_.machine, lost_at, back_at,
                        detection=detected - lost_at, recreate=created - detected, setup=set_up - created,
                        launch=back_at - set_up, redone_steps=steps, redone=redone, by_hand=was.outcome == KILLED)


def _or(found: float | None, otherwise: float) -> float:
    return otherwise if found is None else found


def _start_step(tried: Sequence[AttemptRecord], i: int, progress: dict[int, Progress]) -> int:
    """The step attempt i started from: the checkpoint it resumed from, else 0."""
    if i == 0 or not tried[i].resume:
        return 0
    return _checkpoint_after(tried, i - 1, progress) or 0


def _checkpoint_after(tried: Sequence[AttemptRecord], i: int, progress: dict[int, Progress]) -> int | None:
    """The checkpoint attempt i left behind: its last one, else the one it started from."""
    mine = progress.get(tried[i].n)
    if mine is not None and mine.checkpoint is not None:
        return mine.checkpoint
    if i == 0 or not tried[i].resume:
        return None
    return _checkpoint_after(tried, i - 1, progress)


def _redone(tried: Sequence[AttemptRecord], i: int, costs: Sequence[AttemptCost],
            progress: dict[int, Progress]) -> tuple[int | None, float | None]:
    """(steps, seconds) of attempt i's work that attempt i+1 does again."""
    nxt = costs[i + 1].running
    if not tried[i + 1].resume:
        done = progress.get(tried[i].n)
        return (done.step if done else None), min(costs[i].running, nxt)
    mine = progress.get(tried[i].n)
    if mine is None or mine.step is None:
        return None, None
    checkpoint = _checkpoint_after(tried, i, progress)
    if checkpoint is None:
        return None, None
    steps = max(0, mine.step - checkpoint)
    start = _start_step(tried, i, progress)
    rate = (mine.step - start) / costs[i].running if costs[i].running > 0 and mine.step > start else None
    if rate is None:
        return steps, None if steps else 0.0
    return steps, min(steps / rate, nxt)


def _marks(log: Sequence[Event], machines: set[str], window: tuple[float, float]) -> list[Mark]:
    """Preemptions, recreations (first delete or create started → create done) and setups on the
    job's machines, for the timeline."""
    marks = []
    opened: dict[tuple[str, str], float] = {}
    for e in log:
        if e.machine not in machines:
            continue
        machine = e.machine or ""
        if e.kind == ev.PREEMPTED:
            marks.append(Mark(machine, "preempted", e.time, e.time))
        elif e.kind in (ev.TPU_DELETE_STARTED, ev.TPU_CREATE_STARTED):
            opened.setdefault((machine, "recreate"), e.time)
        elif e.kind in (ev.TPU_CREATE_DONE, ev.TPU_CREATE_FAILED):
            start = opened.pop((machine, "recreate"), e.time)
            marks.append(Mark(machine, "recreate", start, e.time))
        elif e.kind == ev.TPU_SETUP_STARTED:
            opened.setdefault((machine, "setup"), e.time)
        elif e.kind in (ev.TPU_SETUP_DONE, ev.TPU_SETUP_FAILED):
            marks.append(Mark(machine, "setup", opened.pop((machine, "setup"), e.time), e.time))
    for (machine, kind), start in opened.items():  # still going at the end of the log
        marks.append(Mark(machine, kind, start, window[1]))
    return [m for m in marks if m.end >= window[0] and m.start <= window[1]]


# ---- rendering -----------------------------------------------------------------------------------------

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
            out.append(f"  attempt {a.n} on {a.machine}: wall {duration(a.wall)}, accelerator "
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

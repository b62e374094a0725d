"""Goodput: what preemptions and failures cost a job, from its attempts, the event log and the
progress it reported (progress.py reads it from the logs; report.py renders the result). Pure
functions: no files, no clock (the caller passes `now`).

Wiring (the only calls the pass and the CLI make):

- submit `--progress REGEX`: `progress.compile_progress(text)` validates it (ValueError, one line); the job keeps
  the text. A pass, for each running attempt, feeds the new complete log lines of worker 0 to
  `progress.scan(lines, now, regex, record)`, which returns the attempt's updated `Progress` (store
  `record.to_json()` with the attempt, e.g. as `progress`; `Progress.from_json` reads it back).
- `jobtpu report [ID | --tag T] [--html FILE]`: for each job,
  `job_report(job.id, job.name, [AttemptRecord.from_json(a.to_json()) for a in job.attempts],
  eventlog.read(home.root), {a.n: Progress.from_json(a.progress) for a in ...}, now=time.time())`
  (`chips` of an attempt, when known, is its machine's accelerator chip count), then print
  `report.render_text(reports)` or write `report.render_html(reports)` (write it with home.write_atomic or a plain
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

from collections.abc import Sequence
from typing import Any

from jobtpu.decide import events as ev
from jobtpu.decide.events import Event
from jobtpu.decide.progress import Progress
from jobtpu.schema.job_report import AttemptCost, Interruption, JobReport, Mark, SliceGap
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import KILLED  # KILLED: an attempt a person stopped (a pass never kills)

# What happens to a machine, whichever job's pass reported it (a preemption seen through job 4 ended job 3 too).
_MACHINE_KINDS = frozenset({ev.PREEMPTED, ev.MACHINE_STATE, ev.TPU_DELETE_STARTED, ev.TPU_DELETE_DONE,
                            ev.TPU_CREATE_STARTED, ev.TPU_CREATE_DONE, ev.TPU_CREATE_FAILED, ev.TPU_SETUP_STARTED,
                            ev.TPU_SETUP_DONE, ev.TPU_SETUP_FAILED})

class AttemptRecord(msgspec.Struct):
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
    gang: list[str] = msgspec.field(default_factory=list)  # a gang's machines, slice order ([] for one slice)

    @property
    def machines(self) -> list[str]:
        return self.gang or [self.machine]

    @classmethod
    def from_json(cls, doc: dict[str, Any], chips: int | None = None, unit: str = "chip") -> AttemptRecord:
        """`chips`: one machine's (a gang's attempt holds as many on each of its slices)."""
        known = {k: doc[k] for k in ("n", "machine", "started", "ended", "outcome", "workers", "resume", "last_alive",
                                     "gang") if k in doc}
        if chips is not None and known.get("gang"):
            chips *= len(known["gang"])
        return cls(**known, chips=chips if chips is not None else doc.get("chips"), unit=unit)


def job_report(job: int, name: str, attempts: Sequence[AttemptRecord], log: Sequence[Event],
               progress: dict[int, Progress], now: float) -> JobReport:
    """What the job's attempts cost (see the module's definitions). `log` may hold every event of
    the home: the job's and its machines' are picked out."""
    tried = sorted((a for a in attempts if a.started is not None), key=lambda a: a.n)
    machines = {m for a in tried for m in a.machines}
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
                       run_until - run_from, run_from, run_until, attempt.unit, len(attempt.machines))


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
    detected = _or(_first(log, {ev.PREEMPTED}, lost_at, back_at, set(was.machines), job), ended)
    # A gang comes back when its last slice does: each slice's own create and setup, the latest of them.
    ready = {m: _ready_at(log, detected, back_at, m) for m in now_.machines}
    slowest = max(now_.machines, key=lambda m: ready[m][1])
    created, set_up = ready[slowest]
    steps, redone = _redone(tried, i, costs, progress)
    slices = [SliceGap(m, _first(log, {ev.PREEMPTED}, lost_at, back_at, {m}, -1) is not None or ready[m][0] > detected,
                       ready[m][1]) for m in now_.machines] if now_.gang else []
    return Interruption(was.n, now_.n, was.machine, now_.machine, lost_at, back_at,
                        detection=detected - lost_at, recreate=created - detected, setup=set_up - created,
                        launch=back_at - set_up, redone_steps=steps, redone=redone, by_hand=was.outcome == KILLED,
                        slices=slices)


def _ready_at(log: Sequence[Event], detected: float, back_at: float, machine: str) -> tuple[float, float]:
    """When the machine was created again and set up after the interruption was detected (each the
    time before it when it took none)."""
    created = _or(_last(log, ev.TPU_CREATE_DONE, detected, back_at, machine), detected)
    return created, _or(_last(log, ev.TPU_SETUP_DONE, created, back_at, machine), created)


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


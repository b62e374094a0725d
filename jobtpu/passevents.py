"""What a manage pass tells after it saved its result: the events it saw (appended to events.jsonl),
the notifications they mean (notify.py), each attempt's progress and last sign of life (for `jobtpu
report`), and when the pass ran (state.json's `last_pass`, for the freshness line of `status`).

Events are derived by comparing each job and machine record as the pass read them with what it saved,
so no decision code has to remember to report anything: whatever changed a record is seen here.

The pass calls `before_decide` (remembers the records as read) and `after_pass` (everything else);
`pass_failed` is called by whoever runs passes when one raises."""

from __future__ import annotations

import re
import time
import weakref
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import msgspec

from . import events as ev
from . import model
from .errors import JobtpuError
from .events import Event
from .logfiles import log_rel, read_from
from .model import Attempt, Job, LastPass, MachineRecord, Status
from .text import printable

if TYPE_CHECKING:
    from .decide import Observation
    from .session import Session

# `status` warns when the last pass is older than this many intervals of the loop that runs passes
# (one missed pass is noise, three in a row mean the loop or the cron entry is gone).
STALE_INTERVALS = 3
# The interval assumed when passes come from cron or by hand (a single pass records none): cron's own.
DEFAULT_INTERVAL = 60.0

_loop_interval: float | None = None


def set_loop_interval(seconds: float | None) -> None:
    """This process runs a pass every `seconds` (manage --loop, watch): recorded with each pass, so
    `status` knows when the passes are late."""
    global _loop_interval
    _loop_interval = seconds


@dataclass
class _Before:
    jobs: dict[int, bytes]  # each job's state.json line as the pass read it
    machines: list[bytes]  # each machine's `"name": {...}` as the pass read it
    observed: float  # when the pass finished observing (setups it ran had ended by then)


_BEFORE: weakref.WeakKeyDictionary[Any, _Before] = weakref.WeakKeyDictionary()
_JOB = msgspec.json.Decoder(Job)
_MACHINES = msgspec.json.Decoder(dict[str, MachineRecord])


def before_decide(p: Session) -> None:
    """Remember the records as the pass read them (the session's merge base, not yet committed)."""
    _BEFORE[p] = _Before(dict(zip(p.base.ids, p.base.jobs, strict=True)), list(p.base.machines), time.time())


def before_result(p: Session, seen: Observation) -> None:
    """Record progress and the pass's time in the state the pass is about to save as its result
    (one write: a pass writes state.json at most twice, intents and result)."""
    if p not in _BEFORE:
        return
    track_progress(p, seen)
    now = time.time()
    p.state.last_pass = LastPass(ended=round(now, 3), took=round(now - seen.now, 3), every=_loop_interval)


def after_pass(p: Session, seen: Observation) -> list[str]:
    """Log the pass's events (its result is saved) and deliver what they mean. Returns lines for the
    user (a destination that failed); never raises for a destination."""
    before = _BEFORE.pop(p, None)
    if before is None:
        return []
    now = time.time()
    found = machine_events(_MACHINES.decode(b"{" + b",".join(before.machines) + b"}"), p.state.machines,
                           seen.now, before.observed)
    found += job_events(before.jobs, p.state.jobs, p.base.jobs, before.observed, now)  # base: what was just saved
    found.sort(key=lambda e: (e.time, _PHASE.get(e.kind, 1)))  # stable: what one record says keeps its order
    return publish(p.home.root, p.fleet.notify, found)


def publish(home_root: Path, destinations: list[Any], found: list[Event]) -> list[str]:
    """Append the events to the log and deliver the notifications they mean."""
    lines = []
    try:
        ev.append(home_root, found)
    except OSError as e:  # a full disk costs the log its lines, never the pass
        lines.append(printable(f"events: cannot write {ev.EVENTS_FILE}: {e.strerror or e}"))
    except JobtpuError as e:  # a link, a FIFO or a held lock there: one line, never the pass
        lines.append(printable(f"events: {e.message}"))
    from .events import OUTBOX_FILE

    if found or (home_root / OUTBOX_FILE).exists():  # users' own destinations: only when there is news
        own, problems = users_destinations(home_root)
        destinations, lines = [*destinations, *own], lines + problems
    if destinations:
        from .notify import DEFAULT_BUDGET, deliver

        lines += deliver(home_root / OUTBOX_FILE, destinations, found, DEFAULT_BUDGET)
    return lines


def users_destinations(home_root: Path) -> tuple[list[Any], list[str]]:
    """The webhooks users named in their own settings (`jobtpu config set notify`), each hearing of
    its user's jobs; a line for each settings file that cannot be read (its destinations wait)."""
    from .errors import ConfigError
    from .home import Home
    from .notify import parse_destinations
    from .settings import load_settings

    home = Home(home_root)
    found: list[Any] = []
    lines: list[str] = []
    for path in sorted((home_root / "users").glob("*/settings.json")):
        user = path.parent.name
        try:
            settings = load_settings(home, user)
            found += parse_destinations(settings.notify, f"users/{user}/settings.json: notify", owner=user)
        except ConfigError as e:
            lines.append(printable(f"notify: {e.message}; {user}'s own destinations are skipped"))
    return found, lines


def pass_failed(home_root: Path, destinations: list[Any], error: str) -> list[str]:
    """A pass raised: say so in the log (`jobtpu events`, the dashboard)."""
    first = (error.strip().splitlines() or ["unknown error"])[-1][:300]
    return publish(home_root, destinations, [Event(time.time(), ev.PASS_FAILED, detail={"error": first})])


# ---- jobs ---------------------------------------------------------------------------------------------

# Events stamped with the same time happen in this order within a pass: what it observed of the
# jobs, then the machines' steps (recreations it started because of that, setups), then launches.
_PHASE = {ev.PREEMPTED: 0, ev.JOB_ENDED: 0, ev.JOB_RECOVERING: 0, ev.JOB_LAUNCHED: 2, ev.JOB_RESUMED: 2,
          ev.JOB_RUNNING: 3}


def job_events(before: dict[int, bytes], jobs: list[Job], lines: list[bytes], acted: float,
               now: float) -> list[Event]:
    """What happened to each job whose record the pass changed. `acted`: when the pass began to act
    (launches happen then, after the machines' steps); `now`: when it ended."""
    found: list[Event] = []
    for job, line in zip(jobs, lines, strict=True):
        old_line = before.get(job.id)
        if old_line is None or old_line == line:
            continue  # unchanged, or submitted while the pass ran (it did nothing to it)
        found += _job_changes(_JOB.decode(old_line), job, acted, now)
    return found


def _job_changes(old: Job, new: Job, acted: float, now: float) -> list[Event]:
    found: list[Event] = []
    known = {a.n: a for a in old.attempts}
    detail = {"name": new.name} if new.name else {}

    def event(when: float, kind: str, attempt: Attempt | None, **more: Any) -> None:
        found.append(Event(when, kind, job=new.id, machine=attempt.machine if attempt else new.machine,
                           user=new.user, attempt=attempt.n if attempt else None, detail={**detail, **more}))

    for i, attempt in enumerate(new.attempts):
        was = known.get(attempt.n)
        if was is None:
            launched = max(float(attempt.started or acted), acted)
            event(launched, ev.JOB_LAUNCHED, attempt, workers=attempt.workers)
            by_hand = old.status is Status.QUEUED and old.reason is None  # resume/rerun by a person
            if i > 0 and not by_hand:
                event(launched, ev.JOB_RESUMED, attempt, resume=attempt.resume)
        last = attempt.n == new.attempt
        if last and new.status is Status.RUNNING and (was is None or old.status is not Status.RUNNING):
            event(now, ev.JOB_RUNNING, attempt)
        if attempt.ended is not None and (was is None or was.ended is None):
            when = float(attempt.ended)
            if attempt.outcome == model.PREEMPTED:
                event(when, ev.PREEMPTED, attempt)
            if new.ended and last:
                event(when, ev.JOB_ENDED, attempt, status=str(new.status), reason=new.reason,
                      exit_code=new.exit_code)
            else:
                event(when, ev.JOB_RECOVERING, attempt, reason=attempt.outcome,
                      recover="resume" if new.resume else "rerun")
    if new.ended and not old.ended and not any(e.kind == ev.JOB_ENDED for e in found):
        event(acted, ev.JOB_ENDED, new.current, status=str(new.status), reason=new.reason,
              exit_code=new.exit_code)
    return found


# ---- machines -------------------------------------------------------------------------------------------

def machine_events(before: dict[str, MachineRecord], after: dict[str, MachineRecord], observed: float,
                   setups_ended: float) -> list[Event]:
    """State changes and TPU steps (delete, create, setup), from each machine's record."""
    found: list[Event] = []
    for name, record in sorted(after.items()):
        was = before.get(name) or MachineRecord()
        if record.state is not None and record.state != was.state:
            found.append(ev.machine_event(observed, name, was.state, record.state, record.detail))
        found += _tpu_steps(name, was, record, observed, setups_ended)
    return found


def _tpu_steps(name: str, was: MachineRecord, now: MachineRecord, observed: float,
               setups_ended: float) -> list[Event]:
    found: list[Event] = []

    def event(when: float, kind: str, **detail: Any) -> None:
        found.append(Event(when, kind, machine=name, detail=detail))

    old_op, op = was.operation, now.operation
    if old_op is not None and (op is None or op.name != old_op.name):
        if old_op.kind == "delete":
            event(observed, ev.TPU_DELETE_DONE)
        elif op is None and now.failures <= was.failures and now.refused is None:
            event(observed, ev.TPU_CREATE_DONE)
    if op is not None and (old_op is None or op.name != old_op.name):
        event(float(op.since or observed), ev.TPU_DELETE_STARTED if op.kind == "delete" else ev.TPU_CREATE_STARTED)
    if now.queue_asked is not None and now.queue_asked != was.queue_asked:
        event(float(now.queue_asked), ev.TPU_CREATE_STARTED, queued=True)
    failed = now.failures > was.failures or (now.refused is not None and now.refused != was.refused)
    if failed:
        event(observed, ev.TPU_CREATE_FAILED, error=now.last_error)
    elif was.want_recreate and not now.want_recreate and not any(e.kind == ev.TPU_CREATE_DONE for e in found):
        event(observed, ev.TPU_CREATE_DONE)  # through a queued resource, or a create whose answer was lost
    found += _setup_steps(name, was, now, observed, setups_ended)
    return found


def _setup_steps(name: str, was: MachineRecord, now: MachineRecord, observed: float,
                 setups_ended: float) -> list[Event]:
    old, new = was.setup, now.setup
    if new is None or new == old:
        return []
    found = []
    going = old is not None and old.status == "running" and old.incarnation == new.incarnation
    if not going:
        found.append(Event(observed, ev.TPU_SETUP_STARTED, machine=name))
    if new.status == "done":
        found.append(Event(setups_ended, ev.TPU_SETUP_DONE, machine=name))
    elif new.status == "failed":
        found.append(Event(setups_ended, ev.TPU_SETUP_FAILED, machine=name, detail={"error": new.error}))
    return found


# ---- progress ---------------------------------------------------------------------------------------------

_REGEXES: dict[str, re.Pattern[str] | None] = {}


def _regex(text: str | None) -> re.Pattern[str] | None:
    from .goodput import compile_progress

    if text is None:
        return None
    if text not in _REGEXES:
        try:
            _REGEXES[text] = compile_progress(text)
        except ValueError:  # checked at submit; a hand edit costs only the job's own regex
            _REGEXES[text] = None
    return _REGEXES[text]


def track_progress(p: Session, seen: Observation) -> None:
    """For each attempt a probe saw: when it was last alive, and the progress its worker 0 reported
    in the log lines this pass brought home (JOBTPU_PROGRESS, or the job's --progress regex)."""
    from .goodput import Progress, scan

    by_id = {job.id: job for job in p.state.jobs}
    for view in seen.machines.values():
        for ref, ws in view.workers.items():
            job = by_id.get(ref.job)
            attempt = next((a for a in job.attempts if a.n == ref.attempt), None) if job else None
            if job is None or attempt is None:
                continue
            if ws.alive and attempt.ended is None:
                attempt.last_alive = seen.now
            if ref.worker != 0 or not ws.log_bytes:
                continue
            lines = new_lines(p.home.root, log_rel(ref.job, ref.attempt, 0), ws.log_offset)
            record = Progress.from_json(attempt.progress)
            updated = scan(lines, seen.now, _regex(job.progress), record)
            if updated != record:
                attempt.progress = updated.to_json()


LINE_LIMIT = 1 << 16  # a progress line is short: a longer unfinished line is not looked back into


def new_lines(root: Path, rel: PurePath, offset: int) -> list[str]:
    """The complete lines of the log from the line that held byte `offset` (unfinished then, so not
    read by the last pass) to the last newline: each complete line is read exactly once. Read through
    safefs (docs/design.md §2): a link or FIFO there yields nothing (the pull fails that job)."""
    start = max(0, offset - LINE_LIMIT)
    try:
        data = read_from(root, rel, start, limit=1 << 30)
    except (OSError, JobtpuError):
        return []
    head = data[: offset - start]
    cut = head.rfind(b"\n") + 1 if start == 0 or b"\n" in head else len(head)
    body = data[cut:]
    end = body.rfind(b"\n")
    return body[:end].decode(errors="replace").splitlines() if end >= 0 else []

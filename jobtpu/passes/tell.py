"""What a manage pass tells after it saved its result: the events it saw (appended to events.jsonl),
the notifications they mean (notify.py), each attempt's progress and last sign of life (for `jobtpu
report`), and when the pass ran (state.json's `last_pass`, for the freshness line of `status`).

Events are derived by comparing each job and machine record as the pass read them with what it saved,
so no decision code has to remember to report anything: whatever changed a record is seen here.

The pass calls `before_decide` (remembers the records as read) and `after_pass` (everything else);
`pass_failed` is called by whoever runs passes when one raises."""

from __future__ import annotations

import secrets as random_ids
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import msgspec

from jobtpu import timing
from jobtpu.errors import JobtpuError
from jobtpu.home.logfiles import log_rel, read_from
from jobtpu.schema import state as model
from jobtpu.schema.state import Attempt, Job, LastPass, MachineRecord, Status
from jobtpu.tell import events as ev
from jobtpu.tell.events import Event
from jobtpu.views.text import printable

if TYPE_CHECKING:
    from jobtpu.decide.core import Observation
    from jobtpu.home.store import Encoded
    from jobtpu.passes.session import Session
    from jobtpu.views.goodput import ProgressPattern


@dataclass
class _Before:
    jobs: dict[int, bytes]  # each job's state.json line as the pass read it
    machines: list[bytes]  # each machine's `"name": {...}` as the pass read it
    observed: float  # when the pass finished observing (setups it ran had ended by then)
    untold: list[dict[str, Any]]  # what the last pass (or kill) saved to tell, as this pass read it


_BEFORE: weakref.WeakKeyDictionary[Any, _Before] = weakref.WeakKeyDictionary()
_JOB = msgspec.json.Decoder(Job)
_MACHINES = msgspec.json.Decoder(dict[str, MachineRecord])
# How far back from its end events.jsonl is searched for the untold events a pass finds: they were
# told at the end of the last pass, so they are at the end unless the log rotated since (then some
# are told again: duplicates are allowed, loss is not).
TOLD_LOOKBACK = 2000
# At most this many events wait in `untold` (the newest kept): a log that cannot be written for
# many passes (a full disk) must not grow state.json without end.
MAX_UNTOLD = 1000


def before_decide(p: Session) -> None:
    """Remember the records as the pass read them (the session's merge base, not yet committed)."""
    _BEFORE[p] = _Before(dict(zip(p.base.ids, p.base.jobs, strict=True)), list(p.base.machines), time.time(),
                         list(p.base_untold))


def before_result(p: Session, seen: Observation, every: float | None) -> Callable[[Encoded], None] | None:
    """Record progress and the pass's time in the state the pass is about to save as its result
    (one write: a pass writes state.json at most twice, intents and result). Returns what the result's
    commit calls with the state as encoded: it decides the pass's events and keeps them, with what an
    earlier pass left untold, in state.json's `untold`, in that same atomic save (docs/design.md §3)."""
    if p not in _BEFORE:
        return None
    track_progress(p, seen)
    now = time.time()
    p.state.last_pass = LastPass(ended=round(now, 3), took=round(now - seen.now, 3), every=every)
    before = _BEFORE[p]

    def amend(encoded: Encoded) -> None:
        found = machine_events(_MACHINES.decode(b"{" + b",".join(before.machines) + b"}"), p.state.machines,
                               seen.now, before.observed)
        found += job_events(before.jobs, p.state.jobs, encoded.jobs, before.observed, now)
        found.sort(key=lambda e: (e.time, _PHASE.get(e.kind, 1)))  # stable: what one record says keeps its order
        p.state.untold = (still_untold(p.home.root, before.untold) + with_ids(found))[-MAX_UNTOLD:]

    return amend


def with_ids(found: list[Event]) -> list[dict[str, Any]]:
    """The events as state.json's `untold` keeps them, each with an id of its own."""
    for event in found:
        if event.id is None:
            event.id = random_ids.token_hex(8)
    return [event.to_json() for event in found]


def still_untold(home_root: Path, untold: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of the events an earlier pass saved to tell, those not in events.jsonl: it died before it told
    them (the outbox is written before the log, so one in the log is queued too)."""
    if not untold:
        return []
    told = {e.id for e in ev.latest(home_root, TOLD_LOOKBACK + len(untold))}
    return [doc for doc in untold if doc.get("id") not in told]


def after_pass(p: Session, seen: Observation) -> list[str]:
    """Tell what the pass saved to tell (its result, with `untold`, is saved): queue the
    notifications, log the events, deliver. Returns lines for the user (a destination that failed);
    never raises for a destination."""
    if _BEFORE.pop(p, None) is None:
        return []
    return tell(p.home.root, p.fleet.notify, p.state.untold)


def tell(home_root: Path, destinations: list[Any], untold: list[dict[str, Any]]) -> list[str]:
    """Tell events saved in state.json's `untold`: they stay there until a later save finds them in
    the log (`still_untold`)."""
    found = [e for e in map(Event.from_json, untold) if e is not None]
    return publish(home_root, destinations, found)


def publish(home_root: Path, destinations: list[Any], found: list[Event]) -> list[str]:
    """Queue the notifications the events mean, append the events to the log, deliver. In that
    order: an event in the log is in the outbox too, so a pass that finds it there need not tell it."""
    from jobtpu.tell.events import OUTBOX_FILE

    lines: list[str] = []
    if found or (home_root / OUTBOX_FILE).exists():  # users' own destinations: only when there is news
        own, problems = users_destinations(home_root)
        destinations, lines = [*destinations, *own], lines + problems
    if destinations and any(ev.notification(e) for e in found):
        from jobtpu.tell.notify import queue

        lines += queue(home_root / OUTBOX_FILE, destinations, found)
    lines += log(home_root, found)
    if destinations:
        from jobtpu.tell.notify import deliver

        lines += deliver(home_root / OUTBOX_FILE, destinations, [], timing.current().notify_budget)
    return lines


def log(home_root: Path, found: list[Event]) -> list[str]:
    """Append the events to events.jsonl only (what no notification is made of: a kill, a failed
    pass, told outside a pass, which must not deliver the outbox without machines.json's destinations)."""
    try:
        ev.append(home_root, found)
    except OSError as e:  # a full disk costs the log its lines, never the pass
        return [printable(f"events: cannot write {ev.EVENTS_FILE}: {e.strerror or e}")]
    except JobtpuError as e:  # a link, a FIFO or a held lock there: one line, never the pass
        return [printable(f"events: {e.message}")]
    return []


def users_destinations(home_root: Path) -> tuple[list[Any], list[str]]:
    """The webhooks users named in their own settings (`jobtpu config set notify`), each hearing of
    its user's jobs; a line for each settings file that cannot be read (its destinations wait, and
    everyone else's are served: docs/reference/machines-json.md §3.10)."""
    from jobtpu.errors import JobtpuError
    from jobtpu.home.layout import Home
    from jobtpu.home.settings import load_settings
    from jobtpu.tell.notify import parse_destinations

    home = Home(home_root)
    found: list[Any] = []
    lines: list[str] = []
    foreign: list[Any] = []  # from settings another account could have written: checked (design §7)
    for path in sorted((home_root / "users").glob("*/settings.json")):
        user = path.parent.name
        where = f"users/{user}/settings.json"
        try:
            settings = load_settings(home, user)
            dests = parse_destinations(settings.notify, f"{where}: notify", owner=user)
        except JobtpuError as e:
            lines.append(printable(f"notify: {e.message}; {user}'s own destinations are skipped"))
            continue
        except OSError as e:  # unreadable to the account running the pass (a chmod 600), or gone
            lines.append(printable(f"notify: cannot read {where} ({e.strerror or e}); "
                                   f"{user}'s own destinations are skipped"))
            continue
        (found if _own_file(path) else foreign).extend(dests)
    if foreign and _private_webhooks_allowed(home_root):
        return found + foreign, lines
    checked, lines = _checked_webhooks(foreign, lines)
    return found + checked, lines


def _own_file(path: Path) -> bool:
    import os

    from jobtpu.home.trust import why_untrusted

    try:
        return why_untrusted(os.stat(path, follow_symlinks=False), os.geteuid()) is None
    except OSError:
        return False


def _private_webhooks_allowed(home_root: Path) -> bool:
    from jobtpu.home.trust import load_runner

    return load_runner(home_root).allow_private_webhooks


def _checked_webhooks(found: list[Any], lines: list[str]) -> tuple[list[Any], list[str]]:
    """Members' webhooks at a private address are skipped with one line; the others are posted only to
    the address checked at delivery (docs/design.md §7)."""
    from dataclasses import replace

    from jobtpu.tell.webhooks import check

    kept = []
    for dest in found:
        _, why = check(dest.webhook)
        if why is not None:
            lines.append(printable(f"notify: {dest.owner}'s {dest.label}: {why}: skipped (runner.json's "
                                   '"allow_private_webhooks" allows it)'))
        else:
            kept.append(replace(dest, pinned=True))
    return kept, lines


def pass_failed(home_root: Path, destinations: list[Any], error: str) -> list[str]:
    """A pass raised: say so in the log (`jobtpu events`, the dashboard), once per change: a pass
    failing the same way as the last one, with nothing logged between, writes nothing."""
    first = (error.strip().splitlines() or ["unknown error"])[-1][:300]
    last = ev.latest(home_root, 1)
    if last and last[0].kind == ev.PASS_FAILED and last[0].detail.get("error") == first \
            and not _passed_since(home_root, last[0].time):
        return []
    found = [Event(time.time(), ev.PASS_FAILED, detail={"error": first})]
    return publish(home_root, destinations, found) if destinations else log(home_root, found)


def _passed_since(home_root: Path, when: float) -> bool:
    """Whether a pass ended after `when` (state.json's `last_pass`; False when it cannot be read)."""
    from jobtpu.home.layout import Home
    from jobtpu.home.store import Store

    try:
        last = Store(Home(home_root)).load().last_pass
    except Exception:  # the broken state.json that may be the failure itself
        return False
    return last is not None and float(last.ended) > when


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


def ended_by_hand(jobs: list[Job], now: float, by: str | None) -> list[Event]:
    """`job_ended` for jobs a command (kill) ended itself, naming who ran it."""
    found = []
    for job in jobs:
        attempt = job.current
        detail: dict[str, Any] = {"name": job.name} if job.name else {}
        detail.update(status=str(job.status), reason=job.reason, exit_code=job.exit_code)
        if by is not None:
            detail["by"] = by
        found.append(Event(now, ev.JOB_ENDED, job=job.id, machine=attempt.machine if attempt else job.machine,
                           user=job.user, attempt=attempt.n if attempt else None, detail=detail))
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

_REGEXES: dict[str, ProgressPattern | str] = {}  # a pattern as compiled, or why RE2 cannot take it
_IGNORED: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def _regex(p: Session, job: Job) -> ProgressPattern | None:
    """The job's --progress pattern compiled by RE2; None (and one line for the pass) for a pattern
    checked at submit but edited in by hand since: it is ignored, never run by Python's `re`."""
    from jobtpu.views.goodput import compile_progress

    text = job.progress
    if text is None:
        return None
    if text not in _REGEXES:
        try:
            _REGEXES[text] = compile_progress(text)
        except ValueError as e:
            _REGEXES[text] = str(e)
    found = _REGEXES[text]
    if isinstance(found, str):
        lines = _IGNORED.setdefault(p, [])
        line = printable(f"job {job.id}: its progress pattern is ignored: {found}"[:300])
        if line not in lines:
            lines.append(line)
        return None
    return found


def progress_notes(p: Session) -> list[str]:
    """The lines `track_progress` left for the pass to tell (patterns it ignored)."""
    return _IGNORED.pop(p, [])


def track_progress(p: Session, seen: Observation) -> None:
    """For each attempt a probe saw: when it was last alive, and the progress its worker 0 reported
    in the log lines this pass brought home (JOBTPU_PROGRESS, or the job's --progress regex)."""
    from jobtpu.views.goodput import Progress, scan

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
            updated = scan(lines, seen.now, _regex(p, job), record)
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

"""The home's event log: what happened to jobs and machines, one JSON object per line in
`<home>/events.jsonl`, rotated by size, read back with filters (eventlog.py), followed like `tail -F`
(follow.py). This module holds the vocabulary: the Event type, its kinds, and its words for people.

Wiring (the only calls the pass and the CLI make):

- A pass collects `Event`s as it goes and, once per pass, calls `eventlog.append(home.root, events)`:
  * job events: `Event(now, JOB_LAUNCHED, job=id, machine=m, user=u, attempt=n, detail={"workers": w})`,
    `JOB_RUNNING` (first pass that sees the attempt running), `JOB_ENDED` with
    `detail={"status": "finished"|"failed"|"killed", "reason": r, "exit_code": c}` (and `"spent"`, the
    budget that ran out, when one did), `JOB_RECOVERING`
    with `detail={"reason": r, "recover": "resume"|"rerun"|..., "unsaved": true when no attempt saved}`, `JOB_RESUMED` (the first attempt
    launched after a recovery);
  * `PREEMPTED` (machine=m, and job/attempt when a job was on it) when the pass first sees it, and
    for an attempt a higher priority class evicted (`detail={"evicted_by": job}`, decide/evict.py);
  * machine state changes: `machine_event(now, name, was, state, detail)` (from manage.machine_changes);
  * TPU steps: `TPU_DELETE_STARTED/_DONE`, `TPU_CREATE_STARTED/_DONE/_FAILED`,
    `TPU_SETUP_STARTED/_DONE/_FAILED` with machine=m and `detail={"error": ...}` on failures;
  * a pass that fails: `Event(now, PASS_FAILED, detail={"error": one_line})`.
  The same list goes to `outbox.queue(...)` and `notify.deliver(...)` (see notify.py): `notification(event)` says which of
  them are worth a notification.
- `jobtpu events [--follow] [--job ID] [--machine M] [--since T]`: `--since` parsed by `since_arg`
  (an argparse `type=`), then `eventlog.read(...)` or `follow.follow(...)`, each event printed with
  `render_line`.
- The dashboard (`status --watch`) shows `eventlog.latest(home.root, n)`.
- The home counts `events.jsonl` among its own files: its companions
  (`events.jsonl.1` …, `events.jsonl.lock`) then follow by prefix and are never packed in a snapshot.
  The rotated files are named `events.jsonl.N` (not `events.N.jsonl`) for exactly that reason.
"""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime
from typing import Any

from jobtpu.render.text import printable

# The notification names (FAILED … RECREATE_FAILED, NOTIFICATIONS) are a `notify` list's words: they
# live with the Event type, below the destinations that check them and this module that picks them.
from jobtpu.schema.events import (
    FAILED,
    FINISHED,
    MACHINE_DOWN,
    MACHINE_UP,
    RECOVERED,
    RECREATE_FAILED,
    RUNNER_CHANGED,
    Event,
)
from jobtpu.schema.events import NOTIFICATIONS as NOTIFICATIONS

# ---- the vocabulary ---------------------------------------------------------------------------------

JOB_LAUNCHED = "job_launched"
JOB_RUNNING = "job_running"
JOB_ENDED = "job_ended"
JOB_RECOVERING = "job_recovering"
JOB_RESUMED = "job_resumed"
PREEMPTED = "preempted"
MACHINE_STATE = "machine_state"
TPU_DELETE_STARTED = "tpu_delete_started"
TPU_DELETE_DONE = "tpu_delete_done"
TPU_CREATE_STARTED = "tpu_create_started"
TPU_CREATE_DONE = "tpu_create_done"
TPU_CREATE_FAILED = "tpu_create_failed"
TPU_SETUP_STARTED = "tpu_setup_started"
TPU_SETUP_DONE = "tpu_setup_done"
TPU_SETUP_FAILED = "tpu_setup_failed"
PASS_FAILED = "pass_failed"
JOB_UPDATED = "job_updated"  # `jobtpu update` changed a queued job's fields: detail {"changes": {field: [was, now]}, "by"}
MACHINE_DRAINED = "machine_drained"  # `jobtpu machines drain`: detail {"reason", "by"}
MACHINE_UNDRAINED = "machine_undrained"  # `jobtpu machines undrain`: detail {"by"}
RUNNER_TAKEOVER = "runner_takeover"  # a standby took the runner lease: detail {"from", "to", "token", "why"}

KINDS = frozenset({JOB_LAUNCHED, JOB_RUNNING, JOB_ENDED, JOB_RECOVERING, JOB_RESUMED, PREEMPTED, MACHINE_STATE,
                   TPU_DELETE_STARTED, TPU_DELETE_DONE, TPU_CREATE_STARTED, TPU_CREATE_DONE, TPU_CREATE_FAILED,
                   TPU_SETUP_STARTED, TPU_SETUP_DONE, TPU_SETUP_FAILED, PASS_FAILED, JOB_UPDATED, MACHINE_DRAINED,
                   MACHINE_UNDRAINED, RUNNER_TAKEOVER})


UP = "up"


def machine_event(now: float, name: str, was: str | None, state: str, detail: str | None = None) -> Event:
    """A machine's state change, as manage.machine_changes sees it."""
    return Event(now, MACHINE_STATE, machine=name, detail={"from": was, "to": state, "detail": detail})


def notification(event: Event) -> str | None:
    """The notification name an event is, if any (see NOTIFICATIONS)."""
    if event.kind == JOB_ENDED:
        status = event.detail.get("status")
        return FINISHED if status == "finished" else FAILED if status == "failed" else None
    if event.kind == JOB_RESUMED:
        return RECOVERED
    if event.kind == TPU_CREATE_FAILED:
        return RECREATE_FAILED
    if event.kind == RUNNER_TAKEOVER:
        return RUNNER_CHANGED
    if event.kind == MACHINE_STATE:
        was, now = event.detail.get("from"), event.detail.get("to")
        if was == UP and now != UP:
            return MACHINE_DOWN
        if now == UP and was is not None and was != UP:  # a machine seen for the first time is no news
            return MACHINE_UP
    return None


# ---- for people -------------------------------------------------------------------------------------

_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """A moment as a user gives it: a duration ago (`90s`, `10m`, `2h`, `1d`) or an ISO time
    (`2026-01-31T12:00`, local time unless it names a zone, `Z` for UTC). ValueError with one line."""
    now = time.time() if now is None else now
    match = _AGO.match(text)
    if match:
        return now - float(match.group(1)) * _UNIT[match.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give a duration ago (10m, 2h, 1d) or an ISO time "
                         "like 2026-01-31T12:00") from None
    return moment.timestamp()  # a naive time is the local time, as a user types it


def since_arg(text: str) -> float:
    """`parse_since` as an argparse type= (a bad value is one usage line, exit 2)."""
    try:
        return parse_since(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _was_now(change: Any) -> str:
    """`[0, 3]` → `0 -> 3`: one field's change in a job_updated event (`(none)` for nothing)."""
    if isinstance(change, list) and len(change) == 2:
        was, now = ("(none)" if value in (None, "") else value for value in change)
        return f"{was} -> {now}"
    return str(change)


def render_line(event: Event, zone: Any = None) -> str:
    """One terminal-safe line: the time in `zone` (a tzinfo; None: this machine's local time), what,
    and where."""
    when = datetime.fromtimestamp(event.time, zone).strftime("%Y-%m-%d %H:%M:%S")
    return printable(f"{when}  {describe(event)}")


def describe(event: Event) -> str:
    """What happened, in words (untrusted names are not escaped here: the caller does, for its medium)."""
    d = event.detail
    who = f"job {event.job}" if event.job is not None else ""
    if who and d.get("name"):
        who += f" ({d['name']})"
    if event.attempt is not None:
        who += f" attempt {event.attempt}"
    on = f" on {event.machine}" if event.machine else ""
    if event.kind == JOB_ENDED:
        why = f" ({d['reason']})" if d.get("reason") else ""
        spent = f": {d['spent']}" if d.get("spent") else ""  # the budget that ran out (decide/rules.py)
        return f"{who}{on}: {d.get('status', 'ended')}{why}{spent}"
    if event.kind == JOB_RECOVERING:
        how = f", will {d['recover']}" if d.get("recover") else ""
        how += " from scratch: no attempt saved a checkpoint" if d.get("unsaved") else ""
        return f"{who}{on}: recovering from {d.get('reason') or 'a failure'}{how}"
    if event.kind == MACHINE_STATE:
        change = f"{d.get('from')} -> {d.get('to')}" if d.get("from") else f"{d.get('to')}"
        return f"{event.machine}: {change}" + (f" ({d['detail']})" if d.get("detail") else "")
    if event.kind == PASS_FAILED:
        return f"pass failed: {d.get('error', '')}"
    if event.kind == RUNNER_TAKEOVER:
        return f"runner: {d.get('to')} took over from {d.get('from') or 'nobody'} (lease token {d.get('token')})"
    by = f" by {d['by']}" if d.get("by") else ""
    if event.kind == JOB_UPDATED:
        changes = d.get("changes")
        if not isinstance(changes, dict):
            changes = {}
        return f"{who}: updated{by}: " + "; ".join(f"{name} {_was_now(change)}" for name, change in changes.items())
    if event.kind in (MACHINE_DRAINED, MACHINE_UNDRAINED):
        why = f": {d['reason']}" if d.get("reason") else ""
        return f"{event.machine}: {'drained' if event.kind == MACHINE_DRAINED else 'undrained'}{by}{why}"
    words = event.kind.replace("_", " ")
    if event.kind.startswith("tpu_"):
        words = f"TPU {words[4:]}"
    subject = f"{who}{on}" if who else (event.machine or "")
    error = f": {d['error']}" if d.get("error") else ""
    return f"{subject}: {words}{error}" if subject else f"{words}{error}"

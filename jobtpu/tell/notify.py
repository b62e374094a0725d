"""Notifications: the events a user asked to hear about, sent to a webhook or a command, at least
once, without ever holding up or failing a pass.

Wiring (the only calls the pass and the CLI make):

- Loading machines.json (and the per-user settings): `destinations.parse_destinations(doc.get("notify"),
  "machines.json: notify")` → list[Destination]; a bad entry raises ConfigError with one line. Lists
  from several files are simply concatenated (identical destinations are merged by `deliver`).
- At the end of every pass, with the events it saved to tell (passes/tell.py): `outbox.queue(outbox,
  destinations, events)` before `eventlog.append` (an event in the log is then in the outbox too),
  then `deliver(outbox, destinations, [])` within timing's notify_budget, one line per problem. Neither raises for
  a destination's fault; a quiet pass (nothing new, nothing pending) costs one stat. A dry run must
  not call them.
- The home counts outbox.OUTBOX_FILE among its own files (never packed in a snapshot).

Delivery (this module; the outbox's file and caps are outbox.py's, each kind of send senders.py's):
- Each destination wants some notification names (events.NOTIFICATIONS); an event becomes one
  outbox item per destination that wants it. The outbox is written (atomically) before anything is
  sent, and an item leaves it only once its destination took it: a crash or a failure mid-pass
  sends it again on the next pass (at least once).
- Destinations are served side by side, each in event order, all within one time budget (a few
  seconds): a slow or dead destination costs the pass at most that budget. A destination that fails
  is not tried again in that pass; its items wait for the next one. At the budget's end every
  webhook socket still open is closed (a socket timeout bounds one read, not a server dripping its
  answer) and a command's group killed, so no thread or socket outlives the delivery. A destination
  that ran out of time SLOW_STRIKES passes in a row sits out the next 1, 3, 7 … (MAX_SKIP) passes.
- Caps: an item that waited through MAX_TRIES failed passes of its destination (50: about an hour
  of passes run every minute, long enough to ride out an outage of the receiving side) is dropped,
  and at most MAX_PENDING (200) items wait per destination (the oldest go first), so a destination
  that is gone for good cannot grow the outbox for ever. Both say so in the pass's lines.
- A webhook gets a POST of `{"text": "<one line>", "event": {...}}` (Slack's incoming webhooks read
  `text`); any 2xx is success. Its URL may hold a secret (Slack's do), so the outbox keys items by a
  digest of the destination and lines name only the URL's host.
- A command runs as `bash -c CMD` in the home, in its own process group, with the event's JSON on
  stdin and JOBTPU_NOTIFY_EVENT (the notification name) and JOBTPU_NOTIFY_TEXT (the line) in its
  environment (for tools like notify-send that take the text as an argument); exit 0 is success,
  and the whole group is killed when the budget runs out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from jobtpu import timing
from jobtpu.decide.destinations import Destination
from jobtpu.decide.events import Event, describe, notification
from jobtpu.errors import message_of
from jobtpu.render.text import printable
from jobtpu.schema.outbox import Pending
from jobtpu.tell.outbox import cap_items, enqueue, load_outbox, save_outbox, strike
from jobtpu.tell.senders import Sockets, post_pinned, post_webhook, run_command

_SLOW = frozenset({"timed out", "out of time", "timed out (stopped)"})


def deliver(outbox_path: Path, destinations: Sequence[Destination], new_events: Sequence[Event],
            budget_seconds: float | None = None) -> list[str]:
    """Queue what `new_events` mean for `destinations`, send everything pending within
    `budget_seconds`, keep what was not taken for the next pass. Returns one line per destination
    that failed (and per dropped batch); never raises for a destination's fault. When it returns,
    no thread or socket of its deliveries is left (a webhook's socket is closed at the deadline)."""
    budget = timing.current().notify_budget if budget_seconds is None else budget_seconds
    deadline = time.monotonic() + budget
    by_key = {d.key: d for d in destinations}
    if not outbox_path.exists() and not any(notification(e) for e in new_events):
        return []  # the quiet pass: one stat
    items, slow, lines = load_outbox(outbox_path)
    items = [i for i in items if i.dest in by_key]  # a destination removed from machines.json: forget its items
    enqueue(items, list(by_key.values()), new_events)
    items, dropped = cap_items(items, by_key)
    lines += dropped
    resting = {key for key, backoff in slow.items() if backoff.skip > 0 and key in by_key}
    for key in resting:
        slow[key].skip -= 1
    lines += save_outbox(outbox_path, items, slow)  # on disk before sending: a crash now sends again, never loses
    sendable = [i for i in items if i.dest not in resting]
    if not sendable:
        return lines
    results = _send_all(sendable, by_key, deadline, outbox_path.parent)
    remaining = []
    skipped = dict.fromkeys(results, 0)
    for item in items:  # in their order: each destination's first `sent` items were taken
        if item.dest in resting:
            remaining.append(item)  # sitting out this pass: not a try
            continue
        sent, _ = results[item.dest]
        if skipped[item.dest] < sent:
            skipped[item.dest] += 1
            continue
        item.tries += 1  # only a failed destination leaves items behind
        remaining.append(item)
    for key, (_, error) in results.items():
        if error is not None:
            waiting = sum(1 for i in remaining if i.dest == key)
            rest = 0
            if error in _SLOW:
                rest = strike(slow, key)
            else:
                slow.pop(key, None)  # a destination that answers, even with an error, is not slow
            later = f"; it sits out the next {rest} pass(es)" if rest else ""
            lines.append(printable(f"notifications: {by_key[key].label}: {error}; "
                                   f"{waiting} waiting for the next pass{later}"))
        else:
            slow.pop(key, None)
    return list(dict.fromkeys(lines + save_outbox(outbox_path, remaining, slow)))  # a write refused twice: one line



REAP_SECONDS = 1.0  # after the deadline closed its sockets, how long a delivery waits for its threads


def _send_all(items: list[Pending], by_key: dict[str, Destination], deadline: float,
              home: Path) -> dict[str, tuple[int, str | None]]:
    """Each destination's items, in order, on a thread of its own; per destination how many were
    taken and why it stopped. At the deadline every webhook socket is closed (a command's group is
    killed by its own timeout), so each thread ends; a daemon thread, never holding up the process."""
    results: dict[str, tuple[int, str | None]] = {}
    lock = threading.Lock()
    sockets = Sockets()

    def serve(dest: Destination, queue: list[Pending]) -> None:
        sent = 0
        error: str | None = None
        for item in queue:
            try:
                error = _send(dest, item, deadline, home, sockets)
            except Exception as e:  # a destination may fail in ways no list foresees: never the pass's fault
                error = "timed out" if sockets.closed else f"{type(e).__name__}: {message_of(e)}"
            if error is not None:
                break
            sent += 1
            with lock:
                results[dest.key] = (sent, None)
        with lock:
            results[dest.key] = (sent, error)

    threads = []
    for key, dest in by_key.items():
        queue = [i for i in items if i.dest == key]
        if queue:
            results[key] = (0, "out of time")  # until the thread says otherwise
            thread = threading.Thread(target=serve, args=(dest, queue), daemon=True, name=f"notify {dest.label}")
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join(max(0.0, deadline + 0.2 - time.monotonic()))
    sockets.close_all()
    reaped = time.monotonic() + REAP_SECONDS
    for thread in threads:
        thread.join(max(0.0, reaped - time.monotonic()))
    with lock:
        final = dict(results)
    for key, (sent, error) in final.items():
        if error is None and sent < sum(1 for i in items if i.dest == key):
            final[key] = (sent, "out of time")
    return final


def _send(dest: Destination, item: Pending, deadline: float, home: Path, sockets: Sockets) -> str | None:
    """Deliver one item; None when taken, else why not (one short line)."""
    left = deadline - time.monotonic()
    if left <= 0:
        return "out of time"
    event = Event.from_json(item.event)
    text = headline(item.name, event) if event else "jobtpu event"
    if dest.webhook and dest.pinned:
        return post_pinned(dest.webhook, text, item.event, left)
    if dest.webhook:
        return post_webhook(dest.webhook, text, item.event, left, sockets)
    return run_command(dest.command or "", text, item.name, item.event, left, home)


def headline(name: str, event: Event) -> str:
    """The line a person reads: `jobtpu: failed: job 12 attempt 2 on box: failed (exit 1)`."""
    return printable(f"jobtpu: {name.replace('_', ' ')}: {describe(event)}")


"""The notification outbox (`<home>/notify-outbox.json`): the items not yet taken by their
destination, and each slow destination's back-off; written before anything is sent, so a crash
sends again rather than loses. Caps keep a destination that is gone for good from growing it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jobtpu.decide.destinations import Destination
from jobtpu.decide.events import Event, notification
from jobtpu.home import safefs
from jobtpu.home.layout import write_atomic
from jobtpu.render.text import printable
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.outbox import Backoff, Outbox, Pending, read_slow

OUTBOX_FILE = "notify-outbox.json"
MAX_TRIES = 50
MAX_PENDING = 200
# A destination whose deliveries ran out of time SLOW_STRIKES passes in a row sits out the next
# 1, 3, 7 … passes (at most MAX_SKIP) before it is tried again: a webhook that answers after its
# timeout is not posted every pass, and costs the budget of none of them while it sits out.
SLOW_STRIKES = 2
MAX_SKIP = 31


def load_outbox(path: Path) -> tuple[list[Pending], dict[str, Backoff], list[str]]:
    """The pending items, each slow destination's backoff, and a line if the file could not be read
    (then it starts afresh: losing notifications beats failing every pass on a damaged file)."""
    try:  # at the top of the home: no link, no FIFO, no more than its cap
        raw = safefs.read_regular(path.parent, path.name, safefs.CAP_SMALL)
    except FileNotFoundError:
        return [], {}, []
    except OSError as e:
        return [], {}, [f"notifications: cannot read {path.name} ({e.strerror}); pending notifications dropped"]
    except safefs.UnsafePath as e:
        return [], {}, [f"notifications: {e.message}; pending notifications dropped"]
    try:
        doc = msgspec.json.decode(raw, type=Outbox)
    except (msgspec.DecodeError, RecursionError):
        return [], {}, [f"notifications: {path.name} is damaged; pending notifications dropped"]
    return doc.pending, read_slow(doc.slow), []


def save_outbox(path: Path, items: list[Pending], slow: dict[str, Backoff] | None = None) -> list[str]:
    """Write the pending items (none: no file); a line when the home refuses (a full disk): the
    deliveries go on, but what fails now is not retried."""
    waiting = {i.dest for i in items}
    kept = {k: msgspec.Raw(msgspec.json.encode(v)) for k, v in (slow or {}).items() if k in waiting}
    try:
        if items:
            write_atomic(path, msgspec.json.encode(Outbox(items, kept)) + b"\n")
        else:
            path.unlink(missing_ok=True)
    except OSError as e:
        return [printable(f"notifications: cannot write {path.name}: {e.strerror or e}")]
    return []


def enqueue(items: list[Pending], destinations: Sequence[Destination], new_events: Sequence[Event]) -> None:
    """One item per destination that wants each event; an event (by its id) already waiting for a
    destination is not queued for it twice (a pass telling what a crashed pass may have queued)."""
    waiting = {(i.dest, i.event.get("id")) for i in items if i.event.get("id") is not None}
    for event in new_events:
        name = notification(event)
        if name is None:
            continue
        for dest in destinations:
            if event.id is not None and (dest.key, event.id) in waiting:
                continue
            if dest.wants(name, event):
                items.append(Pending(dest.key, event.to_json(), 0, name))


def cap_items(items: list[Pending], by_key: dict[str, Destination]) -> tuple[list[Pending], list[str]]:
    """Drop what waited through MAX_TRIES failed passes, and the oldest beyond MAX_PENDING per
    destination; a line for each destination that lost some."""
    expired: dict[str, int] = {}
    kept = []
    for item in items:
        if item.tries >= MAX_TRIES:
            expired[item.dest] = expired.get(item.dest, 0) + 1
        else:
            kept.append(item)
    lines = [f"notifications: gave up on {n} notification(s) to {by_key[key].label} after {MAX_TRIES} failed passes"
             for key, n in expired.items()]
    excess: dict[str, int] = {}
    for item in kept:
        excess[item.dest] = excess.get(item.dest, 0) + 1
    excess = {key: n - MAX_PENDING for key, n in excess.items() if n > MAX_PENDING}
    lines += [f"notifications: {n} more than {MAX_PENDING} waiting for {by_key[key].label}; the oldest dropped"
              for key, n in excess.items()]
    result = []
    for item in kept:  # oldest first: drop from the front of each destination's queue
        if excess.get(item.dest, 0) > 0:
            excess[item.dest] -= 1
            continue
        result.append(item)
    return result, lines



def queue(outbox_path: Path, destinations: Sequence[Destination],
          new_events: Sequence[Event]) -> tuple[list[str], bool]:
    """Queue what `new_events` mean for `destinations` in the outbox and save it (synced), sending
    nothing; the lines, and whether it is saved. A pass does this before it logs the events, and logs
    them only once it is saved, so an event in the log is also in the outbox."""
    if not any(notification(e) for e in new_events):
        return [], True
    by_key = {d.key: d for d in destinations}
    items, slow, lines = load_outbox(outbox_path)
    items = [i for i in items if i.dest in by_key]
    enqueue(items, list(by_key.values()), new_events)
    items, dropped = cap_items(items, by_key)
    refused = save_outbox(outbox_path, items, slow)
    return lines + dropped + refused, not refused



def strike(slow: dict[str, Backoff], key: str) -> int:
    """One more pass in a row that `key` ran out of time; how many passes it now sits out."""
    backoff = slow.setdefault(key, Backoff())
    backoff.strikes += 1
    over = backoff.strikes - SLOW_STRIKES
    backoff.skip = min(MAX_SKIP, 2 ** (over + 1) - 1) if over >= 0 else 0
    return backoff.skip


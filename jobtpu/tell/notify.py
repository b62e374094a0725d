"""Notifications: the events a user asked to hear about, sent to a webhook or a command, at least
once, without ever holding up or failing a pass.

Wiring (the only calls the pass and the CLI make):

- Loading machines.json (and the per-user settings): `parse_destinations(doc.get("notify"),
  "machines.json: notify")` → list[Destination]; a bad entry raises ConfigError with one line. Lists
  from several files are simply concatenated (identical destinations are merged by `deliver`).
- At the end of every pass, with the events it saved to tell (passevents.py): `queue(outbox,
  destinations, events)` before `events.append` (an event in the log is then in the outbox too),
  then `deliver(outbox, destinations, [])` within timing's notify_budget, one line per problem. Neither raises for
  a destination's fault; a quiet pass (nothing new, nothing pending) costs one stat. A dry run must
  not call them.
- home.py must count OUTBOX_FILE among the home's own files (never packed in a snapshot).

Delivery:
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

import contextlib
import hashlib
import http.client
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from jobtpu import timing
from jobtpu.errors import ConfigError
from jobtpu.home.layout import write_atomic
from jobtpu.tell.events import NOTIFICATIONS, OUTBOX_FILE, Event, describe, notification  # noqa: F401 (OUTBOX_FILE: ours)
from jobtpu.views.text import printable

MAX_TRIES = 50
MAX_PENDING = 200
# A destination whose deliveries ran out of time SLOW_STRIKES passes in a row sits out the next
# 1, 3, 7 … passes (at most MAX_SKIP) before it is tried again: a webhook that answers after its
# timeout is not posted every pass, and costs the budget of none of them while it sits out.
SLOW_STRIKES = 2
MAX_SKIP = 31
_KEYS = frozenset({"webhook", "command", "events"})


@dataclass(frozen=True)
class Destination:
    webhook: str | None
    command: str | None
    events: frozenset[str]
    owner: str | None = None  # a user's own destination (their settings): events of their jobs only
    pinned: bool = False  # a member's webhook: posted only to an address checked public (webhooks.py)

    @property
    def key(self) -> str:
        """A stable name for the outbox that does not reveal a webhook's secret URL."""
        what = f"webhook {self.webhook}" if self.webhook else f"command {self.command}"
        if self.owner is not None:
            what += f" of {self.owner}"
        return hashlib.sha256(what.encode()).hexdigest()[:16]

    def wants(self, name: str, event: Event) -> bool:
        """Whether this destination hears of `event` (notification `name`): a user's own destination
        hears of their jobs and of what has no owner (machines, failed passes), not of others' jobs."""
        return name in self.events and (self.owner is None or event.user in (None, self.owner))

    @property
    def label(self) -> str:
        """How lines name it: the webhook's host (never its path, which may be the secret) or the command."""
        if self.webhook:
            return f"webhook {urllib.parse.urlsplit(self.webhook).hostname or '?'}"
        command = self.command or ""
        return f"command {command[:40]}{'…' if len(command) > 40 else ''}"


def parse_destinations(doc: Any, where: str = "notify", owner: str | None = None) -> list[Destination]:
    """The destinations a `notify` list names (None: none). One ConfigError line per mistake.
    `owner`: a user's own list (their settings), which may name webhooks only: a command would run
    as whoever runs the passes, which in a shared home is another account."""
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ConfigError(f"{where} must be a list of destinations, like "
                          '[{"command": "notify-send jobtpu", "events": ["failed"]}]')
    found = [_destination(entry, f"{where}[{i}]") for i, entry in enumerate(doc)]
    if owner is None:
        return found
    if any(d.command is not None for d in found):
        raise ConfigError(f"{where}: a user's own destinations are webhooks only (a command would run as "
                          "whoever runs the passes); ask for a command destination in machines.json's notify")
    return [Destination(d.webhook, None, d.events, owner) for d in found]


def _destination(entry: Any, where: str) -> Destination:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object with \"webhook\" or \"command\", and \"events\"")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (a destination has webhook or command, and events)")
    if ("webhook" in entry) == ("command" in entry):
        raise ConfigError(f"{where} must name exactly one of \"webhook\" (a URL) or \"command\"")
    webhook, command = entry.get("webhook"), entry.get("command")
    if webhook is not None:
        _check_url(webhook, where)
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ConfigError(f"{where}.command must be a non-empty shell command")
    return Destination(webhook, command, _wanted(entry.get("events"), where))


def _check_url(url: Any, where: str) -> None:
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}.webhook must be an http:// or https:// URL (got {printable(repr(url))})")


def _wanted(names: Any, where: str) -> frozenset[str]:
    """The notification names a destination asked for; all of them when it names none."""
    if names is None:
        return frozenset(NOTIFICATIONS)
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}.events must be a non-empty list of: {', '.join(NOTIFICATIONS)}")
    unknown = [n for n in names if n not in NOTIFICATIONS]
    if unknown:
        raise ConfigError(f"{where}.events: unknown event {printable(repr(unknown[0]))} "
                          f"(choose from {', '.join(NOTIFICATIONS)})")
    return frozenset(names)


# ---- the outbox ---------------------------------------------------------------------------------------

def _load_outbox(path: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]], list[str]]:
    """The pending items, each slow destination's backoff, and a line if the file could not be read
    (then it starts afresh: losing notifications beats failing every pass on a damaged file)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], {}, []
    except OSError as e:
        return [], {}, [f"notifications: cannot read {path.name} ({e.strerror}); pending notifications dropped"]
    try:
        doc = orjson.loads(raw)
        items = doc["pending"]
        if not isinstance(items, list) or not all(_valid_item(i) for i in items):
            raise ValueError
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return [], {}, [f"notifications: {path.name} is damaged; pending notifications dropped"]
    slow = doc.get("slow")
    if not isinstance(slow, dict):
        slow = {}
    slow = {k: v for k, v in slow.items() if isinstance(v, dict)
            and all(isinstance(v.get(f), int) and not isinstance(v.get(f), bool) for f in ("strikes", "skip"))}
    return items, slow, []


def _valid_item(item: Any) -> bool:
    return (isinstance(item, dict) and isinstance(item.get("dest"), str) and isinstance(item.get("event"), dict)
            and isinstance(item.get("tries"), int))


def _save_outbox(path: Path, items: list[dict[str, Any]], slow: dict[str, dict[str, int]] | None = None) -> list[str]:
    """Write the pending items (none: no file); a line when the home refuses (a full disk): the
    deliveries go on, but what fails now is not retried."""
    slow = {k: v for k, v in (slow or {}).items() if any(i["dest"] == k for i in items)}
    try:
        if items:
            doc: dict[str, Any] = {"pending": items}
            if slow:
                doc["slow"] = slow
            write_atomic(path, orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE))
        else:
            path.unlink(missing_ok=True)
    except OSError as e:
        return [printable(f"notifications: cannot write {path.name}: {e.strerror or e}")]
    return []


def _enqueue(items: list[dict[str, Any]], destinations: Sequence[Destination], new_events: Sequence[Event]) -> None:
    """One item per destination that wants each event; an event (by its id) already waiting for a
    destination is not queued for it twice (a pass telling what a crashed pass may have queued)."""
    waiting = {(i["dest"], i["event"].get("id")) for i in items if i["event"].get("id") is not None}
    for event in new_events:
        name = notification(event)
        if name is None:
            continue
        for dest in destinations:
            if event.id is not None and (dest.key, event.id) in waiting:
                continue
            if dest.wants(name, event):
                items.append({"dest": dest.key, "name": name, "event": event.to_json(), "tries": 0})


def _cap(items: list[dict[str, Any]], by_key: dict[str, Destination]) -> tuple[list[dict[str, Any]], list[str]]:
    """Drop what waited through MAX_TRIES failed passes, and the oldest beyond MAX_PENDING per
    destination; a line for each destination that lost some."""
    expired: dict[str, int] = {}
    kept = []
    for item in items:
        if item["tries"] >= MAX_TRIES:
            expired[item["dest"]] = expired.get(item["dest"], 0) + 1
        else:
            kept.append(item)
    lines = [f"notifications: gave up on {n} notification(s) to {by_key[key].label} after {MAX_TRIES} failed passes"
             for key, n in expired.items()]
    excess: dict[str, int] = {}
    for item in kept:
        excess[item["dest"]] = excess.get(item["dest"], 0) + 1
    excess = {key: n - MAX_PENDING for key, n in excess.items() if n > MAX_PENDING}
    lines += [f"notifications: {n} more than {MAX_PENDING} waiting for {by_key[key].label}; the oldest dropped"
              for key, n in excess.items()]
    result = []
    for item in kept:  # oldest first: drop from the front of each destination's queue
        if excess.get(item["dest"], 0) > 0:
            excess[item["dest"]] -= 1
            continue
        result.append(item)
    return result, lines


# ---- delivery -----------------------------------------------------------------------------------------

def queue(outbox_path: Path, destinations: Sequence[Destination], new_events: Sequence[Event]) -> list[str]:
    """Queue what `new_events` mean for `destinations` in the outbox and save it, sending nothing:
    a pass does this before it logs the events, so an event in the log is also in the outbox."""
    if not any(notification(e) for e in new_events):
        return []
    by_key = {d.key: d for d in destinations}
    items, slow, lines = _load_outbox(outbox_path)
    items = [i for i in items if i["dest"] in by_key]
    _enqueue(items, list(by_key.values()), new_events)
    items, dropped = _cap(items, by_key)
    return lines + dropped + _save_outbox(outbox_path, items, slow)


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
    items, slow, lines = _load_outbox(outbox_path)
    items = [i for i in items if i["dest"] in by_key]  # a destination removed from machines.json: forget its items
    _enqueue(items, list(by_key.values()), new_events)
    items, dropped = _cap(items, by_key)
    lines += dropped
    resting = {key for key, backoff in slow.items() if backoff["skip"] > 0 and key in by_key}
    for key in resting:
        slow[key]["skip"] -= 1
    lines += _save_outbox(outbox_path, items, slow)  # on disk before sending: a crash now sends again, never loses
    sendable = [i for i in items if i["dest"] not in resting]
    if not sendable:
        return lines
    results = _send_all(sendable, by_key, deadline, outbox_path.parent)
    remaining = []
    skipped = dict.fromkeys(results, 0)
    for item in items:  # in their order: each destination's first `sent` items were taken
        if item["dest"] in resting:
            remaining.append(item)  # sitting out this pass: not a try
            continue
        sent, _ = results[item["dest"]]
        if skipped[item["dest"]] < sent:
            skipped[item["dest"]] += 1
            continue
        item["tries"] += 1  # only a failed destination leaves items behind
        remaining.append(item)
    for key, (_, error) in results.items():
        if error is not None:
            waiting = sum(1 for i in remaining if i["dest"] == key)
            rest = 0
            if error in _SLOW:
                rest = _strike(slow, key)
            else:
                slow.pop(key, None)  # a destination that answers, even with an error, is not slow
            later = f"; it sits out the next {rest} pass(es)" if rest else ""
            lines.append(printable(f"notifications: {by_key[key].label}: {error}; "
                                   f"{waiting} waiting for the next pass{later}"))
        else:
            slow.pop(key, None)
    return list(dict.fromkeys(lines + _save_outbox(outbox_path, remaining, slow)))  # a write refused twice: one line


def _strike(slow: dict[str, dict[str, int]], key: str) -> int:
    """One more pass in a row that `key` ran out of time; how many passes it now sits out."""
    backoff = slow.setdefault(key, {"strikes": 0, "skip": 0})
    backoff["strikes"] += 1
    over = backoff["strikes"] - SLOW_STRIKES
    backoff["skip"] = min(MAX_SKIP, 2 ** (over + 1) - 1) if over >= 0 else 0
    return backoff["skip"]


class _Sockets:
    """The connections a delivery has open: all closed at its deadline, which wakes a thread blocked
    reading from a webhook that drips its answer (a socket timeout bounds each read, not the whole)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self.closed = False

    def add(self, conn: http.client.HTTPConnection) -> bool:
        with self._lock:
            if not self.closed:
                self._open.add(conn)
            return not self.closed

    def remove(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(conn)

    def close_all(self) -> None:
        with self._lock:
            self.closed = True
            conns = list(self._open)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()


REAP_SECONDS = 1.0  # after the deadline closed its sockets, how long a delivery waits for its threads


def _send_all(items: list[dict[str, Any]], by_key: dict[str, Destination], deadline: float,
              home: Path) -> dict[str, tuple[int, str | None]]:
    """Each destination's items, in order, on a thread of its own; per destination how many were
    taken and why it stopped. At the deadline every webhook socket is closed (a command's group is
    killed by its own timeout), so each thread ends; a daemon thread, never holding up the process."""
    results: dict[str, tuple[int, str | None]] = {}
    lock = threading.Lock()
    sockets = _Sockets()

    def serve(dest: Destination, queue: list[dict[str, Any]]) -> None:
        sent = 0
        error: str | None = None
        for item in queue:
            try:
                error = _send(dest, item, deadline, home, sockets)
            except Exception as e:  # a destination may fail in ways no list foresees: never the pass's fault
                error = "timed out" if sockets.closed else f"{type(e).__name__}: {e}"
            if error is not None:
                break
            sent += 1
            with lock:
                results[dest.key] = (sent, None)
        with lock:
            results[dest.key] = (sent, error)

    threads = []
    for key, dest in by_key.items():
        queue = [i for i in items if i["dest"] == key]
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
        if error is None and sent < sum(1 for i in items if i["dest"] == key):
            final[key] = (sent, "out of time")
    return final


def _send(dest: Destination, item: dict[str, Any], deadline: float, home: Path, sockets: _Sockets) -> str | None:
    """Deliver one item; None when taken, else why not (one short line)."""
    left = deadline - time.monotonic()
    if left <= 0:
        return "out of time"
    event = Event.from_json(item["event"])
    text = headline(item.get("name", ""), event) if event else "jobtpu event"
    if dest.webhook and dest.pinned:
        return _post_checked(dest.webhook, text, item["event"], left)
    if dest.webhook:
        return _post(dest.webhook, text, item["event"], left, sockets)
    return _run(dest.command or "", text, item, left, home)


def headline(name: str, event: Event) -> str:
    """The line a person reads: `jobtpu: failed: job 12 attempt 2 on box: failed (exit 1)`."""
    return printable(f"jobtpu: {name.replace('_', ' ')}: {describe(event)}")


def _slack_escape(text: str) -> str:
    """Slack reads <…> as links and mentions (<!channel>): a job name must not ping anyone."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _post(url: str, text: str, event: dict[str, Any], timeout: float, sockets: _Sockets) -> str | None:
    """POST the event; a redirect is reported as the HTTP status it is (followed, the POST would
    become a GET without the body, and its 200 be taken for a delivery)."""
    body = orjson.dumps({"text": _slack_escape(text), "event": event})
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = _proxy(parts)
    try:
        if proxy is None:
            conn = kind(parts.hostname or "", parts.port, timeout=timeout)
        elif parts.scheme == "https":  # a CONNECT tunnel through the proxy
            conn = kind(proxy.hostname or "", proxy.port, timeout=timeout)
            conn.set_tunnel(parts.hostname or "", parts.port)
        else:  # the proxy is asked for the whole URL
            conn = http.client.HTTPConnection(proxy.hostname or "", proxy.port, timeout=timeout)
            target = url
    except ValueError as e:  # a port that is not a number
        return str(e)
    if not sockets.add(conn):
        return "out of time"
    try:
        conn.connect()
        if sockets.closed:  # the deadline came while connecting: close_all may not have seen this socket
            return "timed out"
        conn.request("POST", target, body=body,
                     headers={"Content-Type": "application/json", "User-Agent": "jobtpu"})
        answer = conn.getresponse()
        answer.read(65536)
        return None if 200 <= answer.status < 300 else f"HTTP {answer.status}"
    except TimeoutError:
        return "timed out"
    except OSError as e:
        return "timed out" if sockets.closed else (e.strerror or str(e))
    finally:
        sockets.remove(conn)
        conn.close()


def _proxy(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult | None:
    """The HTTP proxy the environment names for this URL (http_proxy, https_proxy, no_proxy), as
    urllib would choose it; None to connect directly."""
    import urllib.request

    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    found = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return found if found.hostname else None


def _post_checked(url: str, text: str, event: dict[str, Any], timeout: float) -> str | None:
    """A member's webhook: every address its name resolves to checked now, the checked one used."""
    from jobtpu.tell.webhooks import check, post

    address, why = check(url)
    if address is None:
        return f"skipped: {why}"
    body = orjson.dumps({"text": _slack_escape(text), "event": event})
    try:
        status = post(url, address, body, {"Content-Type": "application/json", "User-Agent": "jobtpu"}, timeout)
    except TimeoutError:
        return "timed out"
    except OSError as e:
        return e.strerror or str(e)
    return None if 200 <= status < 300 else f"HTTP {status}"


def _run(command: str, text: str, item: dict[str, Any], timeout: float, home: Path) -> str | None:
    env = {**os.environ, "JOBTPU_NOTIFY_EVENT": str(item.get("name", "")), "JOBTPU_NOTIFY_TEXT": text}
    # stderr goes to a file, not a pipe: a child that keeps the pipe open could never block us.
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=err, env=env, cwd=home, start_new_session=True)
        except OSError as e:
            return f"cannot run bash: {e.strerror}"
        try:
            proc.communicate(orjson.dumps(item["event"]) + b"\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return "timed out (stopped)"
        if proc.returncode == 0:
            return None
        err.seek(0)
        last = (err.read()[-4096:].decode(errors="replace").strip().splitlines() or [""])[-1]
        return f"exit {proc.returncode}" + (f": {last[:200]}" if last else "")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

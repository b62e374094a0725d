"""What a manage pass tells after it saved its result: the events it saw (appended to events.jsonl),
the notifications they mean (notify.py), and when the pass ran (state.json's `last_pass`, for the
freshness line of `status`).

A job's events are made from the status changes the pass made (decide's and settle's Transitions), a
machine's from its record as the pass read it against what it saves (passes/changes.py). The pass's
`EventsHook` remembers the machine records as read before it decides, keeps the events in the result
it saves, and tells them after; `pass_failed` is called by whoever runs
passes when one raises."""

from __future__ import annotations

import secrets as random_ids
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobtpu import timing
from jobtpu.decide import events as ev
from jobtpu.decide.events import Event
from jobtpu.errors import JobtpuError
from jobtpu.home import fence
from jobtpu.passes.changes import PHASE, job_events, machine_events
from jobtpu.render.text import printable
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import MachineRecord
from jobtpu.schema.state import recorded
from jobtpu.tell import eventlog

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobtpu.decide.observation import Observation
    from jobtpu.passes.session import Session
    from jobtpu.schema.state import Transition
    from jobtpu.schema.state_file import Encoded


class RecordsAsRead(msgspec.Struct):
    machines: list[bytes]  # each machine's `"name": {...}` as the pass read it
    observed: float  # when the pass finished observing (setups it ran had ended by then)
    untold: list[Event]  # what the last pass (or kill) saved to tell, as this pass read it


_MACHINES = msgspec.json.Decoder(dict[str, MachineRecord])
# How far back from its end events.jsonl is searched for the untold events a pass finds: they were
# told at the end of the last pass, so they are at the end unless the log rotated since (then some
# are told again: duplicates are allowed, loss is not).
TOLD_LOOKBACK = 2000
# At most this many events wait in `untold` (the newest kept): a log that cannot be written for
# many passes (a full disk) must not grow state.json without end.
MAX_UNTOLD = 1000



class EventsHook:
    """A pass's events: the records as read (before it decides), the events their changes mean kept
    in the result it saves, told after. `every`: the interval of the loop running the pass, recorded
    with it so that `status` knows when passes are late."""

    def __init__(self, every: float | None) -> None:
        self.every = every
        self.before: RecordsAsRead | None = None
        self.at_intents: set[Any] = set()  # ids of the events saved with the intents, until the result

    def before_decide(self, p: Session, seen: Observation) -> list[str]:
        """Remember the records as the pass read them (the session's merge base, not yet committed)."""
        self.before = RecordsAsRead(list(p.base.machines), time.time(), list(p.base_untold))
        return []

    def before_intents(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        """What the intents' save calls: the events the pass's changes so far mean (a job seen ended,
        a launch decided, a machine's step), in `untold` with that save. A pass killed while it acts
        has saved them, and the next pass tells them; the result's save replaces them with what the
        whole pass did (docs/design.md §3)."""
        before = self.before
        if before is None:
            return None

        def amend(encoded: Encoded) -> None:
            found = with_ids(self._found(p, seen, before, moves, time.time()))
            self.at_intents = {event.id for event in found}
            p.state.untold = (p.state.untold + found)[-MAX_UNTOLD:]

        return amend

    def before_result(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        """Record the pass's time in the state the pass is about to save as its result (one write: a
        pass writes state.json at most twice, intents and result). Returns what the result's commit
        calls with the state as encoded: it decides the pass's events and keeps them, with what an
        earlier pass left untold, in state.json's `untold`, in that same atomic save (docs/design.md §3)."""
        before = self.before
        if before is None:
            return None
        now = time.time()
        t = timing.current()
        p.state.last_pass = recorded(p.state.last_pass, now, now - seen.now, self.every, t.stale_intervals,
                                     t.default_interval)

        def amend(encoded: Encoded) -> None:
            found = self._found(p, seen, before, moves, now) + fence.take_events()  # a takeover by this runner
            earlier = [event for event in p.state.untold if event.id not in self.at_intents]
            p.state.untold = (still_untold(p.home.root, earlier) + with_ids(found))[-MAX_UNTOLD:]

        return amend

    @staticmethod
    def _found(p: Session, seen: Observation, before: RecordsAsRead, moves: Sequence[Transition],
               now: float) -> list[Event]:
        """The events of the pass's moves and of every machine record it changed, in the order they happened."""
        found = machine_events(_MACHINES.decode(b"{" + b",".join(before.machines) + b"}"), p.state.machines,
                               seen.now, before.observed)
        found += job_events(moves, p.state.jobs, before.observed, now)
        found.sort(key=lambda e: (e.time, PHASE.get(e.kind, 1)))  # stable: what one record says keeps its order
        return found

    def after_pass(self, p: Session, seen: Observation) -> list[str]:
        """Tell what the pass saved to tell (its result, with `untold`, is saved): queue the
        notifications, log the events, deliver. Returns lines for the user (a destination that
        failed); never raises for a destination."""
        if self.before is None:
            return []
        self.before = None
        return tell(p.home.root, p.fleet.notify, p.state.untold)


def with_ids(found: list[Event]) -> list[Event]:
    """The events as state.json's `untold` keeps them, each with an id of its own."""
    for event in found:
        if event.id is None:
            event.id = random_ids.token_hex(8)
    return found


def told_by_hand(p: Session, found: list[Event]) -> list[str]:
    """Events a command outside a pass decided (update, drain): saved in `untold` with the change that
    caused them, in one commit, then logged (no notification is made of them, as of a kill)."""
    if not found:
        return []
    p.state.untold = [*p.state.untold, *with_ids(found)]
    p.commit()
    return log(p.home.root, found)


def still_untold(home_root: Path, untold: list[Event]) -> list[Event]:
    """Of the events an earlier pass saved to tell, those not in events.jsonl: it died before it told
    them (the outbox is written before the log, so one in the log is queued too)."""
    if not untold:
        return []
    told = {e.id for e in eventlog.latest(home_root, TOLD_LOOKBACK + len(untold))}
    return [event for event in untold if event.id not in told]


def tell(home_root: Path, destinations: list[Any], untold: list[Event]) -> list[str]:
    """Tell events saved in state.json's `untold`: they stay there until a later save finds them in
    the log (`still_untold`)."""
    return publish(home_root, destinations, list(untold))


def publish(home_root: Path, destinations: list[Any], found: list[Event]) -> list[str]:
    """Queue the notifications the events mean, append the events to the log, deliver. In that
    order, the log only once the outbox is saved: an event in the log is in the outbox too, so a
    pass that finds it there need not tell it."""
    from jobtpu.tell.outbox import OUTBOX_FILE

    lines: list[str] = []
    news = any(ev.notification(e) for e in found)
    if news or (home_root / OUTBOX_FILE).exists():  # users' own destinations, and the checks: only when there is news
        own, problems = users_destinations(home_root)
        destinations, lines = checked_webhooks(home_root, [*destinations, *own], lines + problems)
    queued = True
    if destinations and news:
        from jobtpu.tell.outbox import queue

        said, queued = queue(home_root / OUTBOX_FILE, destinations, found)
        lines += said
    # Logged only once queued: a later pass drops from `untold` what it finds in the log (design §3).
    lines += log(home_root, found) if queued else ["events: not logged while the outbox cannot be written; "
                                                   "the next pass tells them again"]
    if destinations:
        from jobtpu.tell.notify import deliver

        lines += deliver(home_root / OUTBOX_FILE, destinations, [], timing.current().notify_budget)
    return lines


def log(home_root: Path, found: list[Event]) -> list[str]:
    """Append the events to events.jsonl only (what no notification is made of: a kill, a failed
    pass, told outside a pass, which must not deliver the outbox without machines.json's destinations)."""
    try:
        cleared = eventlog.append(home_root, found)
    except OSError as e:  # a full disk costs the log its lines, never the pass
        return [printable(f"events: cannot write {eventlog.EVENTS_FILE}: {e.strerror or e}")]
    except JobtpuError as e:  # a link, a FIFO or a held lock there: one line, never the pass
        return [printable(f"events: {e.message}")]
    return [printable(f"events: {line}") for line in cleared]


def users_destinations(home_root: Path) -> tuple[list[Any], list[str]]:
    """The webhooks users named in their own settings (`jobtpu config set notify`), each hearing of
    its user's jobs; a line for each settings file that cannot be read (its destinations wait, and
    everyone else's are served: docs/reference/machines-json.md §3.10)."""
    from jobtpu.decide.destinations import parse_destinations
    from jobtpu.errors import JobtpuError
    from jobtpu.home.layout import Home
    from jobtpu.home.places import settings_owner_refusal
    from jobtpu.home.roles import Layout, role_of
    from jobtpu.home.settings import MAX_SETTINGS_LINES, load_settings, settings_users

    home = Home(home_root)
    shared = role_of(home_root).layout is Layout.SHARED
    found: list[Any] = []
    lines: list[str] = []
    users, left = settings_users(home)
    if left:
        lines.append(f"notify: users/ holds {len(users) + left} users' folders; only the first {len(users)} "
                     f"by name had their settings read, the {left} after them are skipped")
    skipped = 0
    for user in users:
        where = f"users/{user}/settings.json"
        try:
            refusal = settings_owner_refusal(home_root, user) if shared else None
            if refusal is not None:
                raise JobtpuError(refusal)
            settings = load_settings(home, user, own=False)  # data: the member's own webhooks
            dests = parse_destinations(settings.notify, f"{where}: notify", owner=user)
        except JobtpuError as e:
            skipped += 1
            if skipped <= MAX_SETTINGS_LINES:
                lines.append(printable(f"notify: {e.message}; {user}'s own destinations are skipped"))
            continue
        except OSError as e:  # unreadable to the account running the pass (a chmod 600), or gone
            skipped += 1
            if skipped <= MAX_SETTINGS_LINES:
                lines.append(printable(f"notify: cannot read {where} ({e.strerror or e}); "
                                       f"{user}'s own destinations are skipped"))
            continue
        found.extend(dests)  # every webhook is checked where it is sent (tell/webhooks.refusal)
    if skipped > MAX_SETTINGS_LINES:
        lines.append(f"notify: and {skipped - MAX_SETTINGS_LINES} more users' settings could not be used; "
                     "their own destinations are skipped")
    return found, lines


def _private_webhooks_allowed(home_root: Path) -> bool:
    from jobtpu.home.trust import load_runner

    return load_runner(home_root).allow_private_webhooks


def checked_webhooks(home_root: Path, found: list[Any], lines: list[str]) -> tuple[list[Any], list[str]]:
    """Every webhook, wherever declared, unless the runner's trusted runner.json allows private
    addresses: one at a private address is skipped with one line; the others are posted only to the
    address checked when each is sent (docs/design.md §7). A name that does not resolve now is kept:
    its items wait in the outbox, and the check at sending says why (a passing DNS failure loses none)."""
    from jobtpu.tell.webhooks import check

    if not any(dest.webhook for dest in found) or _private_webhooks_allowed(home_root):
        return found, lines
    kept = []
    for dest in found:
        if dest.webhook is None:
            kept.append(dest)
            continue
        checked = check(dest.webhook)
        if checked.private:
            whose = f"{dest.owner}'s " if dest.owner is not None else ""
            lines.append(printable(f"notify: {whose}{dest.label}: {checked.why}: skipped (runner.json's "
                                   '"allow_private_webhooks" allows it)'))
        else:
            kept.append(msgspec.structs.replace(dest, pinned=True))
    return kept, lines


def pass_failed(home_root: Path, destinations: list[Any], error: str) -> list[str]:
    """A pass raised: say so in the log (`jobtpu events`, the dashboard), once per change: a pass
    failing the same way as the last one, with nothing logged between, writes nothing."""
    first = (error.strip().splitlines() or ["unknown error"])[-1][:300]
    last = eventlog.latest(home_root, 1)
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


"""What this process holds of a home's runner lease, the round that takes, renews or waits for it,
and the check every save of state.json and every launch makes (docs/reference/home-files.md §1.7).

A process that holds no lease of a home (a member's command, `submit`, `status`, a home without a
standby) is not fenced: only a runner's pass can be a stale runner. A process that held one is
refused every write and launch once it lost it (a higher token in lease/) or was paused past it
(its own monotonic clock): it raises Fenced, which a loop does not survive."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from jobtpu import timing
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import NEVER_MADE, Home

if TYPE_CHECKING:  # the lease's modules are imported by a runner's round: a command holding none never needs them
    from jobtpu.home.lease_rules import Held
    from jobtpu.schema.events import Event

RUNNER_TAKEOVER = "runner_takeover"  # an event kind (decide/events.py lists it)


class Fenced(JobtpuError):
    """This runner lost its lease: it must write and start nothing more (a loop stops on it)."""

    exit_code = 3


_held: dict[str, Held] = {}
_events: list[Event] = []
_handed_over: set[str] = set()  # homes whose lease this process handed over: it stands by since


def holding(home: Home) -> Held | None:
    return _held.get(str(home.root))


def drop(home: Home) -> None:
    _held.pop(str(home.root), None)
    NEVER_MADE.discard(str(home.root))


def take_events() -> list[Event]:
    """The takeover events not yet told (a pass keeps them with its result, design §3)."""
    found = list(_events)
    _events.clear()
    return found


def lease_seconds(interval: float | None) -> float:
    """How long a renewal holds: `lease_intervals` of the runner's interval (cron's or the loop's)."""
    t = timing.current()
    return t.lease_intervals * (interval or t.default_interval)


def round_(home: Home, standby: bool, interval: float | None) -> tuple[bool, list[str]]:
    """Take, renew or wait for the lease before a round; (whether this process may run the round,
    lines to say). A home without lease/ and a runner that is no standby: no lease, as before.
    Raises Fenced when this process lost its lease; OSError when the home cannot be read."""
    from jobtpu.home import lease
    from jobtpu.home.lease_rules import Held, Lease, judge, watched
    from jobtpu.schema.events import Event

    standby = standby or str(home.root) in _handed_over
    if not standby and not lease.in_use(home) and holding(home) is None:
        return True, []
    lease.ensure(home)
    who, now, boot = lease.me(), time.monotonic(), lease.boot_id()
    held = holding(home)
    top, current = lease.current(home)
    seconds = current.seconds if current is not None and (held is None or top > held.token) \
        else lease_seconds(interval)
    seen = lease.load_seen(home, who) if held is None else None
    step = judge(top, current, who, held, standby, seen, now, boot, seconds)
    lines = [step.line] if step.line else []
    if step.kind == "fenced":
        drop(home)
        raise Fenced(step.line)
    if step.kind == "wait":
        beat = current.beat if current is not None else (-1 if top else 0)
        lease.save_seen(home, who, watched(seen, top, beat, now, boot))
        return False, lines
    mine = Lease(step.token, who.runner, who.box, who.pid, lease_seconds(interval), time.time(),
                 (current.beat + 1) if step.kind == "renew" and current is not None else 0)
    if step.kind == "take":
        if not lease.create(home, mine):
            return False, [f"another runner took lease token {step.token} first; this one stands by"]
        was = current.holder if current is not None else None
        _events.append(Event(time.time(), RUNNER_TAKEOVER, detail={"from": was, "to": who.name, "token": step.token,
                                                                   "why": step.line}))
        lease.prune(home, step.token)
    else:
        lease.renew(home, mine)
    _held[str(home.root)] = Held(step.token, now, mine.seconds)
    NEVER_MADE.add(str(home.root))  # a home gone while this runner holds it is not made again (§1.7)
    if lease.handover_asked(home):
        lease.renew(home, mine._replace(released=True, beat=mine.beat + 1))
        lease.handover_done(home)
        drop(home)
        _handed_over.add(str(home.root))
        return False, [*lines, f"this runner handed the lease over (token {step.token}); it now stands by"]
    return True, lines


_lock_missed: dict[str, float] = {}  # since when (monotonic) the lease holder finds the pass lock taken


def pass_lock_overdue(home: Home, got: bool) -> tuple[bool, bool]:
    """Whether the lease holder goes on without the pass lock: another process has held it for a whole
    lease of this runner's. Only a runner that lost the lease (paused mid-pass: it saves and launches
    nothing) or a command stuck that long holds it so; waiting on it would leave the home without
    passes for as long as a stopped process stays stopped. (Whether to go on, whether to say so: once.)"""
    held, key = holding(home), str(home.root)
    if got or held is None:
        _lock_missed.pop(key, None)
        return False, False
    since = _lock_missed.setdefault(key, time.monotonic())
    if time.monotonic() - since < held.seconds:
        return False, False
    first = since >= 0
    _lock_missed[key] = -1.0 - time.monotonic()  # overdue from now on, until the lock is free again
    return True, first


def check(home: Home) -> int | None:
    """Before a save of state.json or a launch: the token this process holds (None: it holds none and
    is not fenced). Raises Fenced when it lost the lease or was paused past it; renews it when a third
    of it has gone by, so a long pass keeps it."""
    held = holding(home)
    if held is None:
        return None
    from jobtpu.home import lease

    now = time.monotonic()
    top = lease.tokens(home)
    step_line = ""
    if top and top[-1] > held.token:
        step_line = f"this runner lost the lease (token {top[-1]} > {held.token}); it writes and starts nothing more"
    elif held.lapsed(now):
        step_line = (f"this runner was stopped or frozen past its lease (token {held.token}); it writes "
                     "and starts nothing more")
    if step_line:
        drop(home)
        raise Fenced(step_line)
    if now - held.renewed > held.seconds / 3:
        current = lease.read(home, held.token)
        if current is not None:
            lease.renew(home, current._replace(beat=current.beat + 1, renewed=time.time()))
            _held[str(home.root)] = held._replace(renewed=now)
    return held.token


_TOKEN = re.compile(rb'\n  "runner_token": (\d+),\n')


def token_in(raw: bytes | None) -> int:
    """The runner token a state.json's head records (0: none)."""
    if not raw:
        return 0
    found = _TOKEN.search(raw, 0, 4096)
    return int(found[1]) if found else 0


def check_save(home: Home, previous: bytes | None) -> int | None:
    """Under the state lock, right before the rename: `check`, and refuse when state.json was last
    written with a newer token than this runner's (a runner that took over wrote it)."""
    token = check(home)
    if token is not None and token_in(previous) > token:
        drop(home)
        raise Fenced(f"state.json was written by a newer runner (token {token_in(previous)} > {token}); "
                     "this runner writes and starts nothing more")
    return token


def with_token(head: bytes, token: int) -> bytes:
    """state.json's head (schema/state_file.encode_head) recording `token` as its runner's."""
    line = b'  "runner_token": %d,\n' % token
    head = re.sub(rb'  "runner_token": \d+,\n', b"", head)
    at = head.find(b'  "next_id"')
    end = head.find(b"\n", at) + 1 if at >= 0 else 0
    return head[:end] + line + head[end:]

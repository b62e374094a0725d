"""How many jobs ended, by outcome and user, and how many preemptions each machine had: counted from
the events, for `jobtpu metrics`' counters (docs/reference/commands.md §2.30), which Prometheus'
`rate()` reads only if they never go down.

The log keeps its last files only (eventlog.py rotates it and drops the oldest), so what the dropped
file counted is carried first into `events.totals.json` (docs/reference/home-files.md), under the
log's lock: the counts of the events still in the log plus the carried ones only grow. `clean` moves
jobs to history and never touches the log, so it changes no count. `tally` is pure; `load` and
`save` are the file."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from jobtpu.decide import events as ev
from jobtpu.decide.events import Event
from jobtpu.errors import JobtpuError
from jobtpu.home import safefs
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import ENDED

TOTALS_FILE = "events.totals.json"
OUTCOMES = tuple(sorted(s.value for s in ENDED))  # every label value of an ended job's outcome


# A count is never below 0: a file that says one is (broken by hand, or planted) is refused, never
# a counter that goes down.
Count = Annotated[int, msgspec.Meta(ge=0)]


class Totals(msgspec.Struct, forbid_unknown_fields=False):
    ended: dict[str, dict[str, Count]] = msgspec.field(default_factory=dict)  # user → outcome → jobs
    preempted: dict[str, Count] = msgspec.field(default_factory=dict)  # machine → preemptions

    def plus(self, other: Totals) -> Totals:
        ended = {user: dict(row) for user, row in self.ended.items()}
        for user, row in other.ended.items():
            mine = ended.setdefault(user, {})
            for outcome, n in row.items():
                mine[outcome] = mine.get(outcome, 0) + n
        preempted = dict(self.preempted)
        for machine, n in other.preempted.items():
            preempted[machine] = preempted.get(machine, 0) + n
        return Totals(ended, preempted)


def tally(events: Iterable[Event]) -> Totals:
    """Pure: the counts the events make. An event told twice (a pass that found it missing from the
    log's end after a rotation tells it again, docs/design.md §3) counts once: its id is the same."""
    out = Totals()
    seen: set[str] = set()
    for event in events:
        if event.id is not None:
            if event.id in seen:
                continue
            seen.add(event.id)
        if event.kind == ev.JOB_ENDED and str(event.detail.get("status")) in OUTCOMES:
            row = out.ended.setdefault(event.user or "", {})
            outcome = str(event.detail["status"])
            row[outcome] = row.get(outcome, 0) + 1
        elif event.kind == ev.PREEMPTED and event.machine:
            out.preempted[event.machine] = out.preempted.get(event.machine, 0) + 1
    return out


_DECODE = msgspec.json.Decoder(Totals)


def load(home_root: Path) -> Totals:
    """What rotations carried (none yet: nothing)."""
    try:
        raw = safefs.read_regular(home_root, TOTALS_FILE, safefs.CAP_SMALL)
    except FileNotFoundError:
        return Totals()
    try:
        return _DECODE.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise JobtpuError(f"{TOTALS_FILE} cannot be read ({e})",
                          hint="restore it, or remove it: the counters then start again from the events "
                               "still in the log") from None


def save(home_root: Path, totals: Totals) -> None:
    """Whole or not at all, with the log's own mode (the shared home's group reads it)."""
    fd = safefs.open_dir(home_root)
    try:
        safefs.write_in(fd, TOTALS_FILE, msgspec.json.encode(totals), safefs.file_mode_of(fd))
    finally:
        os.close(fd)

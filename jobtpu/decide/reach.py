"""Whether an ssh machine is up or unreachable: one pure rule over the contacts a pass made with its
workers (probe, launch, snapshot copy, stop), applied by the pass to the machine's record.

Every contact counts the same, so a stop that fails on a machine with no running job says so as a
failed probe would, and the first contact that works says the machine is up again at once."""

from __future__ import annotations

import threading

from jobtpu import timing
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import MachineRecord, MachineState

UP, UNREACHABLE = MachineState.UP, MachineState.UNREACHABLE


class Contact(msgspec.Struct, frozen=True):
    """One contact with a worker: None if it answered, else why not (one line naming the worker)."""

    worker: int
    failure: str | None = None


class ReachState(msgspec.Struct, frozen=True):
    state: MachineState | None
    detail: str | None
    since: float | None  # when it became unreachable
    next_try: float | None  # until when it takes no new job


def reachability(was: ReachState, contacts: list[Contact], now: float) -> ReachState:
    """What the machine is after this pass's contacts (in the order made): a worker whose last
    contact failed makes it unreachable, with that failure as the cause; every contacted worker
    answering makes it up at once; no contact leaves it as it was. A reused connection that failed
    and was then made afresh counts by the fresh one (the worker's last contact)."""
    last = {c.worker: c for c in contacts}
    failed = sorted((c for c in last.values() if c.failure is not None), key=lambda c: c.worker)
    if failed:
        since = was.since if was.state == UNREACHABLE and was.since is not None else now
        return ReachState(UNREACHABLE, failed[0].failure, since, now + timing.current().unreachable_retry)
    if last:
        return ReachState(UP, None, None, None)
    return was


def takes_jobs(record: MachineRecord, now: float) -> bool:
    """An unreachable machine waits timing's unreachable_retry seconds after its last failed contact before it is offered
    a job again (a launch there costs a connect timeout); one that answered since is up."""
    return record.state != UNREACHABLE or record.next_try is None or now >= record.next_try


def apply(record: MachineRecord, contacts: list[Contact], now: float) -> None:
    was = ReachState(record.state, record.detail, record.since, record.next_try)
    now_is = reachability(was, contacts, now)
    record.state, record.detail, record.since, record.next_try = now_is.state, now_is.detail, now_is.since, now_is.next_try


class Contacts:
    """The contacts a session made, by machine, as its threads make them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_machine: dict[str, list[Contact]] = {}

    def add(self, machine: str, worker: int, failure: str | None = None) -> None:
        with self._lock:
            self._by_machine.setdefault(machine, []).append(Contact(worker, failure))

    def of(self, machine: str) -> list[Contact]:
        with self._lock:
            return list(self._by_machine.get(machine, []))

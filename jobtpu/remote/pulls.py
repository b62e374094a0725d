"""Log bytes from the workers to the home: the probe every pass (and `tail -f`) makes, and the
catch-up once an attempt ends, so its log at home is whole as far as its machine still has it
(a probe brings at most a chunk a pass, and an ended attempt is never probed again)."""

from __future__ import annotations

from collections.abc import Iterable

from jobtpu.errors import BusyError, RemoteError
from jobtpu.home import logfiles
from jobtpu.home.layout import Home
from jobtpu.home.safefs import UnsafePath
from jobtpu.passes.session import Session, parallel
from jobtpu.remote.scripts import parse_probe, probe_script
from jobtpu.remote.workers import WorkerRef, WorkerState
from jobtpu.schema.machines import Machine
from jobtpu.schema.state import Job
from jobtpu.transport.base import Endpoint

CATCH_UP_CHUNKS = 64  # probes at most per worker once its attempt ended: a log's first 64 MiB past the pull


def probe(p: Session, machine: Machine, ep: Endpoint, refs: list[WorkerRef]) -> dict[WorkerRef, WorkerState]:
    """One round trip to a worker: its workers' liveness, exit codes, and log bytes not yet home."""
    script = probe_script(machine.root, [(r, local_size(p.home, r)) for r in refs], home_id=p.home_id)
    return parse_probe(p.run_on(machine, ep, script, timeout=machine.connect_timeout + 30))


def local_size(home: Home, ref: WorkerRef) -> int:
    try:
        return logfiles.size(home.root, logfiles.log_rel(ref.job, ref.attempt, ref.worker))
    except UnsafePath:
        return 0  # the pull says what is wrong with it


def append_log(home: Home, ref: WorkerRef, offset: int, data: bytes) -> None:
    """Append bytes pulled from `offset` of a worker's log, unless someone else already did."""
    logfiles.append(home.root, logfiles.log_rel(ref.job, ref.attempt, ref.worker), offset, data)


def open_attempts(jobs: Iterable[Job]) -> set[tuple[int, int]]:
    """(job, attempt) of every attempt not ended yet: what ended_since compares with."""
    return {(job.id, a.n) for job in jobs for a in job.attempts if a.ended is None}


def ended_since(jobs: Iterable[Job], was_open: set[tuple[int, int]]) -> dict[str, list[WorkerRef]]:
    """The workers of the attempts that were open and have ended since, by machine."""
    ended: dict[str, list[WorkerRef]] = {}
    for job in jobs:
        for a in job.attempts:
            if a.ended is not None and (job.id, a.n) in was_open:
                ended.setdefault(a.machine, []).extend(WorkerRef(job.id, a.n, w) for w in range(a.workers))
    return ended


def catch_up(p: Session, ended: dict[str, list[WorkerRef]]) -> list[str]:
    """Pull what is left of these workers' logs, a chunk a round trip, until each is home or
    CATCH_UP_CHUNKS were pulled. A worker that cannot be reached keeps the rest (its machine's
    record says why); a log in the home that cannot be written gets one line."""
    work: list[tuple[Machine, Endpoint, list[WorkerRef]]] = []
    for name, refs in sorted(ended.items()):
        machine = p.fleet.get(name)
        if machine is None:
            continue
        for ep in p.endpoints(machine):
            mine = [r for r in refs if r.worker == ep.index]
            if mine:
                work.append((machine, ep, mine))
    return [line for lines in parallel(lambda item: _catch_up_worker(p, *item), work) for line in lines]


def _catch_up_worker(p: Session, machine: Machine, ep: Endpoint, refs: list[WorkerRef]) -> list[str]:
    for _ in range(CATCH_UP_CHUNKS):
        try:
            states = probe(p, machine, ep, refs)
        except RemoteError:
            return []
        behind = []
        for ref, ws in states.items():
            try:
                append_log(p.home, ref, ws.log_offset, ws.log_bytes)
            except (UnsafePath, BusyError) as e:
                return [f"job {ref.job}: {e.message}"]
            if ws.log_bytes and ws.log_offset + len(ws.log_bytes) < ws.log_size:
                behind.append(ref)
        if not behind:
            return []
        refs = behind
    return []

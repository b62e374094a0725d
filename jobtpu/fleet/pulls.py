"""Log bytes from the workers to the home: the probe every pass (and `tail -f`) makes, and the
catch-up once an attempt ends, so its log at home is whole as far as its machine still has it
(a probe brings at most a chunk a pass, and an ended attempt is never probed again). Both are
bounded: a probe brings a chunk per worker, and the catch-up of a pass stops at its time budget
(timing.log_catch_up); an attempt whose log is still behind is marked so and caught up by the next
passes (docs/reference/pass.md §5)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from jobtpu import timing
from jobtpu.decide.workers import WorkerRef, WorkerState
from jobtpu.errors import BusyError, RemoteError
from jobtpu.fleet.drivers import driver_for
from jobtpu.fleet.reach import Reach
from jobtpu.home import logfiles
from jobtpu.home.layout import Home
from jobtpu.home.safefs import UnsafePath
from jobtpu.remote.scripts import parse_probe
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job
from jobtpu.slurm.scripts import slurm_ids
from jobtpu.transport.base import Endpoint

CATCH_UP_CHUNKS = 64  # probes at most per worker and pass once its attempt ended: 64 MiB a pass


def probe(p: Reach, machine: Machine, ep: Endpoint, refs: list[WorkerRef],
          markers: dict[WorkerRef, str] | None = None) -> dict[WorkerRef, WorkerState]:
    """One round trip to a worker: its workers' liveness, exit codes, and log bytes not yet home; and
    whether those named in `markers` wrote their --saved-marker (worker → path)."""
    # A Slurm array member records its own id when it starts: until then the home's is the probe's.
    ids = slurm_ids(p.state.jobs, refs) if machine.scheduled else None
    script = driver_for(machine).probe_script(machine, [(r, local_size(p.home, r)) for r in refs], p.home_id,
                                              sorted((markers or {}).items(), key=lambda item: item[0].stem), ids)
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
    """The workers of the attempts to catch up, by machine: those that were open and have ended
    since, and those an earlier pass left behind (Attempt.logs_behind)."""
    ended: dict[str, list[WorkerRef]] = {}
    for job in jobs:
        for a in job.attempts:
            if a.ended is not None and ((job.id, a.n) in was_open or a.logs_behind):
                # A gang's slice s holds workers s * per … s * per + per - 1 (decide/gang.py), on its own machine.
                names = a.gang or [a.machine]
                per = max(1, a.workers // len(names))
                for w in range(a.workers):
                    ended.setdefault(names[min(w // per, len(names) - 1)], []).append(WorkerRef(job.id, a.n, w))
    return ended


class CatchUp(msgspec.Struct):
    """What a catch-up did: lines for the pass, and the workers whose logs are still behind."""

    lines: list[str] = msgspec.field(default_factory=list)
    behind: set[WorkerRef] = msgspec.field(default_factory=set)


def mark_behind(jobs: Iterable[Job], tried: Iterable[WorkerRef], behind: set[WorkerRef]) -> None:
    """Each tried attempt is behind exactly when one of its workers' logs is: the next passes pull
    the rest, a pass's budget at a time."""
    tried_attempts = {(r.job, r.attempt) for r in tried}
    behind_attempts = {(r.job, r.attempt) for r in behind}
    for job in jobs:
        for a in job.attempts:
            if (job.id, a.n) in tried_attempts:
                a.logs_behind = (job.id, a.n) in behind_attempts


def brought_whole(ws: WorkerState, at_home: int) -> bool:
    """Whether a probe's report of an exited worker is all a catch-up would find: its log is home
    whole (`at_home` bytes of it) and no process of its job is left to write more, so a probe now
    would bring no byte (and the job's saved value, if any, came with that report)."""
    return ws.exit_code is not None and ws.marked == 0 and at_home >= ws.log_size


def catch_up(p: Reach, ended: dict[str, list[WorkerRef]],
             known: dict[WorkerRef, WorkerState] | None = None) -> CatchUp:
    """Pull what is left of these workers' logs, a chunk a round trip, until each is home, or
    CATCH_UP_CHUNKS were pulled, or the pass's budget for it is spent. A worker that cannot be
    reached keeps the rest (its machine's record says why); a log in the home that cannot be
    written gets one line. `known`: reports the pass's own probe already brought, of workers
    `brought_whole` says a new probe would tell nothing more of: a worker whose every ended
    attempt is among them is not asked again (a round trip less between a job's end and the next
    start)."""
    work: list[tuple[Machine, Endpoint, list[WorkerRef]]] = []
    for name, refs in sorted(ended.items()):
        machine = p.fleet.get(name)
        if machine is None:
            continue
        first: dict[tuple[int, int], int] = {}  # an attempt's first worker here: a gang's slice starts past 0
        for r in refs:
            first[(r.job, r.attempt)] = min(first.get((r.job, r.attempt), r.worker), r.worker)
        for ep in p.endpoints(machine):
            mine = [r for r in refs if r.worker - first[(r.job, r.attempt)] == ep.index]
            if mine:
                work.append((machine, ep, mine))
    deadline = time.monotonic() + timing.current().log_catch_up
    done = CatchUp()
    for lines, behind in p.parallel(lambda item: _catch_up_worker(p, item[0], item[1], item[2], deadline, known or {}), work):
        done.lines.extend(lines)
        done.behind.update(behind)
    return done


def _catch_up_worker(p: Reach, machine: Machine, ep: Endpoint, refs: list[WorkerRef],
                     deadline: float, known: dict[WorkerRef, WorkerState]) -> tuple[list[str], list[WorkerRef]]:
    lines: list[str] = []
    for _ in range(CATCH_UP_CHUNKS):
        if time.monotonic() >= deadline:
            return lines, refs
        try:
            states = {r: known[r] for r in refs} if all(r in known for r in refs) else probe(p, machine, ep, refs)
            known = {}  # what the pass's probe brought serves the first round only
        except RemoteError:
            return lines, refs  # its machine's record says why; a pass that reaches it pulls the rest
        behind = []
        for ref, ws in states.items():
            try:
                append_log(p.home, ref, ws.log_offset, ws.log_bytes)
            except (UnsafePath, BusyError) as e:
                return [*lines, f"job {ref.job}: {e.message}"], []
            if ws.log_bytes and ws.log_offset + len(ws.log_bytes) < ws.log_size:
                behind.append(ref)
            elif ws.result_size is not None:  # its job's saved value comes with the end of its log
                try:
                    why = logfiles.keep_result(p.home.root, ref.job, ref.attempt, ws.result_size, ws.result)
                except UnsafePath as e:
                    return [*lines, f"job {ref.job}: {e.message}"], []
                if why is not None:
                    lines.append(f"job {ref.job}: {why}")
        if not behind:
            return lines, []
        refs = behind
    return lines, refs

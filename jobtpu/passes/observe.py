"""A pass's eyes: observe gathers what the fleet says (TPU nodes, each worker's processes and new log
bytes, whether each queued job may run on the local machine) into an Observation, and the log bytes
the probes brought are then kept in the home. What any of it means is decided elsewhere (decide/,
reach.py); the TPU listing also plans each TPU machine's steps (tpu/flow.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path, PurePath
from typing import Any

from jobtpu.decide.gang import machines_of, slice_refs
from jobtpu.decide.observation import Observation, elsewhere
from jobtpu.decide.progress import progress_of
from jobtpu.decide.workers import WorkerRef, WorkerState
from jobtpu.errors import BusyError, RemoteError
from jobtpu.fleet import pulls
from jobtpu.fleet.drivers import DRIVERS, driver_for
from jobtpu.home import lease, logfiles
from jobtpu.home.roles import Layout, role_of
from jobtpu.home.safefs import UnsafePath
from jobtpu.home.specs import local_verdict, records_trusted
from jobtpu.passes.context import Pass
from jobtpu.remote.scripts import TAIL_BYTES
from jobtpu.schema.fleet import Machine
from jobtpu.schema.state import Status
from jobtpu.transport.base import Endpoint


def observe(p: Pass) -> Observation:
    """What the fleet says now: each machine's view (TPU nodes first: they say where the workers
    are), each probed worker's state and new log bytes, and the local machine's refusals. Every
    contact is counted in `p.contacts` for reach.py to judge."""
    seen = Observation(now=time.time(), box=lease.box_name(), boxes=lease.in_use(p.home))
    seen.drained = {name: record.drained.reason for name, record in p.state.machines.items() if record.drained}
    # What the providers say first (TPU node states): where the workers are. Their steps are only planned here.
    p.machine_work = {work.machine.name: work for driver in DRIVERS.values() for work in driver.observe(p, seen)}
    probes: list[tuple[Machine, Endpoint, list[WorkerRef]]] = []
    for machine in p.fleet.machines.values():
        view = seen.view(machine.name)
        eps = p.endpoints(machine)
        view.n_workers = len(eps)
        # Each machine for its own slice's workers (a gang's worker indices are global: slice s, worker i is s * per + i).
        # Never another box's local attempts: their processes are not this box's (home-files.md §1.7).
        refs = [r for j in p.state.jobs if j.status is Status.RUNNING and machine.name in machines_of(j)
                and elsewhere(j, seen.box) is None for r in slice_refs(j, machines_of(j).index(machine.name))]
        if not refs or view.preempted or not driver_for(machine).probes(view.reachable):
            continue
        per = {r: r.worker % max(1, len(eps)) for r in refs}
        for ep in eps:
            probes.append((machine, ep, [r for r in refs if per[r] == ep.index]))

    marked = {job.id: job.saving.marker for job in p.state.jobs
              if job.status is Status.RUNNING and job.saving is not None and job.saving.marker is not None}

    def one(item: tuple[Machine, Endpoint, list[WorkerRef]]) -> tuple[str, Any]:
        machine, ep, refs = item
        try:
            return machine.name, pulls.probe(p, machine, ep, refs, markers_of(marked, refs))
        except RemoteError as e:
            return machine.name, e

    for name, outcome in p.parallel(one, probes):
        view = seen.view(name)
        if isinstance(outcome, RemoteError):
            view.reachable, view.error = False, outcome.message
        else:
            view.reachable = view.reachable is not False
            view.workers.update(outcome)
    _check_local_specs(p, seen)
    return seen


def markers_of(marked: dict[int, str], refs: list[WorkerRef]) -> dict[WorkerRef, str]:
    """Worker 0 of each job that says how a save shows by a marker file (`marked`: job → its
    --saved-marker), which the probe looks for (docs/reference/job-environment.md §8.2.1)."""
    return {ref: marked[ref.job] for ref in refs if ref.worker == 0 and ref.job in marked}


def _check_local_specs(p: Pass, seen: Observation) -> None:
    """For each queued job: may this pass run it on the local machine, as its own account? Only when
    state.json is this account's alone (a private home), or the job's spec says so (docs/design.md §7)."""
    if not any(m.runs_as_this_account for m in p.fleet.machines.values()) or records_trusted(p.home):
        return
    team = p.fleet.runner is not None and p.fleet.runner.runs_for_team(os.geteuid())
    one_writer = role_of(p.home.root).layout is Layout.SHARED  # looked up once a pass, not once a job
    for job in p.state.jobs:
        if job.status is Status.QUEUED and not job.held:
            verdict = local_verdict(p.home, job, team, one_writer)
            if verdict.kind != "ok":
                seen.local_refusals[job.id] = (verdict.kind, verdict.why)


def bring_logs_home(p: Pass, seen: Observation) -> None:
    """Append the new log bytes the probes brought back (a dry run writes nothing); remember the
    tails of failed workers and each job's last line, for decide to read. A log
    that is a link, a FIFO or in a folder we cannot write fails its job alone (docs/reference/state-json.md
    §4.3, `home_file`); one a teammate holds locked waits for the next pass."""
    for view in seen.machines.values():
        for ref, ws in view.workers.items():
            if ref.job in seen.bad_files:
                continue
            try:
                _pull_one(p, seen, ref, ws)
            except UnsafePath as e:
                seen.bad_files[ref.job] = e.message
            except BusyError as e:
                p.notes.append(f"job {ref.job}: {e.message}")


def _pull_one(p: Pass, seen: Observation, ref: WorkerRef, ws: WorkerState) -> None:
    rel = logfiles.log_rel(ref.job, ref.attempt, ref.worker)
    failed = ws.exit_code not in (None, 0)
    if p.dry_run:  # changes nothing: classify from what is home plus what just arrived
        if failed:
            seen.log_tails[ref] = ws.log_end.decode(errors="replace") or \
                (_tail(p.home.root, rel) + ws.log_bytes.decode(errors="replace"))[-TAIL_BYTES:]
        return
    logfiles.append(p.home.root, rel, ws.log_offset, ws.log_bytes)
    if failed:  # from the log's true end, even when the pull is still behind it
        seen.log_tails[ref] = ws.log_end.decode(errors="replace") or _tail(p.home.root, rel)
    if ref.worker == 0:
        line = last_line(p.home.root, rel)
        if line is not None:
            seen.last_lines[ref.job] = line


def _tail(root: Path, rel: PurePath, size: int = TAIL_BYTES) -> str:
    return logfiles.read_end(root, rel, size)[0].decode(errors="replace")


def last_line(root: Path, rel: PurePath) -> str | None:
    """The log's last line worth showing in `status`: a `JOBTPU_PROGRESS step=N` line is for `report`,
    not for people, so the line the job printed before it is shown instead."""
    text = _tail(root, rel, 4096)
    lines = [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip() and progress_of(ln) is None]
    return lines[-1][-200:] if lines else None


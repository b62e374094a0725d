"""Fleet work outside a pass: pulling one job's logs (tail -f), fetching results, remote clean-up."""

import contextlib
import os
from pathlib import Path
from typing import NamedTuple

from jobtpu.decide.workers import WorkerRef, WorkerState
from jobtpu.errors import JobtpuError, RemoteError
from jobtpu.fleet.drivers import driver_for
from jobtpu.fleet.pulls import append_log, probe
from jobtpu.fleet.reach import KeptConnections, Reach, parallel
from jobtpu.home import safefs
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet
from jobtpu.home.store import Store
from jobtpu.remote.scripts import job_folder, remove_job_script
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.state import Job, State, Status
from jobtpu.transport.base import Endpoint


class Pulled(NamedTuple):
    job: Job | None  # the job as state.json held it before the pull (None once it is gone)
    workers: dict[WorkerRef, WorkerState]  # what the probe saw of its workers (their exit records)
    unreachable: str | None = None  # why a worker could not be asked, naming its machine


def pull_logs(home: Home, job_id: int) -> Pulled:
    """Bring a running job's new log bytes home now (used by `tail -f` between passes), so the caller
    reads the job once, sees its workers' exit records, and can say why a machine did not answer."""
    state = Store(home).load()
    job = state.job(job_id)
    if job is None or job.status is not Status.RUNNING or not job.machine:
        return Pulled(job, {})
    fleet = load_fleet(home)
    machine = fleet.get(job.machine)
    if machine is None:
        return Pulled(job, {})
    p = Reach(home, fleet, state)
    work = worker_probes(p, fleet, job)

    def one(item: tuple[Machine, Endpoint, list[WorkerRef]]) -> dict[WorkerRef, WorkerState] | str:
        machine, ep, refs = item
        try:
            states = probe(p, machine, ep, refs)
        except RemoteError as e:
            return f"{machine.name} is unreachable ({e.message})"  # the caller says it; the next pass records it
        for ref, ws in states.items():
            append_log(home, ref, ws.log_offset, ws.log_bytes)
        return states

    seen: dict[WorkerRef, WorkerState] = {}
    failures: list[str] = []
    for states in parallel(one, work):
        if isinstance(states, str):
            failures.append(states)
        else:
            seen.update(states)
    return Pulled(job, seen, failures[0] if failures else None)


def worker_probes(p: Reach, fleet: Fleet, job: Job) -> list[tuple[Machine, Endpoint, list[WorkerRef]]]:
    """Each worker of the job to probe: on each machine of its gang (one for one slice), the
    endpoint and its own slice's worker refs (a gang's indices are global, decide/gang.py)."""
    from jobtpu.decide.gang import machines_of, slice_refs

    work: list[tuple[Machine, Endpoint, list[WorkerRef]]] = []
    for s, name in enumerate(machines_of(job)):
        machine = fleet.get(name)
        if machine is None:
            continue
        refs = slice_refs(job, s)
        eps = p.endpoints(machine)
        for ep in eps:
            mine = [r for r in refs if r.worker % max(1, len(eps)) == ep.index]
            if mine:
                work.append((machine, ep, mine))
    return work


def stream_logs(home: Home, kept: KeptConnections | None = None) -> bool:
    """Between a loop's passes: bring every running job's new log bytes home from its remote workers
    now, through the loop's kept connections, so what a job printed outlives its VM whatever the pass
    interval (docs/reference/commands.md §2.3). Local jobs' logs are on this disk already. Best
    effort: a worker that does not answer waits for the next pass. True when a pass has news to act on
    now: a worker ended, or did not answer (a preempted VM)."""
    state = Store(home).load()
    running = [j for j in state.jobs if j.status is Status.RUNNING and j.machine]
    if not running:
        return False
    fleet = load_fleet(home)
    p = Reach(home, fleet, state, kept)
    work: list[tuple[Machine, Endpoint, list[WorkerRef]]] = []
    for job in running:
        work.extend(w for w in worker_probes(p, fleet, job) if driver_for(w[0]).remote)

    def one(item: tuple[Machine, Endpoint, list[WorkerRef]]) -> bool:
        machine, ep, refs = item
        try:
            states = probe(p, machine, ep, refs)
        except (RemoteError, OSError):
            return True
        for ref, ws in states.items():
            with contextlib.suppress(JobtpuError, OSError):  # a log a reader holds: the next pass
                append_log(home, ref, ws.log_offset, ws.log_bytes)
        return any(not ws.alive for ws in states.values()) or len(states) < len(refs)

    return any(p.parallel(one, work))


def fetch(home: Home, fleet: Fleet, state: State, job: Job, path: str, target: Path) -> None:
    """Copy the job's remote folder (or `path` inside it) from worker 0 into `target`."""
    machine = fleet.get(job.attempts[-1].machine)
    if machine is None:
        raise JobtpuError(f"job {job.id} ran on {job.attempts[-1].machine}, which is not in machines.json")
    p = Reach(home, fleet, state)
    eps = p.endpoints(machine)
    if not eps:
        raise RemoteError(f"{machine.name} has no reachable worker now", hint="see `jobtpu machines`")
    remote = job_folder(machine.root, job.id) + (f"/{path.strip('/')}" if path.strip("/") else "")
    into = _target_folder(home, target)
    try:
        with p.connected(machine, eps[0]) as t:
            t.pull(remote, target, into)
    finally:
        os.close(into)


def _target_folder(home: Home, target: Path) -> int:
    """A descriptor of the folder `fetch` writes into. Under the home (results/ID) it is reached one
    component at a time and must be ours: a link or a teammate's folder there is refused, one line
    naming it (docs/design.md §2). A folder the user named elsewhere is theirs to choose."""
    root = Path(os.path.abspath(home.root))
    absolute = Path(os.path.abspath(target))
    if absolute == root or root in absolute.parents:
        return safefs.own_dir(root, absolute.relative_to(root))
    absolute.mkdir(parents=True, exist_ok=True)
    return os.open(absolute, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def clean_remote(p: Reach, jobs: list[Job]) -> None:
    """Delete the ended jobs' folders on their machines, and archives no remaining job uses."""
    leaving = {j.id for j in jobs}
    keep = sorted({j.archive for j in p.state.jobs if j.id not in leaving})
    for machine in p.fleet.machines.values():
        ids = [j.id for j in jobs if any(a.machine == machine.name for a in j.attempts)]
        script = remove_job_script(machine.root, ids, keep_archives=keep)

        def one(ep: Endpoint, machine: Machine = machine, script: str = script) -> None:
            # An unreachable machine keeps its files; a later clean removes them.
            with contextlib.suppress(RemoteError):
                p.run_on(machine, ep, script)

        parallel(one, p.endpoints(machine))
    for archive in p.home.archives.glob("*.tar.gz"):
        if archive.name not in keep:
            archive.unlink(missing_ok=True)

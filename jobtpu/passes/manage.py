"""One manage pass: observe the fleet (parallel I/O), decide (pure), save the intents, act, save.

Observing plans each TPU machine's steps but carries none out; deciding moves the jobs. The intents
(jobs launching or stopping, TPU steps) are saved before anything is started, stopped, deleted or
created. Acting only carries them out and hands what the workers reported to decide.py, which
says what it means for each job. The pass reads state.json once and writes it at most twice.

The pass holds the pass lock throughout, so two passes never both act; it holds the state lock only
to read and to merge its result, so `submit` never waits for its network work."""

from __future__ import annotations

import copy
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from jobtpu import timing
from jobtpu.decide import reach
from jobtpu.decide.core import (
    Kill,
    Launch,
    LaunchReport,
    MachineView,
    Observation,
    Plan,
    Recreate,
    decide,
    kill_asked,
    killed,
    launched,
    not_launched,
    refs_of,
)
from jobtpu.decide.placement import Place, on_resume_words, place_env
from jobtpu.errors import BusyError, RemoteError
from jobtpu.home import logfiles
from jobtpu.home.layout import Home
from jobtpu.home.safefs import UnsafePath
from jobtpu.home.secrets import SecretStore
from jobtpu.home.specs import local_verdict, records_trusted
from jobtpu.home.store import Snapshot, State, Store
from jobtpu.passes import tell as passevents
from jobtpu.passes.session import Session, home_id, parallel, pass_lock
from jobtpu.remote import pulls
from jobtpu.remote.peercopy import launch_workers
from jobtpu.remote.scripts import (
    TAIL_BYTES,
    archive_path,
    kill_script,
    parse_kill,
)
from jobtpu.remote.workers import LaunchResult, LaunchSpec, WorkerRef, WorkerState
from jobtpu.schema.machines import Fleet, Machine, load_fleet
from jobtpu.schema.state import Job, MachineRecord, Status
from jobtpu.sheet import hook as passsheet
from jobtpu.snapshot.unpack import problem as archive_problem
from jobtpu.tpu.flow import MachineWork, carry_out_all, observe_tpus, request_recreate, want_back
from jobtpu.transport.base import Endpoint
from jobtpu.views.goodput import progress_of


@dataclass
class PassReport:
    notes: list[str] = field(default_factory=list)
    skipped: bool = False  # another pass was running
    on_note: Callable[[str], None] | None = None  # shows a line as the pass goes (a cron pass's stderr)

    def say(self, line: str) -> None:
        """A line for the report, shown now too: for what a pass learns after its notes were shown."""
        self.notes.append(line)
        if self.on_note:
            self.on_note(line)


class Pass(Session):
    """A session for one manage pass: it also checks and copies the home's snapshots to workers."""

    def __init__(self, home: Home, fleet: Fleet, state: State, snapshot: Snapshot | None = None) -> None:
        super().__init__(home, fleet, state, snapshot)
        # Per pass: the home's snapshots already checked, and the (worker, snapshot) copies made, so
        # jobs that share a new snapshot and launch together check and copy it once, one at a time.
        self._locks_lock = threading.Lock()
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._archive_problems: dict[str, str | None] = {}
        self._pushed: set[tuple[str, ...]] = set()
        self.tpu_work: dict[str, MachineWork] = {}  # TPU machines' steps, planned while observing
        self.copy_notes: list[tuple[int, int, str]] = []  # (job, worker, line): how launches got their snapshot
        self.every: float | None = None  # the loop's interval, when a loop runs this pass (run_pass)

    def _lock(self, key: tuple[str, ...]) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(key, threading.Lock())

    def home_archive_problem(self, name: str) -> str | None:
        """Why the home's copy of a snapshot cannot be sent (missing, damaged), or None; checked once a pass."""
        with self._lock(("check", name)):
            if name not in self._archive_problems:
                self._archive_problems[name] = archive_problem(str(self.home.archive(name)))
            return self._archive_problems[name]

    def push_archive(self, machine: Machine, endpoint: Endpoint, name: str) -> None:
        """Copy the home's snapshot to the worker, once a pass however many launches ask for it."""
        key = ("push", machine.name, str(endpoint.index), machine.root, name)
        with self._lock(key):
            if key in self._pushed:
                return
            with self.connected(machine, endpoint) as t:
                t.push(self.home.archive(name), archive_path(machine.root, name))
            self._pushed.add(key)


def run_pass(home: Home, dry_run: bool = False, wait: float | None = None,
             on_note: Callable[[str], None] | None = None, every: float | None = None) -> PassReport:
    """One pass. `every`: the interval of the loop running this pass (manage --loop, watch), recorded
    with the pass so that `status` knows when passes are late; None for a single pass."""
    report = PassReport(on_note=on_note)
    with pass_lock(home, timing.current().manage_lock_wait if wait is None else wait) as got:
        if not got:
            report.skipped = True
            report.notes.append("another pass is running; this one did nothing")
            return report
        fleet = load_fleet(home)
        for line in fleet.refused:  # privileged keys an untrusted machines.json held (docs/design.md §7)
            report.say(line)
        state, snapshot = Store(home).read()
        p = Pass(home, fleet, state, snapshot)
        p.dry_run = dry_run
        p.every = every
        if not dry_run:  # a damaged home id stops the pass before it launches what it could not find again
            home_id(home)
        was = {name: record.state for name, record in state.machines.items()}
        was_open = pulls.open_attempts(state.jobs)
        seen = observe(p)
        before_decide(p, seen)
        plan = decide(state.jobs, fleet, seen)
        if dry_run:  # what it would do, never the lines of a real pass (docs/reference/commands.md §2.3)
            report.notes.extend(p.notes + plan.would)
            return report
        report.notes.extend(p.notes + plan.notes)
        if on_note:
            for note in p.notes + plan.notes:
                on_note(note)
        plan_recreates(p, plan, seen.now)
        p.commit()  # intents (launching, killing, TPU steps) are on disk before anything is carried out
        act(p, plan, seen)
        for *_, line in sorted(p.copy_notes):
            report.say(line)
        _catch_up_logs(p, seen, was_open)
        note_reachability(p, seen)  # what the launches, copies, stops and pulls found
        changes = machine_changes(was, state.machines)
        report.notes.extend(changes)
        if on_note:
            for note in changes:
                on_note(note)
        amend = passevents.before_result(p, seen, p.every)
        p.commit(amend)  # the result, with what the pass is to tell (passevents, docs/design.md §3)
        after_pass(p, seen, plan, report)
    return report


def before_decide(p: Pass, seen: Observation) -> None:
    """What a pass learns besides machines and workers, before it decides (also in a dry run).
    Features that need it add one call here and keep their code in a module of their own."""
    passevents.before_decide(p)
    passsheet.before_decide(p, seen, p.notes.append, lambda: would_start_a_job(p, seen))


def would_start_a_job(p: Pass, seen: Observation) -> bool:
    """Whether deciding now starts a queued job: decide is pure, so a rehearsal on copies tells."""
    if not any(job.status is Status.QUEUED for job in p.state.jobs):
        return False
    jobs = copy.deepcopy(p.state.jobs)
    queued = {job.id for job in jobs if job.status is Status.QUEUED}
    plan = decide(jobs, p.fleet, copy.deepcopy(seen))
    return any(isinstance(action, Launch) and action.job in queued for action in plan.actions)


def after_pass(p: Pass, seen: Observation, plan: Plan, report: PassReport) -> None:
    """What follows a pass whose result is saved (never a dry run): reporting what changed.
    Features that need it add one call here and keep their code in a module of their own."""
    for line in passevents.after_pass(p, seen):
        report.say(line)
    for line in passevents.progress_notes(p):
        report.say(line)
    passsheet.after_pass(p, report.say)


def machine_changes(was: dict[str, str | None], now: dict[str, MachineRecord]) -> list[str]:
    """A line per machine whose state changed in this pass, so a pass run from cron says when a
    machine went away or came back (once, not on every pass while it stays so)."""
    lines = []
    for name, record in sorted(now.items()):
        state = record.state
        if state != was.get(name) and state is not None:
            detail = record.detail
            change = f"{was[name]} -> {state}" if was.get(name) else state
            lines.append(f"{name}: {change}" + (f" ({detail})" if detail else ""))
    return lines


# ---- observe ------------------------------------------------------------------------------------

def observe(p: Pass) -> Observation:
    seen = Observation(now=time.time())
    # TPU node states first: they say where the workers are. Their steps are only planned here.
    p.tpu_work = {work.machine.name: work for work in observe_tpus(p, seen)}
    probes: list[tuple[Machine, Endpoint, list[WorkerRef]]] = []
    for machine in p.fleet.machines.values():
        view = seen.view(machine.name)
        eps = p.endpoints(machine)
        view.n_workers = len(eps)
        jobs = [j for j in p.state.jobs if j.machine == machine.name and j.status is Status.RUNNING]
        if not jobs or view.preempted or (machine.is_tpu and view.reachable is False):
            continue
        for ep in eps:
            probes.append((machine, ep, [r for j in jobs for r in refs_of(j) if r.worker == ep.index]))

    def one(item: tuple[Machine, Endpoint, list[WorkerRef]]) -> tuple[str, Any]:
        machine, ep, refs = item
        try:
            return machine.name, pulls.probe(p, machine, ep, refs)
        except RemoteError as e:
            return machine.name, e

    for name, outcome in parallel(one, probes):
        view = seen.view(name)
        if isinstance(outcome, RemoteError):
            view.reachable, view.error = False, outcome.message
        else:
            view.reachable = view.reachable is not False
            view.workers.update(outcome)
    note_reachability(p, seen)
    _pull_logs(p, seen)
    _check_local_specs(p, seen)
    return seen


def _check_local_specs(p: Pass, seen: Observation) -> None:
    """For each queued job: may this pass run it on the local machine, as its own account? Only when
    state.json is this account's alone (a private home), or the job's spec says so (docs/design.md §7)."""
    if not any(m.kind == "local" for m in p.fleet.machines.values()) or records_trusted(p.home):
        return
    team = p.fleet.runner is not None and p.fleet.runner.runs_for_team(os.geteuid())
    for job in p.state.jobs:
        if job.status is Status.QUEUED and not job.held:
            verdict = local_verdict(p.home, job, team)
            if verdict.kind != "ok":
                seen.local_refusals[job.id] = (verdict.kind, verdict.why)


def _catch_up_logs(p: Pass, seen: Observation, was_open: set[tuple[int, int]]) -> None:
    """The rest of the logs of the attempts that ended in this pass, from the machines that answer
    (a preempted TPU's workers are gone, as are those of one this pass deleted; an unreachable
    machine's stay there)."""
    ended = pulls.ended_since(p.state.jobs, was_open)
    for name in list(ended):
        view, work = seen.view(name), p.tpu_work.get(name)
        if view.preempted or view.reachable is False or (work is not None and work.has("delete")):
            del ended[name]
    p.notes.extend(pulls.catch_up(p, ended))


def note_reachability(p: Session, seen: Observation) -> None:
    """Each ssh machine's record as this pass's contacts say (reach.reachability); one that failed
    recently and was not asked again takes no new jobs. Applied after observing and after acting."""
    for machine in p.fleet.machines.values():
        if machine.kind != "ssh":
            continue  # a TPU's state is the API's (tpuflow); the local machine is always up
        record = p.state.machine(machine.name)
        reach.apply(record, p.contacts.of(machine.name), seen.now)
        if not reach.takes_jobs(record, seen.now):
            seen.view(machine.name).ready = False


def _pull_logs(p: Pass, seen: Observation) -> None:
    """Append the new log bytes the probes brought back; remember tails of failed workers. A log
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


# ---- act ----------------------------------------------------------------------------------------

def plan_recreates(p: Pass, plan: Plan, now: float) -> None:
    """The TPUs the decisions want back get their first step planned and recorded as an intent, so it
    is saved with the rest before it is carried out."""
    for name in sorted({a.machine for a in plan.actions if isinstance(a, Recreate)}):
        machine = p.fleet.get(name)
        if machine is not None and machine.is_tpu:
            work = request_recreate(p, machine, now)
            if work is not None:
                p.tpu_work[name] = work


def act(p: Pass, plan: Plan, seen: Observation) -> None:
    """Carry out the saved intents: TPU steps and stops side by side, then the launches (a launch on a
    machine whose setup ran in this pass only once that setup is done)."""
    launches = [a for a in plan.actions if isinstance(a, Launch)]
    kills = [a for a in plan.actions if isinstance(a, Kill)]
    tasks: list[Callable[[], None]] = [lambda: carry_out_all(p, list(p.tpu_work.values()), seen.now),
                                       lambda: stop_all(p, kills, seen.now)]
    parallel(lambda task: task(), tasks)
    ready = [a for a in launches if _goes_ahead(p, a)]
    after = [k for k in parallel(lambda a: _launch(p, a, seen.now), ready) if k is not None]
    stop_all(p, after, seen.now)


def _goes_ahead(p: Pass, action: Launch) -> bool:
    """Whether a launch goes ahead: its machine ran no setup in this pass, or that setup is done.
    Otherwise its job goes back to the queue (decide.not_launched), nothing having started."""
    work = p.tpu_work.get(action.machine)
    if work is None or not work.has("setup") or work.plan.state == "up":
        return True
    job = p.state.job(action.job)
    if job is not None:
        not_launched(job, f"{action.machine} is {work.plan.state}")
    return False


def stop_all(p: Session, kills: list[Kill], now: float) -> None:
    """Stop the workers of each kill; hand whether they are all gone to decide.killed. A stop whose
    rule recreates the TPU asks for it back: the next pass plans that step and saves it first."""
    kills = [k for k in kills if p.state.job(k.job) is not None and p.fleet.get(k.machine) is not None]
    for kill, gone in zip(kills, parallel(lambda k: _stop_workers(p, k), kills), strict=True):
        job = p.state.require_job(kill.job)
        recreate = killed(job, kill.machine, gone, now)
        machine = p.fleet.get(recreate.machine) if recreate else None
        if machine is not None and machine.is_tpu:
            want_back(p.state.machine(machine.name))


def job_env(job: Job, machine: Machine, worker: int, place: Place, secrets: dict[str, str]) -> dict[str, str]:
    """The job's environment in the order it is applied: jobtpu's own variables first, so that an
    --env value may use them ($JOBTPU_WORKER); they win over a user's value of the same name."""
    env = {
        "JOBTPU_JOB_ID": str(job.id), "JOBTPU_ATTEMPT": str(job.attempt),
        "JOBTPU_RESUME": "1" if job.resume else "0", "JOBTPU_WORKER": str(worker),
        "JOBTPU_NUM_WORKERS": str(len(place.hosts)), "JOBTPU_MACHINE": machine.name,
        **place_env(place, place.hosts[worker], job.id, job.attempt),
    }
    for resource, indices in job.alloc.items():
        if resource != "slot":
            env[f"JOBTPU_{resource.upper()}"] = ",".join(map(str, indices))
    if "gpu" in job.alloc:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, job.alloc["gpu"]))
    if job.sweep is not None:
        env["JOBTPU_SWEEP"], env["JOBTPU_SWEEP_INDEX"] = str(job.sweep), str(job.sweep_index or 0)
    for name, value in {**job.env, **secrets}.items():
        env.setdefault(name, value)
    return env


def _launch(p: Pass, action: Launch, now: float) -> Kill | None:
    """Launch the job's workers; decide.launched says what their reports mean. A Kill when some
    workers started and others failed."""
    job = p.state.job(action.job)
    machine = p.fleet.get(action.machine)
    if job is None or machine is None or job.status is not Status.LAUNCHING:
        return None
    eps = p.endpoints(machine)[: action.workers]
    secrets = SecretStore(p.home).get(job.id)
    if machine.kind == "local" and not records_trusted(p.home):  # checked again as it starts (design §7)
        team = p.fleet.runner is not None and p.fleet.runner.runs_for_team(os.geteuid())
        verdict = local_verdict(p.home, job, team)
        if verdict.kind != "ok":
            refused = {ep.index: LaunchResult(WorkerRef(job.id, job.attempt, ep.index), "fail", detail=verdict.why)
                       for ep in eps}
            return launched(job, machine, dict(refused), now)
        secrets = {k: v for k, v in secrets.items() if verdict.secrets is None or k in verdict.secrets}

    # An attempt that does not resume starts from the snapshot, even where an earlier one left a folder.
    rerun = not job.resume and any(a.n != job.attempt for a in job.attempts)
    place = place_of(p, machine, eps)
    command = job.full_command(on_resume_words(job.on_resume or "", place, job.id, job.attempt))

    def spec(ep: Endpoint) -> LaunchSpec:
        return LaunchSpec(WorkerRef(job.id, job.attempt, ep.index), machine.root, job.archive,
                          command, job_env(job, machine, ep.index, place, secrets),
                          tpu_cleanup=machine.is_tpu, fresh=rerun, home_id=p.home_id, literal=frozenset(secrets),
                          early_signal=early_signal(job), grace=grace_of(job), stop_requests=machine.kind == "local")

    reports: dict[int, LaunchReport] = launch_workers(p, machine, [(ep, spec(ep)) for ep in eps])
    return launched(job, machine, reports, now)


def place_of(p: Pass, machine: Machine, eps: list[Endpoint]) -> Place:
    """Where the attempt runs: a TPU's zone in use (capacity errors may have moved it) and node; a
    box's workers by the addresses jobtpu reaches them at (the local machine by its host name)."""
    hosts = tuple(ep.addr or socket.gethostname() for ep in eps)
    zone = (p.state.machine(machine.name).zone or machine.zone) if machine.is_tpu else machine.zone
    return Place(zone=zone or "", node=(machine.node or "") if machine.is_tpu else "",
                 accelerator=machine.accelerator or "", hosts=hosts)


def early_signal(job: Job) -> tuple[str, float] | None:
    """--signal SIG@S: the signal and how long after the start the wrapper sends it (S before the
    attempt's --timeout ends). The wrapper keeps the time, not the pass: passes may be a minute apart."""
    if job.signal is None or job.signal_before is None or job.timeout is None:
        return None
    return job.signal, max(0.0, job.timeout - job.signal_before)


def _stop_workers(p: Session, action: Kill) -> bool:
    """Stop the workers; whether every one is gone."""
    machine = p.fleet.get(action.machine)
    if machine is None:
        return False
    by_worker = {ep.index: ep for ep in p.endpoints(machine)}
    job = next((j for j in p.state.jobs if j.id == action.job), None)
    grace = grace_of(job) if job is not None else timing.current().grace

    def one(ref: WorkerRef) -> bool:
        ep = by_worker.get(ref.worker)
        if ep is None:
            return True  # that worker no longer exists
        try:
            script = kill_script(machine.root, [ref], grace=grace, home_id=p.home_id, ask=machine.kind == "local")
            return parse_kill(p.run_on(machine, ep, script, timeout=grace + timing.current().script_timeout)).get(ref, False)
        except RemoteError:
            return False

    return all(parallel(one, action.refs))


def grace_of(job: Job) -> float:
    """Seconds between TERM and KILL: the job's --grace, else timing's grace."""
    return float(job.grace) if job.grace is not None else timing.current().grace


# ---- commands that act on the fleet outside a pass ------------------------------------------------

def kill_jobs(p: Session, jobs: list[Job], now: float, by: str | None = None) -> None:
    """Mark the jobs stopping (saved first), stop them everywhere, end them as decide.killed says.
    A job that ends here (a queued one at once, a stopping one whose workers are all gone) gets its
    `job_ended`, saved to tell with the commit that ends it and told right after (docs/design.md §3)."""
    was_ended = {job.id for job in jobs if job.ended}
    was_open = pulls.open_attempts(jobs)
    kills = [k for k in map(kill_asked, jobs) if k is not None]
    _tell_ended(p, jobs, was_ended, now, by)
    stop_all(p, kills, now)
    p.notes.extend(pulls.catch_up(p, pulls.ended_since(jobs, was_open)))  # their logs, whole
    _tell_ended(p, jobs, was_ended, now, by)


def _tell_ended(p: Session, jobs: list[Job], was_ended: set[int], now: float, by: str | None) -> None:
    ended = [job for job in jobs if job.ended and job.id not in was_ended]
    was_ended.update(job.id for job in ended)
    found = passevents.ended_by_hand(ended, now, by)
    p.state.untold = [*p.state.untold, *passevents.with_ids(found)]
    p.commit()
    if found:
        for line in passevents.log(p.home.root, found):  # a kill is no notification
            p.notes.append(line)


__all__ = ["run_pass", "kill_jobs", "PassReport", "MachineView"]

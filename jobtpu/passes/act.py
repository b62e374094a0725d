"""A pass's hands: carry out what was decided and saved (TPU steps, stops, launches, the catch-up of
ended attempts' logs). Launches and stops touch no job record: they return plain reports
(decide/settle.py's `LaunchHeld`, `LaunchDone`, `StopDone`), and the pass's settle step says what they
mean. `kill_jobs` stops and settles the same way for `jobtpu kill`, outside a pass."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from jobtpu import timing
from jobtpu.decide.gang import per_slice
from jobtpu.decide.observation import Kill, Launch, Observation, Plan, elsewhere
from jobtpu.decide.outcomes import LaunchReport, NoAnswer, kill_asked, refused_at_start
from jobtpu.decide.placement import Place, gang_env, on_resume_words, place_env
from jobtpu.decide.saving import checkpoint_copy, resume_env
from jobtpu.decide.settle import ActReport, LaunchDone, LaunchHeld, StopDone, held_by_setup, settle
from jobtpu.decide.workers import LaunchOutcome, LaunchResult, LaunchSpec, WorkerRef, WorkerState
from jobtpu.errors import RemoteError, UnreachableError
from jobtpu.fleet import pulls
from jobtpu.fleet.drivers import DRIVERS, driver_for
from jobtpu.home import fence, lease
from jobtpu.home.secrets import SecretStore
from jobtpu.home.specs import local_verdict, records_trusted
from jobtpu.passes import tell
from jobtpu.passes.arrays import array_groups, launch_array
from jobtpu.passes.changes import ended_by_hand
from jobtpu.passes.context import Pass
from jobtpu.passes.peercopy import Worker, launch_gang_workers, launch_workers, peer_addresses_of
from jobtpu.passes.session import Session
from jobtpu.remote.checkpoints import checkpoint_copy_script, parse_copy
from jobtpu.remote.scripts import parse_kill
from jobtpu.render.text import printable
from jobtpu.schema.fleet import Machine
from jobtpu.schema.records import MachineRecord, StepKind
from jobtpu.schema.state import Job, Status
from jobtpu.slurm.scripts import slurm_ids
from jobtpu.sweeps import sweep_env
from jobtpu.transport.base import Endpoint


def act(p: Pass, plan: Plan, seen: Observation) -> list[ActReport]:
    """Carry out the saved intents: TPU steps and stops side by side, then the launches (a launch on a
    machine whose setup ran in this pass only once that setup is done). The reports of the stops, of
    the launches held back, then of the launches, in that order, for the settle step."""
    launches = [a for a in plan.actions if isinstance(a, Launch)]
    kills = [a for a in plan.actions if isinstance(a, Kill)]
    stops: list[StopDone] = []
    tasks: list[Callable[[], object]] = [lambda: carry_out_machine_work(p, seen.now),
                                         lambda: stops.extend(stop_all(p, kills))]
    p.parallel(lambda task: task(), tasks)
    held = [_held_by_setup(p, a) for a in launches]
    ready = [a for a, h in zip(launches, held, strict=True) if h is None]
    # A sweep's members bound for a Slurm cluster go as one job array each (passes/arrays.py).
    arrays, ready = array_groups(p, ready)
    done = [d for d in p.parallel(lambda a: _launch(p, a), ready) if d is not None]
    secrets: dict[int, dict[str, str]] | None = None  # every member's, in one read of secrets.json

    def specs_of(job: Job, machine: Machine, eps: list[Endpoint], token: int) -> list[Worker]:
        nonlocal secrets
        if secrets is None:
            secrets = SecretStore(p.home).get_many([a.job for g in arrays for a in g])
        return worker_specs(p, job, machine, eps, place_of(p, machine, eps), secrets.get(job.id, {}), token)

    done += [d for group in p.parallel(lambda g: launch_array(p, g, specs_of), arrays) for d in group]
    return [*stops, *(h for h in held if h is not None), *done]


def carry_out_machine_work(p: Pass, now: float) -> None:
    """Each driver carries out the steps planned for its machines (a TPU's deletes, creates, setup)."""
    for driver in DRIVERS.values():
        driver.carry_out(p, [w for w in p.machine_work.values() if driver_for(w.machine) is driver], now)


def _held_by_setup(p: Pass, action: Launch) -> LaunchHeld | None:
    """A launch the setup this pass ran on its machine (a gang's: any of them) holds back, or None."""
    setups = {name: work.plan.state for name in action.gang or (action.machine,)
              if (work := p.machine_work.get(name)) is not None and work.has(StepKind.SETUP)}
    return held_by_setup(action, setups)


def catch_up_logs(p: Pass, seen: Observation, was_open: set[tuple[int, int]]) -> None:
    """The rest of the logs of the attempts that ended in this pass, from the machines that answer
    (a preempted TPU's workers are gone, as are those of one this pass deleted; an unreachable
    machine's stay there), and those earlier passes left behind, within the pass's budget."""
    ended = pulls.ended_since(p.state.jobs, was_open)
    gone: list[WorkerRef] = []  # their workers went with their machine: nothing is left to pull
    for name in list(ended):
        view, work = seen.view(name), p.machine_work.get(name)
        if view.preempted or (work is not None and work.has(StepKind.DELETE)) or p.fleet.get(name) is None:
            gone.extend(ended.pop(name))
        elif view.reachable is False:
            del ended[name]  # still behind: a later pass that reaches it pulls the rest
    done = pulls.catch_up(p, ended, _brought_whole(p, seen, ended))
    p.notes.extend(done.lines)
    pulls.mark_behind(p.state.jobs, [*gone, *(r for refs in ended.values() for r in refs)], done.behind)


def _brought_whole(p: Pass, seen: Observation, ended: dict[str, list[WorkerRef]]) -> dict[WorkerRef, WorkerState]:
    """The ended workers whose report this pass's probe brought is all a catch-up would find
    (pulls.brought_whole), their logs home whole: a job that just ended costs no second round trip."""
    known: dict[WorkerRef, WorkerState] = {}
    for name, refs in ended.items():
        workers = seen.view(name).workers
        for ref in refs:
            ws = workers.get(ref)
            if ws is not None and ref.job not in seen.bad_files and pulls.brought_whole(ws, pulls.local_size(p.home, ref)):
                known[ref] = ws
    return known


def stop_all(p: Session, kills: list[Kill]) -> list[StopDone]:
    """Stop the workers of each kill, side by side; for each, whether they are all gone (settle says
    what that means: the job's ending, and the TPU asked back when its rule recreates it)."""
    kills = [k for k in kills if p.state.job(k.job) is not None and p.fleet.get(k.machine) is not None]
    gone = p.parallel(lambda k: _stop_workers(p, k), kills)
    # A gang's stop is one Kill per machine: its job's workers are gone once every one's are.
    done: dict[int, StopDone] = {}
    for k, all_gone in zip(kills, gone, strict=True):
        was = done.get(k.job)
        done[k.job] = StopDone(k.job, was.machine if was else p.fleet.machines[k.machine],
                               all_gone and (was is None or was.all_gone))
    return list(done.values())


def job_env(job: Job, machine: Machine, worker: int, place: Place, secrets: dict[str, str],
            joins: dict[str, str] | None = None, resumed: dict[str, str] | None = None) -> dict[str, str]:
    """The job's environment in the order it is applied: jobtpu's own variables first, so that an
    --env value may use them ($JOBTPU_WORKER); they win over a user's value of the same name. A
    gang's worker gets its slice's (`worker` within its slice) and the variables that join the
    slices (`joins`, placement.gang_env). `resumed`: the attempt a resume resumes from
    (decide/saving.py resume_env)."""
    env = {
        "JOBTPU_JOB_ID": str(job.id), "JOBTPU_ATTEMPT": str(job.attempt),
        "JOBTPU_RESUME": "1" if job.resume else "0", "JOBTPU_WORKER": str(worker),
        "JOBTPU_NUM_WORKERS": str(len(place.hosts)), "JOBTPU_MACHINE": machine.name,
        **place_env(place, place.hosts[worker], job.id, job.attempt), **(joins or {}), **(resumed or {}),
    }
    for resource, indices in ({} if machine.scheduled else job.alloc).items():  # Slurm's allocation is Slurm's
        if resource != "slot":
            env[f"JOBTPU_{resource.upper()}"] = ",".join(map(str, indices))
    if "gpu" in job.alloc and not machine.scheduled:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, job.alloc["gpu"]))
    if job.sweep is not None:
        env["JOBTPU_SWEEP"], env["JOBTPU_SWEEP_INDEX"] = str(job.sweep), str(job.sweep_index or 0)
        env.update(sweep_env(job.sweep_values))  # as given, never expanded (literal_names)
    for name, value in {**job.env, **secrets}.items():
        env.setdefault(name, value)
    return env


def literal_names(job: Job, secrets: dict[str, str]) -> frozenset[str]:
    """The variables whose values reach the job as they are, `$` and all: secrets, and a sweep's
    values (they are config values, as in the job's arguments, where the shell takes them literally)."""
    swept = sweep_env(job.sweep_values) if job.sweep is not None else {}
    return frozenset(secrets) | frozenset(swept)


def _launch(p: Pass, action: Launch) -> LaunchDone | None:
    """Launch the job's workers; what each reported (a local spec refused here: every worker's
    refusal). None when there is nothing to launch any more."""
    job = p.state.job(action.job)
    machine = p.fleet.get(action.machine)
    gang = [p.fleet.get(name) for name in action.gang]
    if job is None or machine is None or job.status is not Status.LAUNCHING or None in gang:
        return None
    token = fence.check(p.home) or 0  # a runner that lost its lease starts nothing (home-files.md §1.7)
    if action.gang:
        return _launch_gang(p, job, [m for m in gang if m is not None], action.workers // len(gang), token)
    eps = p.endpoints(machine)[: action.workers]
    secrets = SecretStore(p.home).get(job.id)
    if machine.runs_as_this_account and not records_trusted(p.home):  # checked again as it starts (design §7)
        team = p.fleet.runner is not None and p.fleet.runner.runs_for_team(os.geteuid())
        verdict = local_verdict(p.home, job, team)
        if verdict.kind != "ok":
            return LaunchDone(job.id, machine, refused_at_start(job, (ep.index for ep in eps), verdict.kind, verdict.why))
        secrets = {k: v for k, v in secrets.items() if verdict.secrets is None or k in verdict.secrets}

    place = place_of(p, machine, eps)
    copy = checkpoint_copy(job, place.region)
    if copy is not None and eps:
        failed = _copy_checkpoint(p, machine, eps[0], job, copy, place.region)
        if failed is not None:  # no worker starts: a launch failure the job's rule answers, or none made
            return LaunchDone(job.id, machine, {ep.index: failed if isinstance(failed, NoAnswer) else LaunchResult(
                WorkerRef(job.id, job.attempt, ep.index), LaunchOutcome.FAIL, detail=failed) for ep in eps})
    reports: dict[int, LaunchReport] = launch_workers(p, machine, worker_specs(p, job, machine, eps, place, secrets, token))
    return LaunchDone(job.id, machine, reports)


def worker_specs(p: Pass, job: Job, machine: Machine, eps: list[Endpoint], place: Place, secrets: dict[str, str],
                 token: int) -> list[Worker]:
    """What each of a one-slice job's workers is launched with."""
    driver = driver_for(machine)
    # An attempt that does not resume starts from the snapshot, even where an earlier one left a folder.
    rerun = not job.resume and any(a.n != job.attempt for a in job.attempts)
    command = job.full_command(on_resume_words(job.on_resume or "", place, job.id, job.attempt))
    resumed = resume_env(job, {m.name: m.root for m in p.fleet.machines.values()})
    grace = grace_of(job)

    def spec(ep: Endpoint) -> LaunchSpec:
        return LaunchSpec(WorkerRef(job.id, job.attempt, ep.index), machine.root, job.archive,
                          command, job_env(job, machine, ep.index, place, secrets, resumed=resumed),
                          tpu_cleanup=driver.frees_accelerator, fresh=rerun, home_id=p.home_id, literal=literal_names(job, secrets),
                          early_signal=early_signal(job), grace=grace, stop_requests=driver.stops_by_request,
                          evict_signal=job.signal or "", time_limit=job.timeout, token=token,
                          batch=driver.batch_options(machine, job, grace), secret=frozenset(secrets))

    return [(ep, spec(ep)) for ep in eps]


def _launch_gang(p: Pass, job: Job, machines: list[Machine], per: int, token: int) -> LaunchDone:
    """Launch a gang's workers, every slice at once: slice s's worker i is the job's worker s * per + i
    (its logs, pid files and probes), and JOBTPU_WORKER i within its slice. (A gang never runs on the
    local machine: it is formed of ssh boxes and TPUs, whose launches need no local spec check.)"""
    secrets = SecretStore(p.home).get(job.id)
    rerun = not job.resume and any(a.n != job.attempt for a in job.attempts)
    slices = [(m, p.endpoints(m)[:per]) for m in machines]
    places = [place_of(p, m, eps) for m, eps in slices]
    command = job.full_command(on_resume_words(job.on_resume or "", places[0], job.id, job.attempt))
    coordinator = places[0].peers[0]  # slice 0's worker 0, where the other slices' workers reach it
    # The attempt that last saved, as one slice's launch tells it (a gang's checkpoint copy across
    # regions is not made: its slices are of one slice group or of one region's machines).
    resumed = resume_env(job, {m.name: m.root for m in p.fleet.machines.values()})

    def one(s: int) -> tuple[Machine, list[Worker]]:
        machine, eps = slices[s]
        driver, joins = driver_for(machine), gang_env(s, len(machines), coordinator)
        specs = [(ep, LaunchSpec(WorkerRef(job.id, job.attempt, s * per + ep.index), machine.root, job.archive, command,
                                 job_env(job, machine, ep.index, places[s], secrets, joins, resumed),
                                 tpu_cleanup=driver.frees_accelerator, fresh=rerun, home_id=p.home_id,
                                 literal=literal_names(job, secrets), early_signal=early_signal(job),
                                 grace=grace_of(job), stop_requests=driver.stops_by_request, time_limit=job.timeout,
                                 token=token))
                 for ep in eps]
        return machine, specs

    # One upload from the home for the whole gang: the others fetch it from a worker that has it.
    return LaunchDone(job.id, machines[0], launch_gang_workers(p, [one(s) for s in range(len(slices))]))


def _copy_checkpoint(p: Pass, machine: Machine, ep: Endpoint, job: Job, copy: tuple[str, str],
                     region: str) -> str | NoAnswer | None:
    """Copy the checkpoint of the attempt that last saved into this attempt's region, from worker 0
    before any worker starts (docs/reference/job-environment.md §8.2.1): None when it is there, else
    why not, in one line; a worker 0 that could not be reached is no answer (the launch is made on a
    later pass, nothing having started). The pass's notes say what was copied."""
    src, dst = copy
    try:
        script = checkpoint_copy_script(machine.root, WorkerRef(job.id, job.attempt, 0), src, dst)
        why = parse_copy(p.run_on(machine, ep, script))
    except UnreachableError as e:
        return NoAnswer(f"checkpoint copy: {e.message}", unreachable=True)
    except RemoteError as e:
        why = e.message
    if why is not None:
        return printable(f"checkpoint copy {src} -> {dst} failed: {why}")[:500]
    p.copy_notes.append((job.id, -1, f"job {job.id}: copied its checkpoint {src} -> {dst}: attempt {job.attempt} "
                                     f"resumes in {region}"))
    return None


def place_of(p: Pass, machine: Machine, eps: list[Endpoint]) -> Place:
    """Where the attempt runs: a TPU's zone in use (capacity errors may have moved it) and node; the
    workers by the addresses jobtpu reaches them at (the local machine by its host name) and by those
    they reach each other at (a TPU's internal ones, whatever address jobtpu's SSH uses)."""
    hosts = tuple(ep.addr or socket.gethostname() for ep in eps)
    zone, node = driver_for(machine).zone_and_node(machine, p.state.machines.get(machine.name) or MachineRecord())
    return Place(zone=zone, node=node,
                 accelerator=machine.accelerator or "", hosts=hosts, peers=peer_addresses_of(p, machine, hosts))


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
    per = per_slice(job) if job is not None and job.gang else None  # a gang's indices are global

    def one(ref: WorkerRef) -> bool:
        ep = by_worker.get(ref.worker % per if per else ref.worker)
        if ep is None:
            return True  # that worker no longer exists
        try:
            # A Slurm array member still pending recorded no id: the home's cancels it.
            ids = slurm_ids([job], [ref]) if job is not None and machine.scheduled else None
            script = driver_for(machine).kill_script(machine, [ref], grace, p.home_id, action.first, ids)
            waits = grace * (2 if action.first else 1)  # an eviction's first signal has its grace too
            return parse_kill(p.run_on(machine, ep, script, timeout=waits + timing.current().script_timeout)).get(ref, False)
        except RemoteError:
            return False

    return all(p.parallel(one, action.refs))


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
    asked = Plan()  # the jobs' new records: stopping, or a queued one killed (its event is told here)
    # Never another box's local processes (home-files.md §1.7): that box's runner, or the pass holding
    # the lease, ends the job and says what became of them.
    box = lease.box_name()
    kills = [k for job in jobs for k in kill_asked(job, asked) if elsewhere(job, box) is None]
    asked.apply_to(jobs)
    _tell_ended(p, jobs, was_ended, now, by)
    settle(p.state, stop_all(p, kills), now).apply_to(p.state)
    ended = pulls.ended_since(jobs, was_open)
    done = pulls.catch_up(p, ended)  # their logs, whole as far as the budget goes; passes pull the rest
    p.notes.extend(done.lines)
    pulls.mark_behind(jobs, [r for refs in ended.values() for r in refs], done.behind)
    _tell_ended(p, jobs, was_ended, now, by)


def _tell_ended(p: Session, jobs: list[Job], was_ended: set[int], now: float, by: str | None) -> None:
    ended = [job for job in jobs if job.ended and job.id not in was_ended]
    was_ended.update(job.id for job in ended)
    found = ended_by_hand(ended, now, by)
    p.state.untold = [*p.state.untold, *tell.with_ids(found)]
    p.commit()
    if found:
        for line in tell.log(p.home.root, found):  # a kill is no notification
            p.notes.append(line)


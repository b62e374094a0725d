"""What each command does, between the parsed arguments and the files, fleet and screen.
Read-only commands (status, tail, --help) import neither paramiko nor google-cloud."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import JobtpuError, NotFoundError, Terminated
from .home import Home, find_home
from .inputs import resolve_user
from .store import Store, append_line, encode_jobs, jobs_document, records
from .text import printable, printable_lines

if TYPE_CHECKING:
    from .fleet import Fleet, Machine
    from .model import Job, MachineRecord
    from .scripts import WorkerRef, WorkerState

# Listings (status, tail) import only what they use: `jobtpu status` runs from watch and scripts,
# so every module they load is start-up time paid on every call.


def dispatch(args: argparse.Namespace) -> int:
    home = find_home(args.home)
    if home.root.exists() and not home.root.is_dir():
        raise JobtpuError(f"the home {home.root} is not a folder",
                          hint="pass --home DIR (or set $JOBTPU_HOME) naming a folder, new or existing")
    handler = globals()[f"cmd_{args.command}"]
    return int(handler(home, args) or 0)


def emit_json(document: object) -> None:
    import orjson

    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_APPEND_NEWLINE))
    sys.stdout.flush()


def note(text: str) -> None:
    """One line for the user on stderr. Untrusted parts (names, remote messages) are escaped; the
    line breaks our own messages put between lines are kept."""
    sys.stderr.write(printable_lines(text) + "\n")


# ---- submit / run ---------------------------------------------------------------------------------

def build_job(home: Home, fleet: Fleet, args: argparse.Namespace) -> Job:
    """Check everything the user typed, then snapshot; raises before anything is written."""
    from .inputs import config_overrides, parse_duration, parse_env
    from .model import Job
    from .requests import parse_request, why_not

    user = resolve_user(args.user)
    if not args.cmd.strip():
        raise JobtpuError("--cmd is empty", hint='give the command to run, like --cmd "python train.py"')
    request = parse_request(args.req)
    if args.machine is not None:
        fleet.require(args.machine)
    reasons = {m.name: why_not(m, request, args.machine) for m in fleet.machines.values()}
    if all(r is not None for r in reasons.values()):
        listing = "; ".join(f"{name}: {why}" for name, why in reasons.items())
        raise JobtpuError(f"no machine in the fleet could ever run this request ({listing})",
                          hint=f"change --req/--machine, or add a machine to {home.machines_file}")
    timeout = parse_duration(args.timeout, "--timeout") if args.timeout is not None else None
    stall = parse_duration(args.stall, "--stall") if args.stall is not None else None
    env = parse_env(args.env)
    overrides = config_overrides(args.overrides, fleet.config_aliases)
    for tag in args.tag:
        if not tag.strip():
            raise JobtpuError("--tag must not be empty")
    src = Path(args.dir).expanduser()
    from .archive import snapshot  # imported late: rich's progress bar is only needed here

    # The local machine's job folders hold unpacked snapshots: never pack them into the next one.
    local_roots = [Path(m.root) for m in fleet.machines.values() if m.kind == "local"]
    with sigterm_interrupts():
        snap = snapshot(src, home.archives, args.include, args.exclude, home=home.root, leave_out=local_roots)
    return Job(id=0, user=user, cmd=args.cmd, archive=snap.name, created=time.time(), name=args.name,
               req=list(args.req), pin=args.machine, tags=list(args.tag), rule=args.rule, env=env,
               overrides=overrides, log_stage=args.log_stage, max_recoveries=args.max_recoveries,
               timeout=timeout, stall=stall, dir=str(src.resolve()))


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises Terminated meanwhile, as Ctrl-C raises KeyboardInterrupt: the work under way
    cleans up after itself (no half-written archive) instead of the process vanishing mid-write."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def submit(home: Home, args: argparse.Namespace) -> Job:
    from .fleet import load_fleet
    from .store import read_id_mark, write_id_mark

    fleet = load_fleet(home)
    read = Store(home).read()  # a broken state.json is reported before the snapshot, not after
    job = build_job(home, fleet, args)
    from .secrets import SecretStore, split_env

    job.env, secret = split_env(job.env)
    secrets = SecretStore(home)
    if secret:  # a damaged secrets.json, or one another account keeps, before anything is written
        secrets.check_keeper()
        secrets.check()
    try:
        with Store(home).transaction(start=read) as state:
            job.id = max(state.next_id, highest_used_id(home) + 1, read_id_mark(home) + 1)
            state.next_id = job.id + 1
            # The id is spent before anything is filed under it: whatever fails from here on, no
            # later job gets this id, so nothing left behind under it (a secret, a log) is ever adopted.
            write_id_mark(home, job.id)
            secrets.put(job.id, secret)  # before the job exists, so it never runs without them
            state.jobs.append(job)
    except BaseException:  # a full disk, an unwritable file, Ctrl-C: the job was not saved
        if secret and job.id:
            _drop_unsaved_secret(home, job.id)
        raise
    return job


def _drop_unsaved_secret(home: Home, job_id: int) -> None:
    """After a failed submit: drop the job's secret unless the job reached state.json after all (the
    failure came after the rename). Best effort: `clean` drops any secret no job holds."""
    from .secrets import SecretStore

    try:
        if Store(home).load().job(job_id) is None:
            SecretStore(home).drop([job_id])
    except Exception:  # noqa: BLE001 - the first failure is the one to report
        pass


def highest_used_id(home: Home) -> int:
    """The highest id any job of this home ever had, even if state.json and the id mark lost it
    (hand edits, deleted files, a home from before the mark): ids are never reused, since logs,
    secrets and remote folders are named by them."""
    import re

    used = [int(p.name) for p in (home.root / "logs").glob("*") if p.name.isdigit()]
    used += [int(p.name) for p in (home.local_run_root / "jobs").glob("*") if p.name.isdigit()]
    if home.history_file.exists():
        with open(home.history_file, "rb") as f:
            used += [int(m[1]) for line in f if (m := re.match(rb'\{"id": ?(\d+)', line))]
    return max(used, default=0)


def cmd_submit(home: Home, args: argparse.Namespace) -> int:
    job = submit(home, args)
    if args.json:
        emit_json({"id": job.id, "archive": job.archive})
    else:
        print(job.id)
    return 0


def cmd_run(home: Home, args: argparse.Namespace) -> int:
    from .manage import run_pass

    job = submit(home, args)
    if args.json:
        emit_json({"id": job.id, "archive": job.archive})
    else:
        print(job.id, flush=True)
    if not args.follow:
        if run_pass(home, wait=30.0).skipped:
            note(f"jobtpu: another manage pass held the lock for 30 s; job {job.id} stays queued until a pass "
                 "starts it (`jobtpu manage`, or the cron/loop that runs the other pass)")
        return 0
    return follow(home, job.id)


def follow(home: Home, job_id: int, interval: float = 1.0) -> int:
    """Pass after pass, stream worker 0's log, until the job ends; its exit code (1 without one)."""
    from .manage import run_pass

    printed: dict[int, int] = {}
    told_busy = False
    while True:
        if run_pass(home, wait=30.0).skipped and not told_busy:
            note(f"jobtpu: another manage pass is running; following job {job_id} as passes run it")
            told_busy = True
        job = Store(home).load().job(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} is no longer in state.json")
        for attempt in sorted({a.n for a in job.attempts}):
            path = home.log_file(job_id, attempt, 0)
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(printed.get(attempt, 0))
                    data = f.read()
                printed[attempt] = printed.get(attempt, 0) + len(data)
                sys.stdout.buffer.write(data)
                sys.stdout.flush()
        if job.ended:
            note(f"job {job_id}: {job.status}" + (f" ({job.reason})" if job.reason else ""))
            return job.exit_code if job.exit_code is not None else 1
        time.sleep(interval)


# ---- manage ---------------------------------------------------------------------------------------

def cmd_manage(home: Home, args: argparse.Namespace) -> int:
    from .manage import run_pass

    while True:
        try:
            report = run_pass(home, dry_run=args.dry_run, on_note=None if args.dry_run else note)
        except Exception as e:
            if args.loop is None:
                raise
            # The loop babysits jobs at 3 am: a typo in machines.json, a busy state file (one line),
            # a full disk or a bug (the traceback) is reported, and the next round tries again.
            if isinstance(e, JobtpuError):
                note(f"jobtpu: error: {printable(e.message)}" + (f"\nhint: {printable(e.hint)}" if e.hint else ""))
            else:
                import traceback

                note("jobtpu: the pass failed; trying again next round\n" + traceback.format_exc().rstrip())
        else:
            if args.dry_run:
                for line in report.notes or ["nothing to do"]:
                    print(printable(line))
            elif report.skipped:
                note("jobtpu: another manage pass is running; skipped")
            if args.loop is None:
                return 0
        time.sleep(args.loop)


# ---- status ---------------------------------------------------------------------------------------

def chosen_jobs(home: Home, ids: list[int], user: str | None, all_users: bool) -> list[Job]:
    jobs = Store(home).load().jobs
    if ids:
        known = {j.id for j in jobs}
        missing = [i for i in ids if i not in known]
        if missing:
            raise NotFoundError(f"no job {missing[0]} in state.json",
                                hint="`jobtpu status --all-users` lists every job")
        return [j for j in jobs if j.id in ids]
    if all_users:
        return jobs
    who = resolve_user(user)
    return [j for j in jobs if j.user == who]


def select_jobs(home: Home, ids: list[int], user: str | None, all_users: bool) -> list[dict[str, Any]]:
    return records(chosen_jobs(home, ids, user, all_users))


def cmd_status(home: Home, args: argparse.Namespace) -> int:
    if args.json:  # the records as stored, encoded straight from the typed jobs
        sys.stdout.buffer.write(jobs_document(chosen_jobs(home, args.ids, args.user, args.all_users)))
        sys.stdout.flush()
        return 0
    from rich.console import Console

    from .display import jobs_table

    console = Console()
    if args.watch is None:
        console.print(jobs_table(select_jobs(home, args.ids, args.user, args.all_users)))
        return 0
    from rich.live import Live

    with Live(jobs_table([]), console=console, screen=False, auto_refresh=False) as live:
        while True:
            live.update(jobs_table(select_jobs(home, args.ids, args.user, args.all_users)), refresh=True)
            time.sleep(max(0.2, args.watch))


# ---- tail -----------------------------------------------------------------------------------------

def cmd_tail(home: Home, args: argparse.Namespace) -> int:
    from .store import unknown_job

    found = Store(home).load().job(args.id)
    if found is None:
        raise unknown_job(args.id)
    job = records([found])[0]
    tried = [a["n"] for a in job["attempts"]]
    attempt = job["attempt"] if args.attempt is None else args.attempt
    if args.attempt is not None and attempt not in tried:
        raise NotFoundError(f"job {args.id} has no attempt {attempt}",
                            hint=f"its attempts: {', '.join(map(str, tried)) or 'none yet'}")
    path = home.log_file(args.id, attempt, args.worker)
    if not path.exists() and not args.follow:
        if job["status"] == "queued" or not tried:
            raise NotFoundError(f"job {args.id} has not started yet", hint="run `jobtpu manage`")
        raise NotFoundError(f"no log of job {args.id} attempt {attempt} worker {args.worker} yet",
                            hint="logs are pulled by `jobtpu manage`")
    offset = _print_last_lines(path, args.lines)
    while args.follow:
        from .operations import pull_logs

        current, workers = pull_logs(home, args.id)  # the job as it stood before this pull
        if path.exists():
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            offset += len(data)
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        if current is None:
            return 1
        if current.ended or current.attempt != attempt:  # a pass saw the attempt end
            code = next((a.exit_code for a in current.attempts if a.n == attempt), None)
            return code if code is not None else 1
        code = attempt_exit_code(workers, current.current.workers if current.current else 1)
        if code is None:
            time.sleep(1.0)
            continue
        ours = next((ws for ref, ws in workers.items() if ref.worker == args.worker), None)
        if ours is None or offset >= ours.log_size:
            return code  # every worker's exit record is there and the log is home: no pass needed
        # else the log is still behind its end: pull the next part at once
    return 0


def attempt_exit_code(workers: dict[WorkerRef, WorkerState], expected: int) -> int | None:
    """The attempt's exit code once its workers' exit records say it is over, as a pass would decide
    it: the first worker to fail (by its exit record's time, then index), else 0 when all exited 0."""
    if len(workers) < expected:
        return None
    failed = [ws for ws in workers.values() if ws.exit_code not in (None, 0)]
    if failed:
        first = min(failed, key=lambda ws: (ws.exited_at if ws.exited_at is not None else float("inf"),
                                            ws.ref.worker))
        return first.exit_code
    if all(ws.exit_code == 0 for ws in workers.values()):
        return 0
    return None


def _print_last_lines(path: Path, n: int) -> int:
    if not path.exists():
        return 0
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    sys.stdout.buffer.write(b"".join(lines[-n:] if n > 0 else []))
    sys.stdout.flush()
    return len(data)


# ---- kill / resume / rerun / clean / fetch ---------------------------------------------------------

def cmd_kill(home: Home, args: argparse.Namespace) -> int:
    from .manage import fleet_session, kill_jobs

    with fleet_session(home) as p:
        jobs = [p.state.require_job(job_id) for job_id in args.ids]  # all known, or nothing is killed
        for job in jobs:
            if job.ended:
                note(f"job {job.id} already {job.status}")
        kill_jobs(p, [j for j in jobs if not j.ended], time.time())
    for job in jobs:
        if job.status == "killing":
            note(f"job {job.id}: still stopping on {job.machine}; the next pass will finish it")
    return 0


def cmd_resume(home: Home, args: argparse.Namespace, resume: bool = True) -> int:
    from .decide import requeue
    from .manage import fleet_session

    with fleet_session(home) as p:
        job = p.state.require_job(args.id)
        if not job.ended:
            raise JobtpuError(f"job {job.id} is {job.status}; only an ended job can be queued again",
                              hint=f"`jobtpu kill {job.id}` first")
        if args.machine is not None:
            p.fleet.require(args.machine)
        requeue(job, resume=resume, reason=None, machine=args.machine)
        job.recoveries = 0  # a person asked for it: the automatic recoveries count afresh
    print(job.id)
    return 0


def cmd_rerun(home: Home, args: argparse.Namespace) -> int:
    return cmd_resume(home, args, resume=False)


def cmd_clean(home: Home, args: argparse.Namespace) -> int:
    from .manage import fleet_session
    from .operations import clean_remote

    who = None if args.all_users else resolve_user(args.user)
    with fleet_session(home) as p:
        gone = [j for j in p.state.jobs if j.ended and (who is None or j.user == who)]
        if args.remote:
            clean_remote(p, gone)
        if gone:  # one write and one fsync, however many jobs
            append_line(home.history_file, b"\n".join(encode_jobs(gone)).decode())
        gone_ids = {j.id for j in gone}
        p.state.jobs = [j for j in p.state.jobs if j.id not in gone_ids]  # the session's commit removes them
        from .secrets import SecretStore

        # The cleaned jobs' secrets, and any a failed submit left behind. Under the state lock no
        # submit is between filing a secret and saving its job, so a secret whose id no saved job
        # holds is an orphan.
        with Store(home).lock():
            SecretStore(home).keep_only({j.id for j in Store(home).load().jobs} - gone_ids)
    note(f"moved {len(gone)} ended job(s) to {home.history_file.name}")
    return 0


def cmd_fetch(home: Home, args: argparse.Namespace) -> int:
    from .fleet import load_fleet
    from .operations import fetch

    state = Store(home).load()
    job = state.require_job(args.id)
    if not job.attempts:
        raise JobtpuError(f"job {job.id} has not run yet; there is nothing to fetch")
    if Path(args.path).is_absolute() or ".." in Path(args.path).parts:
        raise JobtpuError(f"PATH {args.path!r} must be relative to the job's folder, without '..'")
    target = Path(args.to).expanduser() if args.to else home.results(job.id)
    fetch(home, load_fleet(home), state, job, args.path, target)
    note(f"fetched into {target}")
    return 0


# ---- machines -------------------------------------------------------------------------------------

def machine_rows(home: Home) -> list[dict[str, Any]]:
    from .decide import used_resources
    from .fleet import load_fleet
    from .model import MachineRecord

    fleet = load_fleet(home)
    state = Store(home).load()
    used = used_resources(state.jobs)
    rows = []
    for m in fleet.machines.values():
        known = state.machines.get(m.name) or MachineRecord()
        taken = used.get(m.name, {})
        api_error = known.api_error  # the TPU API could not be asked this pass (credentials)
        workers = len(m.hosts) if m.kind == "ssh" else 1 if m.kind == "local" else None
        rows.append({
            "name": m.name, "kind": m.kind, "accelerator": m.accelerator, "preemptible": m.preemptible,
            "workers": known.workers if known.workers is not None else workers,
            "state": "unknown" if api_error else known.state or ("up" if m.kind == "local" else "unknown"),
            "health": known.health, "health_description": known.health_description,
            "detail": api_error or (known.detail if known.state is not None or m.kind == "local" else _never_seen(m)),
            "running": sum(1 for j in state.jobs if j.machine == m.name and j.active),
            "free": {r: n - len(taken.get(r, set())) for r, n in m.capacity.items()},
            **(_tpu_columns(m, known) if m.is_tpu else {}),
        })
    return rows


def _tpu_columns(machine: Machine, known: MachineRecord) -> dict[str, Any]:
    from .tpucmd import provisioning

    return {"provisioning": provisioning(machine, known), "zone": known.zone or machine.zone,
            "moved": known.moved,
            "queued_resource": known.queued_state if machine.queued_resource else None,
            "refused": known.refused.message if known.refused else None}


def _never_seen(machine: Machine) -> str:
    if machine.is_tpu:
        return "not asked yet: the next `jobtpu manage` asks the TPU API"
    # An idle ssh machine costs no round trip in a pass; it is first contacted when a job goes there.
    return f"not contacted yet: a pass contacts it when a job goes there; `jobtpu doctor {machine.name}` checks it now"


def cmd_machines(home: Home, args: argparse.Namespace) -> int:
    rows = machine_rows(home)
    if args.json:
        emit_json({"machines": rows})
        return 0
    from rich.console import Console

    from .display import machines_table

    Console().print(machines_table(rows))
    return 0


def cmd_tpu(home: Home, args: argparse.Namespace) -> int:
    from .tpucmd import tpu_command

    info = tpu_command(home, args.op, args.name)
    if args.json:
        emit_json(info)
    elif args.op == "status":
        print(printable(f"{info['machine']}: {info['tpu_state'] or 'no node'} ({info['jobtpu_state'] or 'unknown'})"
                        + (f" — {info['detail']}" if info.get("detail") else "")))
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(printable(f"{key:<{width}}  {value if value not in (None, [], {}) else '-'}"))
    return 0


def cmd_doctor(home: Home, args: argparse.Namespace) -> int:
    from .doctor import doctor
    from .fleet import load_fleet

    fleet = load_fleet(home)
    machine = fleet.require(args.name)
    problems = doctor(home, fleet, machine, fix=args.fix, report=note)
    return 1 if problems else 0


"""The job commands: submit, run, status, tail, kill, resume, rerun, clean, fetch."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import JobtpuError, NotFoundError
from ..home import Home
from ..store import Store
from ..users import check_owners, known_user
from .common import emit_json, note, sigterm_interrupts

if TYPE_CHECKING:
    from ..fleet import Fleet
    from ..model import Job
    from ..session import Session
    from ..workers import WorkerRef, WorkerState

# Listings (status, tail) import only what they use: `jobtpu status` runs from watch and scripts,
# so every module they load is start-up time paid on every call.


# ---- submit / run ---------------------------------------------------------------------------------

class SubmitOptions(NamedTuple):
    """What `submit` and `run` take, as the user typed it (checked by build_job)."""

    cmd: str
    dir: str | None = None  # a folder, a working directory's number, or None (see settings.source_folder)
    req: list[str] = []
    machine: str | None = None
    name: str = ""
    tag: list[str] = []
    env: list[str] = []
    rule: str | None = None
    max_recoveries: int = 20
    timeout: str | None = None
    stall: str | None = None
    include: list[str] = []
    exclude: list[str] = []
    user: str | None = None
    log_stage: bool = False
    overrides: list[str] = []
    priority: int = 0
    sheet_note: str | None = None


def build_job(home: Home, fleet: Fleet, opts: SubmitOptions) -> Job:
    """Check everything the user typed, then snapshot; raises before anything is written."""
    from ..inputs import config_overrides, parse_duration, parse_env
    from ..model import Job
    from ..requests import parse_request, why_not
    from ..settings import effective_aliases, load_settings, source_folder

    user = known_user(home, opts.user)
    settings = load_settings(home, user)  # the user's defaults for --rule and --req, dirs, aliases
    req = opts.req or settings.req
    rule = opts.rule if opts.rule is not None else settings.rule
    if not opts.cmd.strip():
        raise JobtpuError("--cmd is empty", hint='give the command to run, like --cmd "python train.py"')
    request = parse_request(req)
    pin = fleet.resolve(opts.machine).name if opts.machine is not None else None  # an alias pins its machine
    reasons = {m.name: why_not(m, request, pin) for m in fleet.machines.values()}
    if all(r is not None for r in reasons.values()):
        why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
        raise JobtpuError(f"no machine in the fleet could ever run this request ({why})",
                          hint=f"change --req/--machine, or add a machine to {home.machines_file}")
    timeout = parse_duration(opts.timeout, "--timeout") if opts.timeout is not None else None
    stall = parse_duration(opts.stall, "--stall") if opts.stall is not None else None
    env = parse_env(opts.env)
    overrides = config_overrides(opts.overrides, effective_aliases(fleet.config_aliases, settings.aliases))
    for tag in opts.tag:
        if not tag.strip():
            raise JobtpuError("--tag must not be empty")
    src, chosen_because = source_folder(opts.dir, settings, Path.cwd())
    if chosen_because:
        note(chosen_because)
    from ..archive import snapshot  # imported late: rich's progress bar is only needed here

    # The local machine's job folders hold unpacked snapshots: never pack them into the next one.
    local_roots = [Path(m.root) for m in fleet.machines.values() if m.kind == "local"]
    with sigterm_interrupts():
        snap = snapshot(src, home.archives, opts.include, opts.exclude, home=home.root, leave_out=local_roots)
    return Job(id=0, user=user, cmd=opts.cmd, archive=snap.name, created=time.time(), name=opts.name,
               req=list(req), pin=pin, tags=list(opts.tag), rule=rule, env=env,
               overrides=overrides, log_stage=opts.log_stage, max_recoveries=opts.max_recoveries,
               timeout=timeout, stall=stall, dir=str(src.resolve()), priority=opts.priority,
               sheet_note=_sheet_note(src, opts.sheet_note))


def _sheet_note(src: Path, given: str | None) -> str | None:
    """The note the job brings to its machine's row: --sheet-note, else its run config's wandb_notes."""
    from ..sheet import job_note

    return job_note(src, given)


def submit(home: Home, opts: SubmitOptions) -> Job:
    """Queue a job: checked, snapshotted, its secrets filed, then saved under a fresh id."""
    from ..fleet import load_fleet
    from ..store import take_next_id

    fleet = load_fleet(home)
    read = Store(home).read()  # a broken state.json is reported before the snapshot, not after
    job = build_job(home, fleet, opts)
    from ..secrets import SecretStore, split_env

    job.env, secret = split_env(job.env)
    secrets = SecretStore(home)
    if secret:  # a damaged secrets.json, or one another account keeps, before anything is written
        secrets.check_keeper()
        secrets.check()
    try:
        with Store(home).transaction(start=read) as state:
            job.id = take_next_id(home, state)
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
    from ..secrets import SecretStore

    try:
        if Store(home).load().job(job_id) is None:
            SecretStore(home).drop([job_id])
    except Exception:  # noqa: BLE001 - the first failure is the one to report
        pass



def submit_command(home: Home, opts: SubmitOptions, as_json: bool) -> int:
    job = submit(home, opts)
    _print_submitted(job, as_json)
    return 0


def run_command(home: Home, opts: SubmitOptions, as_json: bool, follow_log: bool) -> int:
    """Submit, then one pass (or, following, passes until the job ends: its exit code)."""
    from .. import manage

    job = submit(home, opts)
    _print_submitted(job, as_json)
    if not follow_log:
        if manage.run_pass(home, wait=30.0).skipped:
            note(f"jobtpu: another manage pass held the lock for 30 s; job {job.id} stays queued until a pass "
                 "starts it (`jobtpu manage`, or the cron/loop that runs the other pass)")
        return 0
    return follow(home, job.id)


def _print_submitted(job: Job, as_json: bool) -> None:
    if as_json:
        emit_json({"id": job.id, "archive": job.archive})
    else:
        print(job.id, flush=True)


def follow(home: Home, job_id: int, interval: float = 1.0) -> int:
    """Pass after pass, stream worker 0's log, until the job ends; its exit code (1 without one)."""
    from .. import manage

    printed: dict[int, int] = {}
    told_busy = False
    while True:
        if manage.run_pass(home, wait=30.0).skipped and not told_busy:
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




# ---- status ---------------------------------------------------------------------------------------

# The table shows what a person looks at: every job on a machine, the next queued ones and the most
# recently ended; a sweep's thousands of other rows would take seconds to draw and nobody reads them.
QUEUED_SHOWN = 20
ENDED_SHOWN = 20
ACTIVE_ON_MACHINE = frozenset({"launching", "running", "killing"})


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
    who = known_user(home, user)
    return [j for j in jobs if j.user == who]


def _ended_at(job: Job) -> float:
    ended = job.attempts[-1].ended if job.attempts else None
    return float(ended if ended is not None else job.created)


def rows_to_show(jobs: list[Job]) -> tuple[list[Job], str | None]:
    """The jobs the table shows, in id order, and a line saying what it left out (None: nothing).
    Shown: every job on a machine, the first QUEUED_SHOWN queued (the next to be dispatched) and the
    ENDED_SHOWN that ended last."""
    queued = [j for j in jobs if j.status == "queued"]
    ended = [j for j in jobs if j.status not in ACTIVE_ON_MACHINE and j.status != "queued"]
    recent = sorted(ended, key=_ended_at)[-ENDED_SHOWN:] if ENDED_SHOWN else []
    keep = {id(j) for j in queued[:QUEUED_SHOWN]} | {id(j) for j in recent}
    shown = [j for j in jobs if j.status in ACTIVE_ON_MACHINE or id(j) in keep]
    left_out = []
    if len(queued) > QUEUED_SHOWN:
        left_out.append(f"{len(queued) - QUEUED_SHOWN} more queued")
    if len(ended) > len(recent):
        left_out.append(f"{len(ended) - len(recent)} older ended")
    if not left_out:
        return shown, None
    return shown, f"{' and '.join(left_out)} job(s) not shown (--all shows every job)"


def status(home: Home, ids: list[int], user: str | None, all_users: bool, as_json: bool,
           watch: float | None, show_all: bool) -> int:
    from ..store import jobs_document, records

    if as_json:  # every selected job, the records as stored, encoded straight from the typed jobs
        sys.stdout.buffer.write(jobs_document(chosen_jobs(home, ids, user, all_users)))
        sys.stdout.flush()
        return 0
    from rich.console import Console

    from ..display import jobs_table, only_columns

    columns, zone = status_view(home)

    def table() -> Any:
        jobs = chosen_jobs(home, ids, user, all_users)
        if ids or show_all:  # jobs named by id are always shown
            return only_columns(jobs_table(records(jobs), zone=zone), columns)
        shown, left_out = rows_to_show(jobs)  # only the rows shown become table cells
        return only_columns(jobs_table(records(shown), left_out=left_out, zone=zone), columns)

    console = Console()
    if watch is None:
        console.print(table())
        return 0
    from rich.live import Live

    with Live(jobs_table([]), console=console, screen=False, auto_refresh=False) as live:
        while True:
            live.update(table(), refresh=True)
            time.sleep(max(0.2, watch))


def status_view(home: Home) -> tuple[list[str], Any]:
    """The columns and the time zone the person looking wants (their settings; else the defaults)."""
    from ..display import DEFAULT_JOB_COLUMNS
    from ..settings import viewer_settings, viewer_zone

    settings = viewer_settings(home)
    return settings.columns or list(DEFAULT_JOB_COLUMNS), viewer_zone(settings)


# ---- tail -----------------------------------------------------------------------------------------

def tail(home: Home, job_id: int, lines: int, follow_log: bool, worker: int, asked: int | None) -> int:
    """Print the last lines of a job's log; following, stream it until the attempt ends (its exit code)."""
    from ..store import records, unknown_job

    found = Store(home).load().job(job_id)
    if found is None:
        raise unknown_job(job_id)
    job = records([found])[0]
    tried = [a["n"] for a in job["attempts"]]
    attempt = job["attempt"] if asked is None else asked
    if asked is not None and attempt not in tried:
        raise NotFoundError(f"job {job_id} has no attempt {attempt}",
                            hint=f"its attempts: {', '.join(map(str, tried)) or 'none yet'}")
    path = home.log_file(job_id, attempt, worker)
    if not path.exists() and not follow_log:
        if job["status"] == "queued" or not tried:
            raise NotFoundError(f"job {job_id} has not started yet", hint="run `jobtpu manage`")
        raise NotFoundError(f"no log of job {job_id} attempt {attempt} worker {worker} yet",
                            hint="logs are pulled by `jobtpu manage`")
    offset = _print_last_lines(path, lines)
    while follow_log:
        from ..operations import pull_logs

        current, workers = pull_logs(home, job_id)  # the job as it stood before this pull
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
        ours = next((ws for ref, ws in workers.items() if ref.worker == worker), None)
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

def kill(home: Home, ids: list[int], force: bool = False) -> int:
    from ..manage import kill_jobs
    from ..session import locked_session

    me = known_user(home, None)
    with locked_session(home) as session:
        jobs = [session.state.require_job(job_id) for job_id in ids]  # all known, or nothing is killed
        for job in jobs:
            if job.ended:
                note(f"job {job.id} already {job.status}")
        live = [j for j in jobs if not j.ended]
        check_owners(live, me, force, "kill")  # all allowed, or nothing is killed
        kill_jobs(session, live, time.time())
        stopping = [(j, _local_process_owner(session, j)) for j in jobs if j.status == "killing"]
    for job, owner in stopping:
        if owner is not None:
            note(f"job {job.id}: its processes on {job.machine} run as {owner}, whose pass started them, and only "
                 f"{owner} may stop them: it stays killing until a `jobtpu manage` run by {owner} ends it")
        else:
            note(f"job {job.id}: still stopping on {job.machine}; the next pass will finish it")
    return 0


def _local_process_owner(session: Session, job: Job) -> str | None:
    """The account a job's processes on the local machine belong to, when it is not this one: a
    process started by another account's pass can only be signalled by that account (or root)."""
    import os
    import pwd

    machine = session.fleet.get(job.machine) if job.machine else None
    if machine is None or machine.kind != "local" or os.geteuid() == 0:
        return None
    pid_file = Path(machine.root) / "meta" / str(job.id) / f"{job.attempt}.0.pid"
    try:
        owner = pid_file.stat().st_uid
    except OSError:
        return None
    if owner == os.geteuid():
        return None
    try:
        return pwd.getpwuid(owner).pw_name
    except KeyError:
        return f"uid {owner}"


def requeue(home: Home, job_id: int, machine: str | None, resume: bool, force: bool = False) -> int:
    """`resume` (from the job's checkpoints) or `rerun` (from the start) of an ended job."""
    from ..decide import requeue as requeue_job
    from ..session import locked_session

    me = known_user(home, None)
    with locked_session(home) as session:
        job = session.state.require_job(job_id)
        if not job.ended:
            raise JobtpuError(f"job {job.id} is {job.status}; only an ended job can be queued again",
                              hint=f"`jobtpu kill {job.id}` first")
        if machine is not None:
            machine = session.fleet.resolve(machine).name
        check_owners([job], me, force, "resume" if resume else "rerun")
        requeue_job(job, resume=resume, reason=None, machine=machine)
        job.queued_by_hand()
    print(job.id)
    return 0


def clean(home: Home, user: str | None, all_users: bool, remote: bool, force: bool = False) -> int:
    """Move ended jobs to history.jsonl (with `remote`, delete their remote folders too)."""
    from ..operations import clean_remote
    from ..secrets import SecretStore
    from ..session import locked_session
    from ..store import append_to_history

    me = known_user(home, None)
    who = None if all_users else known_user(home, user)
    with locked_session(home) as session:
        gone = [j for j in session.state.jobs if j.ended and (who is None or j.user == who)]
        check_owners(gone, me, force, "clean")  # history keeps who forced it
        if remote:
            clean_remote(session, gone)
        append_to_history(home, gone)
        gone_ids = {j.id for j in gone}
        session.state.jobs = [j for j in session.state.jobs if j.id not in gone_ids]  # the commit removes them
        # The cleaned jobs' secrets, and any a failed submit left behind. Under the state lock no
        # submit is between filing a secret and saving its job, so a secret whose id no saved job
        # holds is an orphan.
        with Store(home).lock():
            SecretStore(home).keep_only({j.id for j in Store(home).load().jobs} - gone_ids)
    note(f"moved {len(gone)} ended job(s) to {home.history_file.name}")
    return 0


def fetch(home: Home, job_id: int, path: str, to: str | None) -> int:
    """Pull the job's remote folder (or `path` in it) into results/ID/ or `to`."""
    from ..fleet import load_fleet
    from ..operations import fetch as fetch_folder

    state = Store(home).load()
    job = state.require_job(job_id)
    if not job.attempts:
        raise JobtpuError(f"job {job.id} has not run yet; there is nothing to fetch")
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise JobtpuError(f"PATH {path!r} must be relative to the job's folder, without '..'")
    target = Path(to).expanduser() if to else home.results(job.id)
    fetch_folder(home, load_fleet(home), state, job, path, target)
    note(f"fetched into {target}")
    return 0

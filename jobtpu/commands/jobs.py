"""The job commands: submit, run, status, tail, kill, resume, rerun, clean, fetch."""

from __future__ import annotations

import codecs
import os
import sys
import time
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, NamedTuple

from jobtpu import timing
from jobtpu.commands.common import emit_json, note, sigterm_interrupts
from jobtpu.commands.select import Selection, announce, chosen_jobs, require_some, select_current
from jobtpu.errors import JobtpuError, NotFoundError
from jobtpu.home.layout import Home
from jobtpu.home.logfiles import log_rel
from jobtpu.home.store import Store
from jobtpu.home.users import check_owners, known_user

if TYPE_CHECKING:
    from jobtpu.passes.session import Session
    from jobtpu.remote.workers import WorkerRef, WorkerState
    from jobtpu.schema.machines import Fleet
    from jobtpu.schema.state import Job, State

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
    allow_secrets: bool = False  # snapshot a login home, or credentials, all the same
    user: str | None = None
    log_stage: bool = False
    on_resume: str | None = None
    overrides: list[str] = []
    verbatim: list[str] = []  # overrides after `--`: not checked for the old tool's habits
    progress: str | None = None
    priority: int = 0
    sheet_note: str | None = None
    # sweeps, dependencies, retries, grace and signal (batch.py)
    sweep: list[str] = []
    sweep_file: str | None = None
    after: list[str] = []
    after_any: list[str] = []
    retries: int = 0
    grace: str | None = None
    signal: str | None = None


def build_job(home: Home, fleet: Fleet, opts: SubmitOptions) -> Job:
    """Check everything the user typed, then snapshot; raises before anything is written."""
    from jobtpu.decide.fit import parse_request, why_not
    from jobtpu.home.settings import config_overrides, effective_aliases, load_settings, source_folder
    from jobtpu.inputs import check_overrides_typed, parse_duration, parse_env
    from jobtpu.schema.state import Job

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
    check_overrides_typed(opts.overrides, effective_aliases(fleet.config_aliases, settings.aliases))
    overrides = config_overrides([*opts.overrides, *opts.verbatim], fleet.config_aliases, settings.aliases)
    for tag in opts.tag:
        if not tag.strip():
            raise JobtpuError("--tag must not be empty")
    from jobtpu.limits import check_submit

    check_submit(opts.cmd, opts.name, opts.tag, overrides, opts.sheet_note)
    if opts.on_resume is not None:
        from jobtpu.decide.placement import check_on_resume
        from jobtpu.limits import MAX_OVERRIDES, check_length

        check_length("--on-resume", opts.on_resume, MAX_OVERRIDES)
        check_on_resume(opts.on_resume)
    if opts.progress is not None:
        from jobtpu.views.goodput import compile_progress

        try:
            compile_progress(opts.progress)
        except ValueError as e:
            raise JobtpuError(str(e), hint="see `jobtpu submit --help`") from None
    src, chosen_because = source_folder(opts.dir, settings, Path.cwd())
    if chosen_because:
        note(chosen_because)
    from jobtpu.snapshot.archive import snapshot  # imported late: rich's progress bar is only needed here

    # The local machine's job folders hold unpacked snapshots: never pack them into the next one.
    local_roots = [Path(m.root) for m in fleet.machines.values() if m.kind == "local"]
    home.ensure()  # the first command in a new home says where it made it
    with sigterm_interrupts():
        snap = snapshot(src, home.archives, opts.include, opts.exclude, home=home.root, leave_out=local_roots,
                        allow_secrets=opts.allow_secrets)
    return Job(id=0, user=user, cmd=opts.cmd, archive=snap.name, created=time.time(), name=opts.name,
               req=list(req), pin=pin, tags=list(opts.tag), rule=rule, env=env,
               overrides=overrides, log_stage=opts.log_stage, on_resume=opts.on_resume or None,
               max_recoveries=opts.max_recoveries,
               timeout=timeout, stall=stall, dir=str(src.resolve()), priority=opts.priority,
               sheet_note=_sheet_note(src, opts.sheet_note), progress=opts.progress, uid=os.getuid())


def _sheet_note(src: Path, given: str | None) -> str | None:
    """The note the job brings to its machine's row: --sheet-note, else its run config's wandb_notes."""
    from jobtpu.limits import MAX_SHEET_NOTE, cell
    from jobtpu.sheet.api import job_note

    found = job_note(src, given)  # --sheet-note was checked; the run config's is cut, with a mark
    return cell(found, MAX_SHEET_NOTE) if found is not None else None


def submit(home: Home, opts: SubmitOptions) -> Job:
    """Queue a job: checked, snapshotted, its secrets filed, then saved under a fresh id."""
    return submit_jobs(home, opts)[0]


def submit_jobs(home: Home, opts: SubmitOptions) -> list[Job]:
    """Queue a job, or a sweep's jobs (one snapshot for all): checked, snapshotted, secrets filed,
    then saved under fresh consecutive ids in one write."""
    from jobtpu.commands.batch import apply_extras, check_dependencies, parse_extras, sweep_jobs, sweep_tag
    from jobtpu.home.settings import load_settings
    from jobtpu.home.store import take_next_id, write_id_mark
    from jobtpu.inputs import parse_duration
    from jobtpu.schema.machines import load_fleet

    fleet = load_fleet(home)
    read = Store(home).read()  # a broken state.json is reported before the snapshot, not after
    timeout = parse_duration(opts.timeout, "--timeout") if opts.timeout is not None else None
    extras = parse_extras(opts.sweep, opts.sweep_file, opts.after, opts.after_any, opts.retries, opts.grace,
                          opts.signal, timeout)
    check_dependencies(home, read[0], read[0].next_id, extras.after, extras.after_any)  # before the snapshot
    job = build_job(home, fleet, opts)
    apply_extras(job, extras)
    from jobtpu.home.secrets import SecretStore, split_env
    from jobtpu.home.specs import write_spec

    job.env, secret = split_env(job.env)
    if extras.combinations is None:
        jobs = [job]
    else:  # the user's own aliases apply to a sweep's keys as to the words typed (docs/reference/commands.md §2.2.3)
        own = load_settings(home, job.user).aliases
        jobs = sweep_jobs(job, extras.combinations, fleet.config_aliases, own)
    secrets = SecretStore(home)
    if secret:  # a damaged secrets.json, or one another account keeps, before anything is written
        secrets.check_keeper()
        secrets.check()
    try:
        with Store(home).transaction(start=read) as state:
            first = take_next_id(home, state)
            if len(jobs) > 1:  # the sweep's ids, spent at once like one
                state.next_id = first + len(jobs)
                write_id_mark(home, first + len(jobs) - 1)
            check_dependencies(home, state, first, extras.after, extras.after_any)
            for offset, each in enumerate(jobs):
                each.id = first + offset
                if extras.combinations is not None:
                    each.sweep = first
                    each.tags.append(sweep_tag(first))
                secrets.put(each.id, secret)  # before the job exists, so it never runs without them
                write_spec(home, each, list(secret))  # what it runs, in a file of this account's (design §7)
            state.jobs.extend(jobs)
    except BaseException:  # a full disk, an unwritable file, Ctrl-C: the job was not saved
        if secret:
            for each in jobs:
                if each.id:
                    _drop_unsaved_secret(home, each.id)
        raise
    return jobs


def _drop_unsaved_secret(home: Home, job_id: int) -> None:
    """After a failed submit: drop the job's secret unless the job reached state.json after all (the
    failure came after the rename). Best effort: `clean` drops any secret no job holds."""
    from jobtpu.home.secrets import SecretStore

    try:
        if Store(home).load().job(job_id) is None:
            SecretStore(home).drop([job_id])
    except Exception:  # noqa: BLE001 - the first failure is the one to report
        pass



def submit_command(home: Home, opts: SubmitOptions, as_json: bool) -> int:
    _print_submitted(submit_jobs(home, opts), as_json)
    return 0


def run_command(home: Home, opts: SubmitOptions, as_json: bool, follow_log: bool) -> int:
    """Submit, then one pass (or, following, passes until the job ends: its exit code)."""
    from jobtpu.passes import manage

    if follow_log and (opts.sweep or opts.sweep_file):
        raise JobtpuError("run --follow follows one job, and a sweep is many",
                          hint="`jobtpu run` without --follow, then `jobtpu status --sweep ID`")
    submitted = submit_jobs(home, opts)
    _print_submitted(submitted, as_json)
    job = submitted[0]
    if not follow_log:
        wait = timing.current().run_lock_wait
        if manage.run_pass(home, wait=wait).skipped:
            note(f"jobtpu: another manage pass held the lock for {wait:g} s; job {job.id} stays queued until a pass "
                 "starts it (`jobtpu manage`, or the cron/loop that runs the other pass)")
        return 0
    return follow(home, job.id)


def _print_submitted(jobs: list[Job], as_json: bool) -> None:
    """A job's id; a sweep's ids as a range (12-17)."""
    from jobtpu.sweeps import id_range

    job = jobs[0]
    if as_json:
        document: dict[str, Any] = {"id": job.id, "archive": job.archive}
        if job.sweep is not None:
            document.update(sweep=job.sweep, ids=[j.id for j in jobs])
        emit_json(document)
    else:
        print(id_range([j.id for j in jobs]) if job.sweep is not None else job.id, flush=True)


def follow(home: Home, job_id: int, interval: float | None = None) -> int:
    """Pass after pass, stream worker 0's log, until the job ends; its exit code (1 without one).
    Ctrl-C stops the following, never the job: it says so, and how to follow it again (exit 130)."""
    try:
        return _follow(home, job_id, timing.current().run_follow_poll if interval is None else interval)
    except KeyboardInterrupt as e:
        from jobtpu.errors import EXIT_INTERRUPTED, Terminated

        sys.stdout.flush()
        note(f"jobtpu: stopped following job {job_id}; the job goes on (`jobtpu tail -f {job_id}` follows it again)")
        if isinstance(e, Terminated):
            raise
        return EXIT_INTERRUPTED


def _follow(home: Home, job_id: int, interval: float) -> int:
    from jobtpu.passes import manage

    printed: dict[int, int] = {}
    decoders: dict[int, codecs.IncrementalDecoder] = {}
    told_busy = False
    while True:
        if manage.run_pass(home, wait=timing.current().run_lock_wait).skipped and not told_busy:
            note(f"jobtpu: another manage pass is running; following job {job_id} as passes run it")
            told_busy = True
        job = Store(home).load().job(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} is no longer in state.json")
        for attempt in sorted({a.n for a in job.attempts}):
            printed[attempt] = _print_from(home, log_rel(job_id, attempt, 0), printed.get(attempt, 0),
                                           decoders.setdefault(attempt, _decoder()))
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


HISTORY_SHOWN = 20  # `status --history` shows the newest this many (--all: every one)


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


def sweep_summary(jobs: list[Job]) -> str:
    """A sweep's line of counts, most advanced first: `4 finished, 1 running, 1 failed`."""
    order = ("finished", "running", "launching", "killing", "queued", "failed", "killed")
    counts = {status: sum(1 for j in jobs if j.status == status) for status in order}
    return ", ".join(f"{n} {status}" for status, n in counts.items() if n)


def history_rows_to_show(jobs: list[Job]) -> tuple[list[Job], str | None]:
    """The newest HISTORY_SHOWN of the cleaned jobs (newest first), and what the table leaves out."""
    if len(jobs) <= HISTORY_SHOWN:
        return jobs, None
    return jobs[:HISTORY_SHOWN], f"{len(jobs) - HISTORY_SHOWN} older job(s) not shown (--all shows every job)"


def status(home: Home, chosen: Selection, as_json: bool, watch: float | None, show_all: bool) -> int:
    from jobtpu.home.store import jobs_document

    if as_json:  # every selected job, the records as stored, encoded straight from the typed jobs
        sys.stdout.buffer.write(jobs_document(chosen_jobs(home, chosen)))
        sys.stdout.flush()
        return 0
    from rich.console import Console, Group

    from jobtpu.views.display import jobs_table
    from jobtpu.views.listing import config_aliases, rows, status_counts

    chosen_columns, zone = status_view(home)
    viewer = viewer_name()

    console = Console()
    aliases = config_aliases(home)

    from jobtpu.commands.watch import freshness_text, say_freshness

    def table(state: State) -> Any:
        jobs = chosen_jobs(home, chosen, state)
        if chosen.ids or show_all:  # jobs named by id are always shown
            shown, left_out = jobs, None
        else:  # only the rows shown become table cells
            shown, left_out = (history_rows_to_show if chosen.history else rows_to_show)(jobs)
        now = time.time()
        counts = (f"sweep {', '.join(map(str, chosen.sweeps))}: {sweep_summary(jobs)}" if chosen.sweeps
                  else status_counts(jobs))
        captions = [("in history: " if chosen.history else "") + counts]
        return jobs_table(rows(shown, now, aliases, zone), console.width,
                          captions + ([left_out] if left_out else []), columns_for(chosen_columns, shown, viewer))

    if watch is None:
        state = Store(home).load()
        console.print(table(state))
        say_freshness(state.last_pass)
        return 0
    from rich.live import Live

    with Live(jobs_table([], console.width), console=console, screen=False, auto_refresh=False) as live:
        while True:
            state = Store(home).load()
            live.update(Group(table(state), freshness_text(state.last_pass)), refresh=True)
            time.sleep(max(0.2, watch))


def status_view(home: Home) -> tuple[list[str] | None, Any]:
    """The columns (None: the defaults) and the time zone the person looking set."""
    from jobtpu.home.settings import viewer_settings, viewer_zone

    settings = viewer_settings(home)
    return settings.columns or None, viewer_zone(settings)


def viewer_name() -> str | None:
    """Who is looking (None: a login jobtpu cannot take as a user name, so nobody's own view)."""
    from jobtpu.inputs import resolve_user

    try:
        return resolve_user(None)
    except JobtpuError:
        return None


def columns_for(chosen: list[str] | None, shown: list[Job], viewer: str | None) -> list[str]:
    """The columns chosen, else the defaults without `user` when every job shown is the viewer's
    own (it would say the same name on every row)."""
    from jobtpu.views.display import DEFAULT_JOB_COLUMNS

    if chosen is not None:
        return chosen
    own = all(job.user == viewer for job in shown)
    return [c for c in DEFAULT_JOB_COLUMNS if not (own and c == "user")]


# ---- tail -----------------------------------------------------------------------------------------

def tail(home: Home, job_id: int, lines: int, follow_log: bool, worker: int, asked: int | None) -> int:
    """Print the last lines of a job's log; following, stream it until the attempt ends (its exit code)."""
    from jobtpu.home.store import records
    from jobtpu.views.listing import find_job

    found = find_job(home, Store(home).load().jobs, job_id)  # a cleaned job's logs stay in logs/
    job = records([found])[0]
    tried = [a["n"] for a in job["attempts"]]
    attempt = job["attempt"] if asked is None else asked
    if asked is not None and attempt not in tried:
        raise NotFoundError(f"job {job_id} has no attempt {attempt}",
                            hint=f"its attempts: {', '.join(map(str, tried)) or 'none yet'}")
    path, rel = home.log_file(job_id, attempt, worker), log_rel(job_id, attempt, worker)
    if not path.exists() and not follow_log:
        if job["status"] == "queued" or not tried:
            raise NotFoundError(f"job {job_id} has not started yet", hint="run `jobtpu manage`")
        raise NotFoundError(f"no log of job {job_id} attempt {attempt} worker {worker} yet",
                            hint="logs are pulled by `jobtpu manage`")
    offset = _print_last_lines(home, rel, lines)
    decoder = _decoder()
    said: str | None = None  # the machine's trouble, said once while it lasts
    while follow_log:
        from jobtpu.remote.operations import pull_logs

        current, workers, trouble = pull_logs(home, job_id)  # the job as it stood before this pull
        offset = _print_from(home, rel, offset, decoder)
        if trouble is not None and said is None:
            note(f"jobtpu: {trouble}; showing the log as last pulled")
        said = trouble
        if current is None:
            return 1
        if current.ended or current.attempt != attempt:  # a pass saw the attempt end
            code = next((a.exit_code for a in current.attempts if a.n == attempt), None)
            return code if code is not None else 1
        code = attempt_exit_code(workers, current.current.workers if current.current else 1)
        if code is None:
            time.sleep(timing.current().follow_poll)
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


def _decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def _show(text: str) -> None:
    """Log text as the characters it holds: a job's escape sequences never steer the terminal."""
    from jobtpu.views.text import printable_lines

    sys.stdout.buffer.write(printable_lines(text).encode("utf-8", errors="replace"))
    sys.stdout.flush()


def _print_last_lines(home: Home, rel: PurePath, n: int) -> int:
    """Print the log's last `n` lines, read from its end (at most TAIL_READ bytes a line, never the
    whole file); the offset the log ended at."""
    from jobtpu.home.logfiles import TAIL_READ, read_end

    limit = TAIL_READ
    while True:
        data, end = read_end(home.root, rel, limit)
        if data.count(b"\n") > n or len(data) >= end or limit >= TAIL_READ * max(1, n):
            break
        limit *= 4
    lines = data.splitlines(keepends=True)
    if len(data) < end and lines:
        lines = lines[1:]  # a line cut by where the read began
    if n > 0:
        _show(b"".join(lines[-n:]).decode(errors="replace"))
    return end


def _print_from(home: Home, rel: PurePath, offset: int, decoder: codecs.IncrementalDecoder) -> int:
    """Print what the log holds past `offset`, escaped; the new offset."""
    from jobtpu.home.logfiles import read_from

    while True:
        data = read_from(home.root, rel, offset)
        if not data:
            return offset
        offset += len(data)
        _show(decoder.decode(data))



# ---- kill / resume / rerun / clean / fetch ---------------------------------------------------------

def kill(home: Home, sel: Selection, force: bool = False, dry_run: bool = False) -> int:
    from jobtpu.passes.manage import kill_jobs
    from jobtpu.passes.session import locked_session

    require_some(sel, "kill")
    me = known_user(home, None)
    with locked_session(home) as session:
        jobs = select_current(home, session.state.jobs, sel, "kill")  # every id known, or nothing is killed
        for job in jobs:
            if job.ended and not sel.filters:
                note(f"job {job.id} already {job.status}")
        live = [j for j in jobs if not j.ended]
        check_owners(live, me, force, "kill")  # all allowed, or nothing is killed
        announce("kill", live, sel, dry_run)
        if dry_run:
            return 0
        kill_jobs(session, live, time.time(), by=me)
        stopping = [(j, _local_process_owner(session, j)) for j in live if j.status == "killing"]
    for job, owner in stopping:
        if owner is not None:
            # Its wrapper did not obey the stop request in time (or predates them): a pass of the
            # owner's still can, and any pass tries again.
            note(f"job {job.id}: its processes on {job.machine} run as {owner} and have not stopped yet; "
                 f"the next pass tries again (one run by {owner} can stop them itself)")
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


def requeue(home: Home, sel: Selection, machine: str | None, resume: bool, force: bool = False,
            dry_run: bool = False) -> int:
    """`resume` (from the jobs' checkpoints) or `rerun` (from the start) of ended jobs; prints their ids."""
    from jobtpu.decide.core import requeue as requeue_job
    from jobtpu.passes.session import locked_session

    verb = "resume" if resume else "rerun"
    require_some(sel, verb)
    me = known_user(home, None)
    with locked_session(home) as session:
        jobs = select_current(home, session.state.jobs, sel, verb)
        if not sel.filters:  # named by id: each must have ended
            for job in jobs:
                if not job.ended:
                    raise JobtpuError(f"job {job.id} is {job.status}; only an ended job can be queued again",
                                      hint=f"`jobtpu kill {job.id}` first")
        jobs = [j for j in jobs if j.ended]
        if machine is not None:
            machine = session.fleet.resolve(machine).name
        check_owners(jobs, me, force, verb)
        announce(verb, jobs, sel, dry_run, by_id=False)
        if dry_run:
            return 0
        for job in jobs:
            requeue_job(job, resume=resume, reason=None, machine=machine)
            job.queued_by_hand()
            _adopt(home, job)
    if not sel.filters:  # named by id: the ids, as ever (with selectors, announce said which)
        for job in jobs:
            print(job.id)
    return 0


def _adopt(home: Home, job: Job) -> None:
    """A job made before homes kept specs gets one from its own account's rerun or resume (a
    teammate's forced rerun keeps the job's spec, or its lack of one: docs/design.md §7)."""
    from jobtpu.home.secrets import MASK
    from jobtpu.home.specs import has_spec, write_spec

    if job.uid not in (None, os.getuid()) or has_spec(home, job.id):
        return
    job.uid = os.getuid()
    write_spec(home, job, [name for name, value in job.env.items() if value == MASK])


def clean(home: Home, sel: Selection, remote: bool, force: bool = False, dry_run: bool = False) -> int:
    """Move ended jobs to history.jsonl (with `remote`, delete their remote folders too): your ended
    jobs, or the ended ones among those the ids and selectors name."""
    from jobtpu.commands.batch import settle_dependents
    from jobtpu.home.secrets import SecretStore
    from jobtpu.home.store import append_to_history
    from jobtpu.passes.session import locked_session
    from jobtpu.remote.operations import clean_remote

    me = known_user(home, None)
    with locked_session(home) as session:
        gone = [j for j in select_current(home, session.state.jobs, sel, "clean") if j.ended]
        check_owners(gone, me, force, "clean")  # history keeps who forced it
        announce("clean", gone, sel, dry_run)
        if dry_run:
            return 0
        if remote:
            clean_remote(session, gone)
        gone_ids = {j.id for j in gone}
        settle_dependents([j for j in session.state.jobs if j.id not in gone_ids], gone)
        append_to_history(home, gone)
        session.state.jobs = [j for j in session.state.jobs if j.id not in gone_ids]  # the commit removes them
        # The cleaned jobs' secrets, and any a failed submit left behind. Under the state lock no
        # submit is between filing a secret and saving its job, so a secret whose id no saved job
        # holds is an orphan.
        with Store(home).lock():
            SecretStore(home).keep_only({j.id for j in Store(home).load().jobs} - gone_ids)
        from jobtpu.home.specs import drop_spec

        for job_id in sorted(gone_ids):  # another member's spec stays (the sticky folder keeps it theirs)
            drop_spec(home, job_id)
    note(f"moved {len(gone)} ended job(s) to {home.history_file.name}")
    return 0


def fetch(home: Home, job_id: int, path: str, to: str | None) -> int:
    """Pull the job's remote folder (or `path` in it) into results/ID/ or `to`."""
    from jobtpu.remote.operations import fetch as fetch_folder
    from jobtpu.schema.machines import load_fleet
    from jobtpu.views.listing import find_job

    state = Store(home).load()
    job = find_job(home, state.jobs, job_id)  # a cleaned job's folder stays until `clean --remote`
    if not job.attempts:
        raise JobtpuError(f"job {job.id} has not run yet; there is nothing to fetch")
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise JobtpuError(f"PATH {path!r} must be relative to the job's folder, without '..'")
    target = Path(to).expanduser() if to else home.results(job.id)
    fetch_folder(home, load_fleet(home), state, job, path, target)
    note(f"fetched into {target}")
    return 0

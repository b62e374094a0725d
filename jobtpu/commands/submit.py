"""`jobtpu submit`: check what the user typed, snapshot the folder, queue the job (or a sweep's jobs)
under fresh ids; its parser's options are `run`'s too."""

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobtpu.commands import args
from jobtpu.commands.common import emit_json, note, sigterm_interrupts
from jobtpu.commands.submit_args import RULE_NAMES as RULE_NAMES
from jobtpu.commands.submit_args import add_job_options
from jobtpu.commands.submit_options import SubmitOptions
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.home.users import known_user

if TYPE_CHECKING:
    from jobtpu.home.roles import Role
    from jobtpu.home.secrets import SecretStore
    from jobtpu.schema.fleet import Fleet, Machine
    from jobtpu.schema.state import Job



def build_job(home: Home, fleet: "Fleet", opts: SubmitOptions, archives: Path | None = None,
              dry: bool = False) -> "Job":
    """Check everything the user typed, then snapshot (into `archives`, default the home's);
    raises before anything is written. `dry` (--dry-run): the snapshot's checks alone, nothing
    written (the job's archive left empty)."""
    from jobtpu.decide.fit import parse_request, why_not
    from jobtpu.decide.saving import check_saving, saving_of
    from jobtpu.home.settings import config_overrides, effective_aliases, load_settings, source_folder
    from jobtpu.inputs import check_overrides_typed, parse_duration, parse_env, parse_exit_codes, parse_stall
    from jobtpu.schema.state import Job

    user = known_user(home, opts.user)
    settings = load_settings(home, user)  # the user's defaults for --rule and --req, dirs, aliases
    req = opts.req or settings.req
    rule = opts.rule if opts.rule is not None else settings.rule
    if not (opts.cmd or "").strip():
        raise JobtpuError("--cmd is empty", hint='give the command to run, like --cmd "python train.py"')
    request = parse_request(req)
    pin = fleet.resolve(opts.machine).name if opts.machine is not None else None  # an alias pins its machine
    reasons = {m.name: why_not(m, request, pin) for m in fleet.machines.values()}
    if all(r is not None for r in reasons.values()):
        why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
        raise JobtpuError(f"no machine in the fleet could ever run this request ({why})",
                          hint=f"change --req/--machine, or add a machine to {home.machines_file}")
    check_slices(opts.slices, pin, [m for m in fleet.machines.values() if reasons[m.name] is None])
    check_class(fleet, opts.priority_class, user)
    timeout = parse_duration(opts.timeout, "--timeout") if opts.timeout is not None else None
    stall = parse_stall(opts.stall) if opts.stall is not None else None
    retry_on_exit = parse_exit_codes(opts.retry_on_exit, opts.retries) if opts.retry_on_exit is not None else None
    env = parse_env(opts.env)
    check_overrides_typed(opts.overrides, effective_aliases(fleet.config_aliases, settings.aliases))
    overrides = config_overrides([*opts.overrides, *opts.verbatim], fleet.config_aliases, settings.aliases)
    for tag in opts.tag:
        if not tag.strip():
            raise JobtpuError("--tag must not be empty")
    from jobtpu.limits import check_submit

    check_submit(opts.cmd or "", opts.name, opts.tag, overrides, opts.sheet_note)
    check_resume_and_progress(opts.on_resume, opts.progress)
    saving = saving_of(opts.saved_when, opts.saved_marker, opts.checkpoints)
    check_saving(saving)
    src, chosen_because = source_folder(opts.dir, settings, Path.cwd())
    if chosen_because:
        note(chosen_because)
    # The local machine's job folders hold unpacked snapshots: never pack them into the next one.
    local_roots = [Path(m.root) for m in fleet.machines.values() if m.runs_here]
    if dry:  # imported late, as the snapshot: rich's console is only needed here
        from jobtpu.snapshot.archive import check_snapshot

        check_snapshot(src, opts.include, opts.exclude, home=home.root, leave_out=local_roots,
                       allow_secrets=opts.allow_secrets)
        archive = ""
    else:
        archive = _snapshot_of(home, src, opts, archives or home.archives, local_roots)
    return Job(id=0, user=user, cmd=opts.cmd or "", archive=archive, created=time.time(), name=opts.name,
               req=list(req), pin=pin, tags=list(opts.tag), rule=rule, env=env,
               overrides=overrides, log_stage=opts.log_stage, on_resume=opts.on_resume or None, saving=saving,
               max_recoveries=opts.max_recoveries, max_preemptions=opts.max_preemptions or None,
               retry_on_exit=retry_on_exit,
               timeout=timeout, stall=stall, dir=str(src.resolve()), priority=opts.priority,
               priority_class=opts.priority_class,
               sheet_note=_sheet_note(src, opts.sheet_note), progress=opts.progress, uid=os.getuid(),
               held=opts.hold, waiting="held by hold" if opts.hold else None, slices=opts.slices)


def check_class(fleet: "Fleet", name: str | None, user: str) -> None:
    """--class: one of machines.json's priority classes that `user` may use (as submit takes it, and as
    the runner takes a member's submitted record)."""
    if name is None:
        return
    if fleet.classes is None:
        raise JobtpuError(f"--class {name}: machines.json declares no priority classes",
                          hint="leave out --class, or add priority_classes to machines.json")
    why = fleet.classes.refusal(name, user)
    if why is not None:
        raise JobtpuError(why, hint="give a class you may use, or leave out --class for the default")


def check_slices(slices: int, pin: str | None, fitting: "list[Machine]") -> None:
    """--slices: at least one, no --machine with more than one, and no more than the machines of one
    kind that fit the request (a gang is all of one kind: decide/gang.py)."""
    if slices < 1:
        raise JobtpuError(f"--slices {slices}: a job runs on at least one slice", hint="give --slices 1 or more")
    if slices > 1 and pin is not None:
        raise JobtpuError(f"--machine {pin} names one machine, and --slices {slices} asks for {slices}",
                          hint="leave out --machine; --req picks the kind of machine for every slice")
    if slices == 1:  # one slice: any machine that fits, the local one too
        return
    # Imported late: a submit of one slice needs none of it.
    from jobtpu.decide.gang import kinds, largest_gang

    if slices > largest_gang(fitting):
        have = ", ".join(f"{len(group)} of {accel or 'no accelerator'}" for (accel, _), group in kinds(fitting).items())
        raise JobtpuError(f"--slices {slices}: the fleet could never form that gang (machines of one kind that fit: "
                          f"{have})", hint="ask fewer slices, or add machines of that kind to machines.json")


def _snapshot_of(home: Home, src: Path, opts: SubmitOptions, archives: Path, local_roots: list[Path]) -> str:
    """The folder's snapshot, made (or found) in `archives`: its archive's name."""
    from jobtpu.snapshot.archive import snapshot  # imported late: rich's progress bar is only needed here

    home.ensure()  # the first command in a new home says where it made it
    with sigterm_interrupts():
        return snapshot(src, archives, opts.include, opts.exclude, home=home.root, leave_out=local_roots,
                        allow_secrets=opts.allow_secrets).name


def check_resume_and_progress(on_resume: str | None, progress: str | None) -> None:
    """--on-resume (its length, placeholders, shell words) and --progress (an RE2 pattern with a group),
    as submit takes them and as the runner takes a member's submitted record."""
    if on_resume is not None:
        from jobtpu.decide.placement import check_on_resume
        from jobtpu.limits import MAX_OVERRIDES, check_length

        check_length("--on-resume", on_resume, MAX_OVERRIDES)
        check_on_resume(on_resume)
    if progress is not None:
        from jobtpu.decide.progress import compile_progress

        try:
            compile_progress(progress)
        except ValueError as e:
            raise JobtpuError(str(e), hint="see `jobtpu submit --help`") from None


def _sheet_note(src: Path, given: str | None) -> str | None:
    """The note the job brings to its machine's row: --sheet-note, else its run config's wandb_notes."""
    from jobtpu.limits import MAX_SHEET_NOTE, cell
    from jobtpu.sheet.jobnote import job_note

    found = job_note(src, given)  # --sheet-note was checked; the run config's is cut, with a mark
    return cell(found, MAX_SHEET_NOTE) if found is not None else None


def submit(home: Home, opts: SubmitOptions) -> "Job":
    """Queue a job: checked, snapshotted, its secrets filed, then saved under a fresh id."""
    return submit_jobs(home, opts)[0]


def submit_jobs(home: Home, opts: SubmitOptions, rows: "list[dict[str, str]] | None" = None,
                dry: bool = False) -> "list[Job]":
    """Queue a job, or a sweep's jobs (one snapshot for all): checked, snapshotted, secrets filed,
    then saved under fresh consecutive ids in one write. `rows`: a sweep's combinations as values
    (the Python API's, batch.parse_extras). `dry` (--dry-run): every check, the same one line for a
    mistake, and nothing written (no snapshot, no id, no request): the jobs unsaved."""
    from jobtpu.commands.batch import apply_extras, check_dependencies, parse_extras, sweep_jobs, sweep_tag
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.settings import load_settings
    from jobtpu.home.store import take_next_id, write_id_mark
    from jobtpu.inputs import parse_duration

    fleet = load_fleet(home)  # a broken machines.json is said first, as for every command
    opts = with_job_file(home, opts)
    read = Store(home).read()  # a broken state.json is reported before the snapshot, not after
    timeout = parse_duration(opts.timeout, "--timeout") if opts.timeout is not None else None
    extras = parse_extras(opts.sweep, opts.sweep_file, opts.after, opts.after_any, opts.retries, opts.grace,
                          opts.signal, timeout, opts.max_running, rows)
    check_dependencies(home, read[0], read[0].next_id, extras.after, extras.after_any)  # before the snapshot
    from jobtpu.home.roles import Layout, role_of

    role = role_of(home.root)
    member = role.is_member and role.layout is Layout.SHARED  # a request to the runner (design §7)
    if member and not dry:
        from jobtpu.home.spool import member_cache

        cache = member_cache(home)
    job = build_job(home, fleet, opts, cache if member and not dry else None, dry)
    apply_extras(job, extras)
    secret: dict[str, str] = {}
    if job.env:  # secrets.py is loaded only for a job with an environment to split
        from jobtpu.home.secrets import split_env

        job.env, secret = split_env(job.env)
    if extras.combinations is None:
        jobs = [job]
    else:  # the user's own aliases apply to a sweep's keys as to the words typed (docs/reference/commands.md §2.2.3)
        own = load_settings(home, job.user).aliases
        jobs = sweep_jobs(job, extras.combinations, fleet.config_aliases, own)
    if dry:
        _check_secret_keeper(home, role, member, bool(secret))
        return jobs
    if member:
        from jobtpu.commands.spooled import file_submission

        return file_submission(home, role, jobs, secret, extras, cache)
    secrets = _checked_secret_store(home) if secret else None
    try:
        with Store(home).transaction(start=read) as state:
            if role.layout is Layout.SHARED:  # the runner's: its ids clear of every member's claim (home/claims.py)
                from jobtpu.home.claims import runner_ids

                first = runner_ids(home, state, len(jobs))
            else:
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
            if secrets is not None:  # before the jobs exist: none runs without them
                secrets.put_many([each.id for each in jobs], secret)
            if role.layout is Layout.OLD_SHARED:  # only its passes read what runs from a file of the submitter's
                from jobtpu.home.specs import write_specs  # (design §7); a private home's records are its own

                write_specs(home, jobs, list(secret))
            state.jobs.extend(jobs)
    except BaseException:  # a full disk, an unwritable file, Ctrl-C: the job was not saved
        if secret:
            for each in jobs:
                if each.id:
                    _drop_unsaved_secret(home, each.id)
        raise
    return jobs


def _check_secret_keeper(home: Home, role: "Role", member: bool, secret: bool) -> None:
    """--dry-run: where a secret value would go is checked as the submit checks it (the runner's
    key a member seals it to; this home's secrets.json), reading only."""
    if not secret:
        return
    if member:
        from jobtpu.home.roles import runner_name
        from jobtpu.home.sealing import runner_public_key

        runner_public_key(home.root, runner_name(role))
    else:
        _checked_secret_store(home)


def _checked_secret_store(home: Home) -> "SecretStore":
    """secrets.json, for a job with secret values: a damaged one, or one another account keeps, is
    said before anything is written (secrets.py is loaded only then)."""
    from jobtpu.home.secrets import SecretStore

    store = SecretStore(home)
    store.check_keeper()
    store.check()
    return store


def with_job_file(home: Home, opts: SubmitOptions) -> SubmitOptions:
    """The options with the defaults of the snapshotted folder's jobtpu.toml under the command line's
    (docs/reference/commands.md §2.2.9); a command is needed from one or the other."""
    from jobtpu.commands.bare_words import with_bare_words
    from jobtpu.home.settings import load_settings, source_folder
    from jobtpu.jobfile import NAME, merged, read_job_file

    opts = with_bare_words(home, opts)  # first: a bare word may be the user whose settings count
    settings = load_settings(home, known_user(home, opts.user))
    src, _ = source_folder(opts.dir, settings, Path.cwd())
    from_file = read_job_file(src)
    if from_file:
        opts = SubmitOptions(**merged(opts._asdict(), SubmitOptions._field_defaults, from_file))
    if opts.cmd is None:
        from jobtpu.errors import UsageError

        raise UsageError("no command to run: give --cmd, or `cmd` in the [job] table of the folder's " + NAME,
                          hint='like --cmd "python train.py"; `jobtpu submit --help` lists the options')
    return opts


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
    if opts.dry_run:
        return print_resolved(home, opts)
    print_submitted(submit_jobs(home, opts), as_json)
    return 0


def print_resolved(home: Home, opts: SubmitOptions) -> int:
    """`--dry-run`: every check a submit makes (a mistake is its one line, and nothing is written),
    then the options the job would be submitted with, the job file's and the command line's
    together, one `name: value` a line (what was left at its default is not shown)."""
    from jobtpu.render.text import printable

    submit_jobs(home, opts, dry=True)
    resolved = with_job_file(home, opts)._asdict()
    for name, value in resolved.items():
        if name != "dry_run" and value != SubmitOptions._field_defaults.get(name):
            print(printable(f"{name.replace('_', '-')}: {value if not isinstance(value, list) else ' '.join(value)}"))
    return 0


def print_submitted(jobs: "list[Job]", as_json: bool) -> None:
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


def options_from(parsed: argparse.Namespace) -> SubmitOptions:
    """The parsed arguments of `submit` or `run` as the options build_job checks."""
    return SubmitOptions(**{name: getattr(parsed, name) for name in SubmitOptions._fields})


def add_parser(subparsers: "args.Subparsers") -> None:
    p = args.add_command(subparsers, "submit")
    add_job_options(p)
    p.set_defaults(func=lambda home, a: submit_command(home, options_from(a), a.json))

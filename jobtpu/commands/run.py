"""`jobtpu run`: submit, then a manage pass; with --follow, passes until the job ends, its log
streamed and its exit code the command's."""

from __future__ import annotations

import codecs
import sys
import time

from jobtpu import timing
from jobtpu.commands import args, submit
from jobtpu.commands.common import note
from jobtpu.commands.tail import new_decoder, print_from
from jobtpu.errors import JobtpuError, NotFoundError
from jobtpu.home.layout import Home
from jobtpu.home.logfiles import log_rel
from jobtpu.home.store import Store


def run_command(home: Home, opts: submit.SubmitOptions, as_json: bool, follow_log: bool) -> int:
    """Submit, then one pass (or, following, passes until the job ends: its exit code)."""
    from jobtpu.passes import manage

    if opts.dry_run:
        return submit.print_resolved(home, opts)
    if follow_log and (opts.sweep or opts.sweep_file):
        raise JobtpuError("run --follow follows one job, and a sweep is many",
                          hint="`jobtpu run` without --follow, then `jobtpu status --sweep ID`")
    from jobtpu.commands.intake import take_in
    from jobtpu.home.roles import role_of

    submitted = submit.submit_jobs(home, opts)
    submit.print_submitted(submitted, as_json)
    job = submitted[0]
    if role_of(home.root).is_member:  # a shared home's runner runs the passes; a member follows them
        return follow(home, job.id, passes=False, request=f"submit-{job.id}-{len(submitted)}.json") if follow_log else 0
    for line in take_in(home):
        note(line)
    if not follow_log:
        wait = timing.current().run_lock_wait
        if manage.run_pass(home, wait=wait).skipped:
            note(f"jobtpu: another manage pass held the lock for {wait:g} s; job {job.id} stays queued until a pass "
                 "starts it (`jobtpu manage`, or the cron/loop that runs the other pass)")
        return 0
    return follow(home, job.id)


def follow(home: Home, job_id: int, interval: float | None = None, passes: bool = True,
           request: str | None = None) -> int:
    """Pass after pass, stream worker 0's log, until the job ends; its exit code (1 without one).
    Ctrl-C stops the following, never the job: it says so, and how to follow it again (exit 130)."""
    try:
        return _follow(home, job_id, timing.current().run_follow_poll if interval is None else interval, passes,
                       request)
    except KeyboardInterrupt as e:
        from jobtpu.errors import EXIT_INTERRUPTED, Terminated

        sys.stdout.flush()
        note(f"jobtpu: stopped following job {job_id}; the job goes on (`jobtpu tail -f {job_id}` follows it again)")
        if isinstance(e, Terminated):
            raise
        return EXIT_INTERRUPTED


def _follow(home: Home, job_id: int, interval: float, passes: bool = True, request: str | None = None) -> int:
    from jobtpu.passes import manage

    printed: dict[int, int] = {}
    decoders: dict[int, codecs.IncrementalDecoder] = {}
    told_busy = False
    while True:
        if passes and manage.run_pass(home, wait=timing.current().run_lock_wait).skipped and not told_busy:
            note(f"jobtpu: another manage pass is running; following job {job_id} as passes run it")
            told_busy = True
        job = Store(home).load().job(job_id)
        if job is None and request is not None:  # sent to the runner, not taken in yet
            from jobtpu.commands.relay import read_reply, show_reply

            reply = read_reply(home, request)
            if reply is not None and reply.code != 0:  # refused: its lines, and its exit code
                return show_reply(reply)
            time.sleep(interval)
            continue
        if job is None:
            raise NotFoundError(f"job {job_id} is no longer in state.json")
        for attempt in sorted({a.n for a in job.attempts}):
            printed[attempt] = print_from(home, log_rel(job_id, attempt, 0), printed.get(attempt, 0),
                                           decoders.setdefault(attempt, new_decoder()))
        if job.ended:
            note(f"job {job_id}: {job.status}" + (f" ({job.reason})" if job.reason else ""))
            return job.exit_code if job.exit_code is not None else 1
        time.sleep(interval)


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "run")
    submit.add_job_options(p)
    p.add_argument("--follow", action="store_true", help="stream the log; exit with the job's exit code")
    p.set_defaults(func=lambda home, a: run_command(home, submit.options_from(a), a.json, a.follow))

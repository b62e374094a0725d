"""`jobtpu manage`: one pass over the fleet, or (--loop) a pass every SECONDS until interrupted."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from jobtpu.commands import args
from jobtpu.commands.common import error_text, note
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.views.text import printable


def manage(home: Home, loop: float | None, dry_run: bool) -> int:
    """One pass, or (with `loop`) a pass every `loop` seconds until interrupted."""
    from jobtpu.passes import manage as passes
    from jobtpu.passes.session import kept_connections

    with kept_connections(loop is not None) as kept:  # a loop keeps its SSH connections open between rounds
        return _manage_rounds(home, loop, dry_run, functools.partial(passes.run_pass, kept=kept), kept)


def _manage_rounds(home: Home, loop: float | None, dry_run: bool, run_pass: Any, kept: Any = None) -> int:
    from jobtpu.commands.freshness import record_pass_failure
    from jobtpu.commands.intake import take_in
    woken: set[tuple[int, int]] = set()  # (job, attempt) ends that started a round early: once each
    while True:
        try:
            if not dry_run:  # a shared home's requests first: submits to start, acts to carry out
                for line in take_in(home):
                    note(line)
            report = run_pass(home, dry_run=dry_run, on_note=None if dry_run else note, every=loop)
        except Exception as e:
            # A loop logs every failed round (nobody may be reading its terminal); a single pass
            # that fails on the user's mistake (a broken machines.json) changes nothing, as every
            # command does, and says so: only its other failures (a bug, a full disk) are logged.
            if not dry_run and (loop is not None or not isinstance(e, JobtpuError)):
                record_pass_failure(home, e)
            if loop is None:
                raise
            # The loop babysits jobs at 3 am: a typo in machines.json, a busy state file (one line),
            # a full disk or a bug (the traceback) is reported, and the next round tries again.
            if isinstance(e, JobtpuError):
                note(error_text(e))
            else:
                import traceback

                note("jobtpu: the pass failed; trying again next round\n" + traceback.format_exc().rstrip())
        else:
            if dry_run:
                for line in report.notes or ["nothing to do"]:
                    print(printable(line))
            elif report.skipped:
                note("jobtpu: another manage pass is running; skipped")
            if loop is None:
                return 0
        between_rounds(home, loop, woken, kept)


def between_rounds(home: Home, seconds: float, woken: set[tuple[int, int]], kept: Any = None) -> None:
    """A loop's wait for its next round: `seconds`, or less when a member's request arrives or a local
    job ends; meanwhile, every timing's log_stream seconds, the running jobs' new log lines come
    home through the loop's kept connections (a preempted VM takes none of them with it)."""
    import time

    from jobtpu import timing
    from jobtpu.home.spool import wait_for_change
    from jobtpu.remote.operations import stream_logs

    folders, ended = wake_folders(home, woken)
    if ended:  # an end the pass did not see yet: the next round now
        return
    deadline = time.monotonic() + seconds
    every = timing.current().log_stream
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or wait_for_change(folders, min(left, every)):
            return
        if left > every:
            try:
                stream_logs(home, kept)
            except Exception as e:  # noqa: BLE001 - the pass pulls what this could not
                note(f"jobtpu: bringing logs home between passes: {type(e).__name__}: {e}")


def wake_folders(home: Home, woken: set[tuple[int, int]]) -> tuple[list[Path], bool]:
    """What a loop watches between its rounds: the spool (members' requests), and the folder where
    each active local job's workers write their exit records (an end is noticed at once, not at the
    next interval); and whether one has ended already since the pass looked (then no wait at all;
    once per attempt, in `woken`: a pass that could not settle it waits for the interval as ever).
    A home that cannot be read now is watched through its spool alone."""
    from jobtpu.home.roles import SPOOL
    from jobtpu.home.store import Store
    from jobtpu.schema.machines import load_fleet

    folders = [home.root / SPOOL]
    try:
        fleet, state = load_fleet(home), Store(home).load()
    except JobtpuError:
        return folders, False
    ended = False
    for job in state.jobs:
        machine = fleet.machines.get(job.machine) if job.active and job.machine else None
        if machine is not None and machine.kind == "local":
            folder = Path(machine.root) / "meta" / str(job.id)
            folders.append(folder)
            if (job.id, job.attempt) not in woken and (folder / f"{job.attempt}.0.exit").exists():
                woken.add((job.id, job.attempt))
                ended = True
    return folders, ended


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "manage", "one pass over the fleet: reap, recover, dispatch, pull logs")
    p.add_argument("--loop", type=args.positive_seconds, metavar="SECONDS", help="repeat every SECONDS until interrupted")
    p.add_argument("--dry-run", action="store_true", help="print what the pass would do; change nothing")
    p.set_defaults(func=lambda home, a: manage(home, a.loop, a.dry_run))

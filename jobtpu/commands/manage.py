"""`jobtpu manage`: one pass over the fleet, or (--loop) a pass every SECONDS until interrupted."""

from __future__ import annotations

import functools
import os
from typing import Any

from jobtpu.commands import args
from jobtpu.commands.common import error_text, note, say
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.render.text import printable


def manage(home: Home, loop: float | None, dry_run: bool, every: float | None = None, standby: bool = False) -> int:
    """One pass, or (with `loop`) a pass every `loop` seconds until interrupted. `every`: how often
    something else (cron) runs single passes, recorded with the pass as a loop's interval is.
    `standby`: this runner waits for the lease and takes it over when it expires (home-files.md §1.7)."""
    from jobtpu.passes import manage as passes
    from jobtpu.passes.session import kept_connections

    with kept_connections(loop is not None) as kept:  # a loop keeps its SSH connections open between rounds
        return _manage_rounds(home, loop, dry_run, functools.partial(passes.run_pass, kept=kept), every, kept, standby)


def _manage_rounds(home: Home, loop: float | None, dry_run: bool, run_pass: Any, every: float | None = None,
                   kept: Any = None, standby: bool = False) -> int:
    from jobtpu.commands.cadence import between_rounds, spool_stamp
    from jobtpu.commands.freshness import record_pass_failure
    from jobtpu.commands.intake import take_in
    from jobtpu.home.fence import Fenced
    from jobtpu.home.store import stamp_of
    woken: set[tuple[int, int]] = set()  # (job, attempt) ends that started a round early: once each
    seen: int | None = None
    while True:
        left: bytes | None = None  # state.json as the round left it: another's write (a submit) wakes the loop
        try:
            seen = spool_stamp(home)
            if not dry_run and not _lease_round(home, standby, loop or every):
                if loop is None:
                    return 0
                _stand_by(loop)
                continue
            tell = functools.partial(_fenced_note, home)
            if not dry_run:  # a shared home's requests first: submits to start, acts to carry out
                for line in take_in(home):
                    tell(line)
            report = run_pass(home, dry_run=dry_run, on_note=None if dry_run else tell, every=loop or every)
        except Fenced as e:  # a stale runner: whatever it would do next could undo its successor's work
            note(error_text(e))
            return e.exit_code
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
            elif isinstance(e, OSError) and not home.root.is_dir():
                # The home's filesystem went away in the middle of the pass (an NFS mount gone): no bug.
                note(f"jobtpu: the home {home.root} went away during the pass ({e.strerror}); "
                     "this runner writes nothing until it is back")
            else:
                import traceback

                note("jobtpu: the pass failed; trying again next round\n" + traceback.format_exc().rstrip())
        else:
            if dry_run:
                for line in report.notes or ["nothing to do"]:
                    say(printable(line))
            elif report.skipped:
                note("jobtpu: another manage pass is running; skipped")
            if loop is None:
                return 0
            left = report.state_left
        if left is None:  # no pass of ours wrote it (skipped, failed, a dry run): as it is now
            left = stamp_of(home.state_file)
        between_rounds(home, loop, woken, kept, spool_seen=seen, state_seen=left)


def _lease_round(home: Home, standby: bool, interval: float | None) -> bool:
    """The runner lease's step before a round (home/fence.py): whether this runner runs the round.
    A home whose lease cannot be read (its filesystem gone) runs nothing: one line, and the loop
    tries again next round. A line said the round before is not said again."""
    from jobtpu.home import fence

    try:
        go, lines = fence.round_(home, standby, interval)
    except OSError as e:
        # Said by the cause alone (the same whichever step met it), so a loop that waits says it once.
        why = os.strerror(e.errno) if e.errno else str(e)
        go, lines = False, [f"the home's lease cannot be read ({why}); this runner writes nothing until it can"]
    for line in lines:
        if line != _said_last.get(str(home.root)):  # a runner that waits each round says so once
            note(f"jobtpu: {line}")
    _said_last[str(home.root)] = lines[-1] if lines else ""
    return go


_said_last: dict[str, str] = {}


def _fenced_note(home: Home, line: str) -> None:
    """A pass's line, said only while this runner still holds its lease: one paused before it said
    what it decided wakes to say only that it stops (home/fence.py)."""
    from jobtpu.home import fence

    fence.check(home)
    note(line)


def _stand_by(seconds: float) -> None:
    """A standby's wait between its looks at the lease."""
    import time

    time.sleep(seconds)


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "manage")
    p.add_argument("--loop", type=args.positive_seconds, metavar="SECONDS", help="repeat every SECONDS until interrupted")
    p.add_argument("--dry-run", action="store_true", help="print what the pass would do; change nothing")
    p.add_argument("--every", type=args.positive_seconds, metavar="SECONDS",
                   help="the interval single passes are run at (cron: `jobtpu cron install` sets it), recorded with "
                   "the pass so that `status` says when passes are late")
    p.add_argument("--standby", action="store_true",
                   help="stand by for this home's runner on another box: take over its lease when it stops renewing it")
    p.set_defaults(func=lambda home, a: manage(home, a.loop, a.dry_run, a.every, a.standby))

"""`tail` and `fetch` across a selection (`tail --sweep 12 -n 1`, `fetch --sweep 12 result.json`):
the last lines of every selected job's log, each line prefixed by its job's id, or the same file of
every selected job into results/<id>/, a few jobs at a time (docs/reference/commands.md §2.5, §2.6).
Jobs are chosen by the one selection of status and the bulk commands (commands/select.py); a job
with nothing to show is one line on stderr, and the command then exits 1."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.commands.select import Selection, status_words
from jobtpu.errors import JobtpuError, UsageError
from jobtpu.home.layout import Home

if TYPE_CHECKING:
    from jobtpu.schema.state import Job

FETCH_AT_ONCE = 4  # jobs fetched side by side: each holds a connection to its machine and an rsync


def add_selectors(p: argparse.ArgumentParser) -> None:
    """The selectors of commands/select.py but the ids (tail and fetch take one id as ever)."""
    p.add_argument("--tag", action="append", default=[], dest="tags", metavar="TAG",
                   help="every job carrying this tag (repeatable: every one), instead of ID")
    p.add_argument("--name", action="append", default=[], dest="names", metavar="GLOB",
                   help="every job whose whole name matches GLOB, instead of ID")
    p.add_argument("--status", action="append", default=[], dest="statuses", type=status_words, metavar="S[,S]",
                   help="every job in one of these statuses, instead of ID")
    p.add_argument("--sweep", action="append", default=[], dest="sweeps", type=args.job_id, metavar="ID",
                   help="every job of sweep ID, instead of ID")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", help="with a selector: this user's jobs (default: yours, or anyone's in a sweep)")
    who.add_argument("--all-users", action="store_true", help="with a selector: every user's jobs")


def selection_of(parsed: argparse.Namespace) -> Selection:
    return Selection(tags=tuple(parsed.tags), names=tuple(parsed.names),
                     statuses=tuple(w for words in parsed.statuses for w in words), sweeps=tuple(parsed.sweeps),
                     user=parsed.user, all_users=parsed.all_users)


def _chosen(home: Home, sel: Selection, command: str) -> list[Job]:
    from jobtpu.commands.select import chosen_jobs

    jobs = chosen_jobs(home, sel)
    if not jobs:
        note(f"jobtpu: no job to {command} matches the selection")
    return jobs


def _failed(job_id: int, error: JobtpuError) -> None:
    """One line for a job with nothing to show: what its error said, without its hint."""
    note(f"jobtpu: job {job_id}: {error.message.removeprefix(f'job {job_id} ')}")


# ---- tail ------------------------------------------------------------------------------------------------

def tail_selected(home: Home, sel: Selection, lines: int, worker: int) -> int:
    """The last `lines` lines of every selected job's log (its latest attempt), each prefixed by
    `ID: `, in id order. Read from the home's logs alone: no job's machine is contacted."""
    failed = False
    for job in _chosen(home, sel, "tail"):
        try:
            shown = last_lines(home, job, lines, worker)
        except JobtpuError as e:
            _failed(job.id, e)
            failed = True
            continue
        _show_prefixed(job.id, shown)
    return 1 if failed else 0


def last_lines(home: Home, job: Job, n: int, worker: int) -> list[str]:
    """The last `n` lines of the job's log (latest attempt, `worker`), read from its end, escaped."""
    from jobtpu.errors import NotFoundError
    from jobtpu.home.logfiles import last_lines as log_end
    from jobtpu.home.logfiles import log_rel
    from jobtpu.render.text import printable

    if not job.attempts:
        raise NotFoundError(f"job {job.id} has not started yet")
    rel = log_rel(job.id, job.attempt, worker)
    if not home.log_file(job.id, job.attempt, worker).exists():
        raise NotFoundError(f"job {job.id} has no log of attempt {job.attempt} worker {worker} yet")
    text, _ = log_end(home.root, rel, n)  # the same read from the end as `tail -n`
    lines = re.split(r"\r\n|\r|\n", text)  # the breaks bytes.splitlines knows: others are shown escaped
    if lines and lines[-1] == "":
        lines.pop()
    return [printable(line) for line in lines]


def _show_prefixed(job_id: int, lines: list[str]) -> None:
    out = "".join(f"{job_id}: {line}\n" for line in lines)
    sys.stdout.buffer.write(out.encode("utf-8", errors="replace"))
    sys.stdout.flush()


# ---- fetch -----------------------------------------------------------------------------------------------

def fetch_selected(home: Home, sel: Selection, path: str, to: str | None) -> int:
    """PATH (or the whole folder) of every selected job into results/<id>/ (or DIR/<id>/ with --to),
    FETCH_AT_ONCE at a time; one line per job, in id order."""
    from concurrent.futures import ThreadPoolExecutor

    from jobtpu.fleet.operations import fetch as fetch_folder
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.places import results_target
    from jobtpu.home.store import Store

    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise JobtpuError(f"PATH {path!r} must be relative to the job's folder, without '..'")
    jobs = _chosen(home, sel, "fetch")
    fleet, state = load_fleet(home), Store(home).load()

    def one(job: Job) -> tuple[Job, Path | JobtpuError]:
        if not job.attempts:
            return job, JobtpuError(f"job {job.id} has not run yet; there is nothing to fetch")
        try:
            target = Path(to).expanduser() / str(job.id) if to else results_target(home, job.id)
            fetch_folder(home, fleet, state, job, path, target)
        except JobtpuError as e:
            return job, e
        return job, target

    with ThreadPoolExecutor(max_workers=FETCH_AT_ONCE) as pool:
        done = list(pool.map(one, jobs))
    failed = False
    for job, outcome in done:
        if isinstance(outcome, JobtpuError):
            _failed(job.id, outcome)
            failed = True
        else:
            note(f"job {job.id}: fetched into {outcome}")
    return 1 if failed else 0


def fetch_words(parsed: argparse.Namespace) -> tuple[int | None, str]:
    """`fetch ID [PATH]`, or with a selector `fetch --sweep 12 [PATH]`: the id (None with a selector)
    and the path."""
    sel = selection_of(parsed)
    if sel.filters:
        if parsed.path:
            raise UsageError("fetch: with a selector, give only PATH", hint="like `jobtpu fetch --sweep 12 result.json`")
        return None, parsed.id or ""
    if parsed.id is None:
        raise UsageError("fetch: name the job, by id or by a selector",
                         hint="like `jobtpu fetch 12 result.json`, or `jobtpu fetch --sweep 12 result.json`")
    try:
        return args.job_id(parsed.id), parsed.path
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"fetch: {e}", hint="like `jobtpu fetch 12 result.json`") from None


def tail_id(parsed: argparse.Namespace) -> int | None:
    """`tail ID`, or with a selector none (and neither -f nor --attempt, which are one job's)."""
    sel = selection_of(parsed)
    if not sel.filters:
        if parsed.id is None:
            raise UsageError("tail: name the job, by id or by a selector",
                             hint="like `jobtpu tail 12`, or `jobtpu tail --sweep 12 -n 1`")
        return int(parsed.id)
    if parsed.id is not None:
        raise UsageError("tail: give an id or a selector, not both", hint="like `jobtpu tail --sweep 12 -n 1`")
    if parsed.follow or parsed.attempt is not None:
        raise UsageError("tail: -f and --attempt follow one job; with a selector, tail shows each job's last lines",
                         hint="like `jobtpu tail --sweep 12 -n 5`, or `jobtpu tail -f ID`")
    return None

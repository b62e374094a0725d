"""`jobtpu tail`: a job's log, its last lines read from the end; with -f, pulled and streamed until
the attempt ends. Its log printing (escaped, decoded across reads) is `run --follow`'s too.

A listing: it imports at the top only what it uses (`jobtpu tail` runs from scripts)."""

from __future__ import annotations

import argparse
import codecs
import sys
import time
from pathlib import PurePath
from typing import TYPE_CHECKING

from jobtpu import timing
from jobtpu.commands import across, args
from jobtpu.commands.common import note
from jobtpu.errors import NotFoundError
from jobtpu.home.layout import Home
from jobtpu.home.logfiles import log_rel
from jobtpu.home.store import Store

if TYPE_CHECKING:
    from jobtpu.decide.workers import WorkerRef, WorkerState


def tail(home: Home, job_id: int, lines: int, follow_log: bool, worker: int, asked: int | None) -> int:
    """Print the last lines of a job's log; following, stream it until the attempt ends (its exit code)."""
    attempt, rel, gone = log_of(home, job_id, worker, asked, follow_log)
    offset = _print_last_lines(home, rel, lines)
    if gone is not None and not follow_log:
        note(f"jobtpu: job {job_id} attempt {attempt} {gone}: above is what the home kept ({offset} bytes); "
             "what it printed after that went with its VM")
    decoder = new_decoder()
    said: str | None = None  # the machine's trouble, said once while it lasts
    from jobtpu.home.roles import role_of

    member = role_of(home.root).is_member  # a shared home's logs are its runner's to pull (its passes do)
    while follow_log:
        from jobtpu.fleet.operations import pull_logs

        if member:
            no_probe: dict[WorkerRef, WorkerState] = {}
            current, workers, trouble = Store(home).load().job(job_id), no_probe, None
        else:
            current, workers, trouble = pull_logs(home, job_id)  # the job as it stood before this pull
        offset = print_from(home, rel, offset, decoder)
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


def log_of(home: Home, job_id: int, worker: int, asked: int | None, follow_log: bool = False
           ) -> tuple[int, PurePath, str | None]:
    """Which log `tail` reads: the attempt (the latest unless `asked`), the log's path in the home,
    and, for an attempt whose VM went, the words saying so. Not following, a log not there is an error."""
    from jobtpu.schema.state_file import records
    from jobtpu.views.listing import find_job

    found = find_job(home, Store(home).load().jobs, job_id)  # a cleaned job's logs stay in logs/
    job = records([found])[0]
    tried = [a["n"] for a in job["attempts"]]
    attempt = job["attempt"] if asked is None else asked
    if asked is not None and attempt not in tried:
        raise NotFoundError(f"job {job_id} has no attempt {attempt}",
                            hint=f"its attempts: {', '.join(map(str, tried)) or 'none yet'}")
    path, rel = home.log_file(job_id, attempt, worker), log_rel(job_id, attempt, worker)
    gone = vm_gone(job, attempt)
    if not path.exists() and not follow_log:
        if job["status"] == "queued" or not tried:
            raise NotFoundError(f"job {job_id} has not started yet", hint="run `jobtpu manage`")
        if gone is not None:
            raise NotFoundError(f"job {job_id} attempt {attempt} {gone}; the home kept no log of worker {worker}: "
                                "its VM went before a pass or a loop brought any home",
                                hint="`jobtpu manage --loop` brings running jobs' logs home every few seconds")
        raise NotFoundError(f"no log of job {job_id} attempt {attempt} worker {worker} yet",
                            hint="logs are pulled by `jobtpu manage`")
    return attempt, rel, gone


def vm_gone(job: dict[str, object], attempt: int) -> str | None:
    """Pure: for an attempt whose machine went away under it (preempted, lost), the words saying where
    it ran and when it went; None for any other attempt."""
    import time

    for each in job.get("attempts") or []:  # type: ignore[attr-defined]
        if each.get("n") == attempt and each.get("outcome") in ("preempted", "lost") and each.get("ended"):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(each["ended"])))
            return f"ran on {each.get('machine')} until it was {each['outcome']} at {when}"
    return None


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


def new_decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def _show(text: str) -> None:
    """Log text as the characters it holds: a job's escape sequences never steer the terminal."""
    from jobtpu.render.text import printable_lines

    sys.stdout.buffer.write(printable_lines(text).encode("utf-8", errors="replace"))
    sys.stdout.flush()


def _print_last_lines(home: Home, rel: PurePath, n: int) -> int:
    """Print the log's last `n` lines; the offset the log ended at."""
    text, end = last_lines(home, rel, n)
    if n > 0:
        _show(text)
    return end


def last_lines(home: Home, rel: PurePath, n: int) -> tuple[str, int]:
    """The log's last `n` lines as they are, and the offset it ended at (home/logfiles.last_lines)."""
    from jobtpu.home.logfiles import last_lines as read_last

    return read_last(home.root, rel, n)


def print_from(home: Home, rel: PurePath, offset: int, decoder: codecs.IncrementalDecoder) -> int:
    """Print what the log holds past `offset`, escaped; the new offset."""
    from jobtpu.home.logfiles import read_from

    while True:
        data = read_from(home.root, rel, offset)
        if not data:
            return offset
        offset += len(data)
        _show(decoder.decode(data))



def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "tail")
    p.add_argument("id", type=int, nargs="?", help="the job (or select several: --sweep, --tag, … below)")
    p.add_argument("-n", type=args.count, default=50, dest="lines", help="how many last lines (default 50)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing as the log grows; exit with the attempt's exit code")
    p.add_argument("--worker", type=args.count, default=0, help="this worker's log (default 0)")
    p.add_argument("--slice", type=args.count, help="a gang's slice (submit --slices): --worker is its worker")
    p.add_argument("--attempt", type=args.count, help="this attempt's log (default: the latest)")
    across.add_selectors(p)
    p.set_defaults(func=_tail_command)


def _tail_command(home: Home, a: argparse.Namespace) -> int:
    """One job's log, or with a selector every selected job's last lines (commands/across.py)."""
    job_id = across.tail_id(a)
    if job_id is None:
        return across.tail_selected(home, across.selection_of(a), a.lines, a.worker)
    worker = a.worker if a.slice is None else gang_worker(home, job_id, a.slice, a.worker, a.attempt)
    return tail(home, job_id, a.lines, a.follow, worker, a.attempt)


def gang_worker(home: Home, job_id: int, slice_id: int, worker: int, asked: int | None) -> int:
    """--slice K --worker W: the gang's worker K * (workers per slice) + W, as its logs are named."""
    from jobtpu.errors import UsageError
    from jobtpu.schema.state_file import records
    from jobtpu.views.listing import find_job

    job = records([find_job(home, Store(home).load().jobs, job_id)])[0]
    number = job["attempt"] if asked is None else asked
    attempt = next((a for a in job["attempts"] if a["n"] == number), None)
    slices = int(job.get("slices", 1))
    if attempt is None:
        raise NotFoundError(f"job {job_id} has no attempt {number}", hint="`jobtpu status ID` lists its attempts")
    per = int(attempt.get("workers", 1)) // max(1, len(attempt.get("gang") or [None]))
    if slice_id >= slices or worker >= per:
        raise UsageError(f"job {job_id} has {slices} slice{'s' if slices > 1 else ''} of {per} worker"
                         f"{'s' if per > 1 else ''}; --slice {slice_id} --worker {worker} is none of them",
                         hint=f"give --slice 0 … {slices - 1} and --worker 0 … {per - 1}")
    return slice_id * per + worker

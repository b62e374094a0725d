"""jobtpu from Python (docs/reference/python.md): a home, its jobs and its passes through the command
line's own functions, not a second path, so the checks, the ownership rules and the files written
are the same. A user's mistake raises a JobtpuError (jobtpu/errors.py) carrying the line and hint
the command line prints; nothing is printed, and the lines a command would have printed are kept
in `Home.said`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jobtpu.commands import values
from jobtpu.commands.values import checked as _checked
from jobtpu.commands.values import words as _words
from jobtpu.errors import JobFailed, JobtpuError, UsageError
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job as _StoredJob

if TYPE_CHECKING:
    from jobtpu.commands.select import Selection
    from jobtpu.home.layout import Home as _Home
    from jobtpu.schema.published import MachineRow

_T = TypeVar("_T")


class JobRecord(_StoredJob, frozen=True):  # type: ignore[misc]  # msgspec makes a frozen copy of the type; mypy takes it for a dataclass
    """A job's record, read-only: the fields `status --json` prints (docs/reference/state-json.md §4).
    A copy: it changes nothing in the home, and `Job.refresh()` reads a new one."""


class Home:
    """A jobtpu home, found as the command line finds it (`path`, else $JOBTPU_HOME, else the nearest
    folder above the working folder holding a machines.json this account may adopt, else ~/.jobtpu)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        from jobtpu import timing
        from jobtpu.commands.front import open_home

        timing.current()  # a bad $JOBTPU_TIMING is said before anything is done, as the CLI does
        self._home: _Home = open_home(os.fspath(path) if path is not None else None)
        self.said: list[str] = []  # what the last call's command would have printed, line by line

    @property
    def path(self) -> Path:
        return self._home.root

    def __repr__(self) -> str:
        return f"jobtpu.Home({str(self.path)!r})"

    def __enter__(self) -> Home:
        return self

    def __exit__(self, *exc: object) -> None:
        """`with jobtpu.Home() as home:`: a Home holds no open file or connection between calls
        (each call opens what it needs and closes it), so leaving the block has nothing left to close."""

    # ---- submit ---------------------------------------------------------------------------------

    def submit(self, cmd: str | None = None, dir: str | os.PathLike[str] | int | None = None,
               req: Iterable[str] = (), overrides: Mapping[str, object] = {},
               sweep: Mapping[str, Iterable[object]] | Sequence[Mapping[str, object]] = {}, env: Mapping[str, str] = {}, *,
               machine: str | None = None, name: str = "", tags: Iterable[str] = (), rule: str | None = None,
               max_recoveries: int = 20, timeout: str | None = None, stall: str | None = None,
               priority: int = 0, priority_class: str | None = None, hold: bool = False, after: Iterable[int | Job] = (),
               after_any: Iterable[int | Job] = (), retries: int = 0, retry_on_exit: str | None = None,
               max_preemptions: int = 0, grace: str | None = None,
               signal: str | None = None, progress: str | None = None, on_resume: str | None = None,
               saved_when: str | None = None, saved_marker: str | None = None, checkpoints: str | None = None,
               include: Iterable[str] = (), exclude: Iterable[str] = (), user: str | None = None,
               allow_secrets: bool = False, log_stage: bool = False, sheet_note: str | None = None,
               sweep_file: str | os.PathLike[str] | None = None, slices: int = 1) -> list[Job]:
        """`jobtpu submit`: snapshot the folder and queue the job, or one job per combination of
        `sweep`'s values (a dict of KEY → values), or one per dict of `sweep` (a list: a job array);
        the new jobs, in id order."""
        from jobtpu.commands import args
        from jobtpu.commands.submit import RULE_NAMES, SubmitOptions, submit_jobs
        from jobtpu.sweeps import from_python

        if rule is not None and rule not in RULE_NAMES:
            raise UsageError(f"argument --rule: invalid choice: {rule!r} (choose from {', '.join(RULE_NAMES)})",
                             hint="`jobtpu rules` shows each rule")
        opts = SubmitOptions(
            cmd=cmd, dir=None if dir is None else str(dir) if isinstance(dir, int) else os.fspath(dir),
            req=_words(req, "req"), machine=machine, name=name, tag=_words(tags, "tags"),
            env=[f"{k}={v}" for k, v in env.items()], rule=rule,
            max_recoveries=_checked(args.tries, max_recoveries, "--max-recoveries"),
            timeout=timeout, stall=stall, include=_words(include, "include"), exclude=_words(exclude, "exclude"),
            allow_secrets=allow_secrets, user=user, log_stage=log_stage, on_resume=on_resume,
            overrides=[f"{k}={v}" for k, v in overrides.items()], progress=progress,
            saved_when=saved_when, saved_marker=saved_marker, checkpoints=checkpoints,
            priority=_checked(args.priority, priority, "--priority"), priority_class=priority_class,
            sheet_note=sheet_note,
            sweep_file=None if sweep_file is None else os.fspath(sweep_file),
            after=[",".join(_ids(after))] if after else [], after_any=[",".join(_ids(after_any))] if after_any else [],
            retries=_checked(args.tries, retries, "--retries"), retry_on_exit=retry_on_exit,
            max_preemptions=_checked(args.tries, max_preemptions, "--max-preemptions"),
            grace=grace, signal=signal, hold=hold,
            slices=_checked(args.tries, slices, "--slices"))
        rows = from_python(sweep)  # values stay values: never joined into --sweep's words and split again
        jobs = self._run("submit", ["submit"], lambda: submit_jobs(self._home, opts, rows))
        return [Job(self, j.id, _record(j)) for j in jobs or []]

    # ---- reading --------------------------------------------------------------------------------

    def jobs(self, ids: Iterable[int | Job] = (), *, tags: Iterable[str] = (), names: Iterable[str] = (),
             statuses: Iterable[str] = (), sweeps: Iterable[int | Job] = (), user: str | None = None,
             all_users: bool = False, history: bool = False) -> list[Job]:
        """The jobs `status` selects with the same selectors (docs/reference/commands.md §2.7): by
        default yours in state.json; jobs named by id or sweep whoever submitted them."""
        from jobtpu.commands.select import chosen_jobs

        sel = _selection(ids, tags, names, statuses, sweeps, user, all_users, history)
        return [Job(self, j.id, _record(j)) for j in chosen_jobs(self._home, sel)]

    def job(self, job_id: int) -> Job:
        """One job by id (a cleaned one too, from history.jsonl), whoever submitted it."""
        found = self.jobs([job_id])
        return found[0]

    def machines(self) -> list[MachineRow]:
        """The fleet as `machines --json` lists it (as the last pass saw it: no SSH, no API call)."""
        from jobtpu.commands.machines import machine_rows
        from jobtpu.schema.published import MachineRow

        return msgspec.convert(machine_rows(self._home), list[MachineRow])

    # ---- acting ---------------------------------------------------------------------------------

    def manage(self, dry_run: bool = False) -> list[str]:
        """`jobtpu manage`: one pass over the fleet; the lines it would have printed."""
        from jobtpu.commands.manage import manage

        words = ["manage", *(["--dry-run"] if dry_run else [])]
        self._run("manage", words, lambda: manage(self._home, None, dry_run))
        return list(self.said)

    def kill(self, jobs: Iterable[int | Job], force: bool = False) -> None:
        """`jobtpu kill ID...`: stop the jobs on every worker and mark them killed."""
        from jobtpu.commands.kill import kill

        ids = _ids(jobs)
        words = ["kill", *ids, *(["--force"] if force else [])]
        self._run("kill", words, lambda: kill(self._home, _selection(ids), force))

    def requeue(self, jobs: Iterable[int | Job], resume: bool, machine: str | None = None,
                force: bool = False) -> None:
        """`jobtpu resume ID...` (from their checkpoints) or `jobtpu rerun ID...` (from the start)."""
        from jobtpu.commands.requeue import requeue

        ids = _ids(jobs)
        words = ["resume" if resume else "rerun", *ids, *(["--machine", machine] if machine else []),
                 *(["--force"] if force else [])]
        self._run(words[0], words, lambda: requeue(self._home, _selection(ids), machine, resume, force))

    def wait(self, jobs: Iterable[Job], timeout: float | None = None, manage: bool = True) -> list[Job]:
        """Until every job ended (with `manage`, a pass each round, as `Job.wait`); the jobs, refreshed."""
        return wait(jobs, timeout, manage)

    def _run(self, command: str, words: list[str], act: Callable[[], _T]) -> _T | None:
        """Run a command's function as the command line would for this account: a member of a shared
        home sends an act as a request instead (None), and is refused the runner's commands."""
        from jobtpu.commands.common import kept_lines
        from jobtpu.commands.front import as_member

        with kept_lines() as lines:
            try:
                if as_member(self._home, command, words) is not None:
                    return None
                return act()
            finally:
                self.said = lines


class Job:
    """A handle on one job of a home: its id and its record as last read (`refresh()` reads it again)."""

    __slots__ = ("home", "id", "record")

    def __init__(self, home: Home, job_id: int, record: JobRecord) -> None:
        self.home = home
        self.id = job_id
        self.record = record

    def __repr__(self) -> str:
        return f"<jobtpu.Job {self.id} {self.record.status}>"

    def __eq__(self, other: object) -> bool:
        """The same job: the same id in the same home, whatever each handle last read."""
        if not isinstance(other, Job):
            return NotImplemented
        return (self.id, self.home.path) == (other.id, other.home.path)

    def __hash__(self) -> int:
        return hash((self.id, self.home.path))

    @property
    def status(self) -> str:
        return str(self.record.status)

    @property
    def ended(self) -> bool:
        return self.status in ("finished", "failed", "killed")

    def refresh(self) -> Job:
        """Read the job's record again (state.json, or history.jsonl once cleaned)."""
        self.record = self.home.job(self.id).record
        return self

    def wait(self, timeout: float | None = None, manage: bool = True) -> Job:
        """Until the job ends: with `manage`, a pass each round (as `run --follow`; a member of a shared
        home waits for the runner's passes). TimeoutError after `timeout` seconds."""
        wait([self], timeout, manage)
        return self

    def result(self, timeout: float | None = None, manage: bool = True) -> Any:
        """The value the job saved (jobtpu.save_result; None when it saved none), once it finished and
        its log came home; JobFailed when it failed or was killed. Waits as `wait` does."""
        value, error = outcome(self, timeout, manage)
        if error is not None:
            raise error
        return value

    def exception(self, timeout: float | None = None, manage: bool = True) -> JobtpuError | None:
        """The error `result()` raises (JobFailed for a failed or killed job), or None. Waits as `wait` does."""
        return outcome(self, timeout, manage)[1]

    def tail(self, n: int = 50, attempt: int | None = None, worker: int = 0) -> str:
        """The last `n` lines of an attempt's log (the latest attempt unless given), as the home has them."""
        from jobtpu.commands import args
        from jobtpu.commands.tail import last_lines, log_of

        n = _checked(args.count, n, "-n")
        attempt_n, rel, _ = log_of(self.home._home, self.id, worker, attempt)
        return last_lines(self.home._home, rel, n)[0]

    def fetch(self, path: str = "", to: str | os.PathLike[str] | None = None) -> Path:
        """`jobtpu fetch`: the job's remote folder (or `path` in it) into results/ID/ or `to`; where it went."""
        from jobtpu.commands.fetch import fetch_into

        return fetch_into(self.home._home, self.id, path, None if to is None else os.fspath(to))

    def kill(self, force: bool = False) -> Job:
        self.home.kill([self.id], force)
        return self.refresh()

    def rerun(self, machine: str | None = None, force: bool = False) -> Job:
        self.home.requeue([self.id], resume=False, machine=machine, force=force)
        return self.refresh()

    def resume(self, machine: str | None = None, force: bool = False) -> Job:
        self.home.requeue([self.id], resume=True, machine=machine, force=force)
        return self.refresh()


# ---- what Python values become as the command line's words ---------------------------------------

def _record(job: _StoredJob) -> JobRecord:
    return msgspec.convert(msgspec.to_builtins(job), JobRecord)


def _job_id(job: object) -> object:
    return job.id if isinstance(job, Job) else job


def _ids(jobs: Iterable[int | Job]) -> list[str]:
    return values.ids(jobs, _job_id)


def _selection(ids: Iterable[int | Job | str] = (), tags: Iterable[str] = (), names: Iterable[str] = (),
               statuses: Iterable[str] = (), sweeps: Iterable[int | Job] = (), user: str | None = None,
               all_users: bool = False, history: bool = False) -> Selection:
    return values.selection(ids, tags, names, statuses, sweeps, user, all_users, history, id_of=_job_id)


# ---- waiting: jobs move only when a pass runs ------------------------------------------------------
# Each round runs one pass in each home (with `manage`, as `run --follow` does; never as a member of a
# shared home, whose passes are the runner's), reads each home's jobs once, and sleeps the timing
# object's `follow_poll` (docs/reference/python.md §11.5).

def as_completed(jobs: Iterable[Job], timeout: float | None = None, manage: bool = True) -> Iterator[Job]:
    """Each of `jobs` as it ends (those ended already first), refreshed; TimeoutError once `timeout`
    seconds pass with some still running, as concurrent.futures.as_completed raises it."""
    return _rounds(list(jobs), timeout, manage, lambda job: job.ended)


def wait(jobs: Iterable[Job], timeout: float | None = None, manage: bool = True) -> list[Job]:
    """Until every job ended; the jobs, refreshed, in the order given."""
    given = list(jobs)
    for _ in _rounds(given, timeout, manage, lambda job: job.ended):
        pass
    return given


def outcome(job: Job, timeout: float | None, manage: bool) -> tuple[object, JobtpuError | None]:
    """A job's saved value (None when it saved none), or the error its result() raises, once it ended
    and, when it finished, once its last attempt's log (and so its result) is home."""
    for _ in _rounds([job], timeout, manage, _settled):
        pass
    record = job.record
    if record.status != "finished":
        return None, JobFailed(job.id, str(record.status), record.reason, record.exit_code)
    if not record.attempts:
        return None, None
    from jobtpu.home.logfiles import read_result

    kept = read_result(job.home.path, job.id, record.attempts[-1].n)
    if kept is None:
        return None, None
    if "refused" in kept:
        return None, JobtpuError(f"job {job.id} finished, but {kept['refused']}",
                                 hint="jobtpu.save_result writes JSON of at most 1 MiB; bring a bigger result "
                                      "home as a file, with `jobtpu fetch`")
    return kept.get("value"), None


def _settled(job: Job) -> bool:
    """Ended, and a finished job's last log (with its result) home: a pass short of time pulls the rest later."""
    attempts = job.record.attempts
    return job.ended and not (job.status == "finished" and attempts and attempts[-1].logs_behind)


def _rounds(jobs: list[Job], timeout: float | None, manage: bool, done: Callable[[Job], bool]) -> Iterator[Job]:
    from jobtpu import timing
    from jobtpu.home.roles import role_of

    deadline = None if timeout is None else time.monotonic() + timeout
    homes = {job.home.path: job.home for job in jobs}
    passes = [home for home in homes.values() if manage and not role_of(home.path).is_member]
    pending = list({id(job): job for job in jobs}.values())  # each handle once, each refreshed
    ran = False
    while True:
        _refresh(pending)
        for job in [j for j in pending if done(j)]:
            pending.remove(job)
            yield job
        if not pending:
            return
        if deadline is not None and time.monotonic() >= deadline:
            left = pending[0]
            more = f" (and {len(pending) - 1} more)" if len(pending) > 1 else ""
            raise TimeoutError(f"job {left.id}{more} is still {left.status} after {timeout} s")
        if passes and not ran:  # a pass, then what it did is read at once: no sleep between
            for home in passes:
                home.manage()
            ran = True
            continue
        ran = False
        time.sleep(timing.current().follow_poll)


def _refresh(jobs: list[Job]) -> None:
    """Each job's record read again: one read of each home for all its jobs."""
    by_home: dict[Home, list[Job]] = {}
    for job in jobs:
        by_home.setdefault(job.home, []).append(job)
    for home, mine in by_home.items():
        fresh = {j.id: j.record for j in home.jobs([j.id for j in mine])}
        for job in mine:
            if job.id in fresh:
                job.record = fresh[job.id]

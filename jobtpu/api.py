"""jobtpu from Python (docs/reference/python.md): a home, its jobs and its passes through the command
line's own functions, not a second path, so the checks, the ownership rules and the files written
are the same. A user's mistake raises a JobtpuError (jobtpu/errors.py) carrying the line and hint
the command line prints; nothing is printed, and the lines a command would have printed are kept
in `Home.said`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from jobtpu.commands import values
from jobtpu.commands.values import checked as _checked
from jobtpu.commands.values import words as _words
from jobtpu.errors import UsageError
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

    # ---- submit ---------------------------------------------------------------------------------

    def submit(self, cmd: str | None = None, dir: str | os.PathLike[str] | int | None = None,
               req: Iterable[str] = (), overrides: Mapping[str, object] = {},
               sweep: Mapping[str, Iterable[object]] = {}, env: Mapping[str, str] = {}, *,
               machine: str | None = None, name: str = "", tags: Iterable[str] = (), rule: str | None = None,
               max_recoveries: int = 20, timeout: str | None = None, stall: str | None = None,
               priority: int = 0, hold: bool = False, after: Iterable[int | Job] = (),
               after_any: Iterable[int | Job] = (), retries: int = 0, retry_on_exit: str | None = None,
               max_preemptions: int = 0, grace: str | None = None,
               signal: str | None = None, progress: str | None = None, on_resume: str | None = None,
               saved_when: str | None = None, saved_marker: str | None = None, checkpoints: str | None = None,
               include: Iterable[str] = (), exclude: Iterable[str] = (), user: str | None = None,
               allow_secrets: bool = False, log_stage: bool = False, sheet_note: str | None = None,
               sweep_file: str | os.PathLike[str] | None = None) -> list[Job]:
        """`jobtpu submit`: snapshot the folder and queue the job, or one job per combination of
        `sweep`'s values; the new jobs, in id order."""
        from jobtpu.commands import args
        from jobtpu.commands.submit import RULE_NAMES, SubmitOptions, submit_jobs

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
            priority=_checked(args.priority, priority, "--priority"), sheet_note=sheet_note,
            sweep=[f"{k}={','.join(map(str, _words(values, 'sweep values')))}" for k, values in sweep.items()],
            sweep_file=None if sweep_file is None else os.fspath(sweep_file),
            after=[",".join(_ids(after))] if after else [], after_any=[",".join(_ids(after_any))] if after_any else [],
            retries=_checked(args.tries, retries, "--retries"), retry_on_exit=retry_on_exit,
            max_preemptions=_checked(args.tries, max_preemptions, "--max-preemptions"),
            grace=grace, signal=signal, hold=hold)
        jobs = self._run("submit", ["submit"], lambda: submit_jobs(self._home, opts))
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
        from jobtpu import timing
        from jobtpu.home.roles import role_of

        deadline = None if timeout is None else time.monotonic() + timeout
        passes = manage and not role_of(self.home.path).is_member
        while not self.refresh().ended:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {self.status} after {timeout} s")
            if passes:
                self.home.manage()
                if self.refresh().ended:
                    break
            time.sleep(timing.current().follow_poll)
        return self

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

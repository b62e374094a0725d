"""Which jobs a bulk command acts on: ids and selectors (`--tag`, `--name`, `--status`, `--user`,
`--sweep`), for kill, resume, rerun, clean, hold and release. One selection for all of them, so a
selector means the same everywhere; each command then keeps the jobs it can act on."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from ..errors import EXIT_USAGE, JobtpuError
from ..users import known_user

if TYPE_CHECKING:
    from ..home import Home
    from ..model import Job


class UsageError(JobtpuError):
    exit_code = EXIT_USAGE


class Selector(NamedTuple):
    """What the user typed to name jobs: ids, and filters every selected job must pass."""

    ids: list[int] = []
    tags: list[str] = []
    names: list[str] = []  # globs (fnmatch), matched against the job's name
    statuses: list[str] = []
    user: str | None = None
    all_users: bool = False
    sweeps: list[int] = []
    dry_run: bool = False

    @property
    def filters(self) -> bool:
        """Whether any selector (not only ids) was given."""
        return bool(self.tags or self.names or self.statuses or self.user or self.all_users or self.sweeps)

    @property
    def given(self) -> bool:
        return bool(self.ids) or self.filters


def select(home: Home, jobs: Iterable[Job], sel: Selector, act: str) -> list[Job]:
    """The jobs named by ids (every id must be in state.json) and passing every filter given, in id
    order. Without ids the filters choose among your jobs (`--user U`: U's, `--all-users`:
    everyone's); ids are taken whoever submitted them unless `--user` is given too. `act` names the
    command in the error for an id `clean` moved to history."""
    jobs = list(jobs)
    if sel.ids:
        by_id = {j.id: j for j in jobs}
        missing = [i for i in sel.ids if i not in by_id]
        if missing:
            from ..listing import require_current

            require_current(home, jobs, missing[0], act)  # raises: says where the job went
        chosen = [by_id[i] for i in sorted(set(sel.ids))]
        who = None if sel.all_users or sel.user is None else known_user(home, sel.user)
    else:
        chosen = sorted(jobs, key=lambda j: j.id)
        who = None if sel.all_users else known_user(home, sel.user)
    tests: list[Callable[[Job], bool]] = []
    if who is not None:
        tests.append(lambda j: j.user == who)
    if sel.tags:
        tests.append(lambda j: all(t in j.tags for t in sel.tags))  # narrows, as status --tag does
    if sel.names:
        tests.append(lambda j: any(fnmatch.fnmatchcase(j.name, glob) for glob in sel.names))
    if sel.statuses:
        tests.append(lambda j: j.status in sel.statuses)
    if sel.sweeps:
        tests.append(lambda j: j.sweep in sel.sweeps)
    return [j for j in chosen if all(test(j) for test in tests)]


def require_some(sel: Selector, command: str) -> None:
    """Commands that change jobs act on nothing unless told which: never on every job by default."""
    if not sel.given:
        raise UsageError(f"{command}: name the jobs, by id or by a selector",
                         hint=f"like `jobtpu {command} 12 13`, or `jobtpu {command} --sweep 12` "
                              "(--tag, --name, --status, --user, --all-users, --sweep)")


def describe(job: Job) -> str:
    """One line about a job for a bulk command's listing: id, status, name and overrides."""
    parts = [str(job.status)]
    if job.name:
        parts.append(job.name)
    if job.sweep is not None:
        parts.append(f"sweep {job.sweep} #{job.sweep_index}")
    if job.overrides:
        parts.append(" ".join(job.overrides))
    return f"job {job.id} ({', '.join(parts)})"


def announce(verb: str, jobs: list[Job], sel: Selector, by_id: bool = True) -> None:
    """What a bulk command acts on, one line per job on stdout, before it acts (with --dry-run,
    instead), so every act says what it changed. Jobs named only by id are said too unless `by_id`
    is false (resume and rerun print their ids instead)."""
    from ..text import printable

    if not (sel.filters or sel.dry_run or (by_id and jobs)):
        return
    if not jobs:
        from .common import note

        note(f"jobtpu: no job to {verb} matches the selection")
        return
    prefix = f"would {verb}" if sel.dry_run else verb
    for job in jobs:
        print(printable(f"{prefix} {describe(job)}"))

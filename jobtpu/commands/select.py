"""Which jobs a command names: one selection (ids, `--tag`, `--name`, `--status`, `--sweep`,
`--user`, `--all-users`, and for `status` `--history`) for status, report, kill, resume, rerun,
clean, hold and release, picked by one pure function, so the same selectors pick the same jobs
everywhere (docs/reference/commands.md §2.7); each command then keeps the jobs it can act on."""

import argparse
import fnmatch
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from jobtpu.commands import args
from jobtpu.errors import NotFoundError, UsageError
from jobtpu.home.users import known_user

if TYPE_CHECKING:
    from jobtpu.home.layout import Home
    from jobtpu.schema.state import Job, State


class Selection(NamedTuple):
    """What the user typed to name jobs: ids, and selectors every chosen job must pass. Immutable;
    a NamedTuple, not a dataclass: `--help` loads no dataclasses (tests/test_imports.py)."""

    ids: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()  # all of them
    names: tuple[str, ...] = ()  # globs (fnmatch) over the whole name, any of them
    statuses: tuple[str, ...] = ()  # any of them
    sweeps: tuple[int, ...] = ()  # any of them
    user: str | None = None
    all_users: bool = False
    history: bool = False  # status only: history.jsonl's jobs instead of state.json's

    @property
    def filters(self) -> bool:
        """Whether any selector (not only ids) was given."""
        return bool(self.tags or self.names or self.statuses or self.user or self.all_users or self.sweeps)

    @property
    def given(self) -> bool:
        return bool(self.ids) or self.filters

    @property
    def anyones(self) -> bool:
        """Whether the jobs are taken whoever submitted them: with --all-users, and for jobs named by
        id or sweep id (a name points at jobs, whoever they belong to) unless --user narrows them."""
        return self.all_users or (self.user is None and bool(self.ids or self.sweeps))


def select(jobs: "Iterable[Job]", selection: Selection, current_user: str) -> "list[Job]":
    """The jobs passing every selector given, in the order of `jobs`. Jobs are `current_user`'s
    unless --user names another or the selection takes anyone's (Selection.anyones)."""
    tests: list[Callable[[Job], bool]] = []
    if selection.ids:
        tests.append(lambda j: j.id in selection.ids)
    if not selection.anyones:
        owner = selection.user or current_user
        tests.append(lambda j: j.user == owner)
    if selection.tags:
        tests.append(lambda j: all(t in j.tags for t in selection.tags))
    if selection.names:
        tests.append(lambda j: any(fnmatch.fnmatchcase(j.name, glob) for glob in selection.names))
    if selection.statuses:
        tests.append(lambda j: j.status in selection.statuses)
    if selection.sweeps:
        tests.append(lambda j: j.sweep in selection.sweeps)
    return [j for j in jobs if all(test(j) for test in tests)]


def chooser(home: "Home", selection: Selection) -> str:
    """The user whose jobs the selection picks (--user, else you), checked against the home's users
    only when it matters: "" when it takes anyone's."""
    return "" if selection.anyones else known_user(home, selection.user)


def select_current(home: "Home", jobs: "Iterable[Job]", sel: Selection, act: str) -> "list[Job]":
    """For a command that changes jobs (`act`): the selected jobs of state.json, in id order. Every
    id must be there, or the error says where the job went (history.jsonl, or nowhere)."""
    jobs = sorted(jobs, key=lambda j: j.id)
    known = {j.id for j in jobs}
    missing = [i for i in sel.ids if i not in known]
    if missing:
        from jobtpu.views.listing import require_current

        require_current(home, jobs, missing[0], act)  # raises: says where the job went
    return select(jobs, sel, chooser(home, sel))


def require_some(sel: Selection, command: str) -> None:
    """Commands that change jobs act on nothing unless told which: never on every job by default."""
    if not sel.given:
        raise UsageError(f"{command}: name the jobs, by id or by a selector",
                         hint=f"like `jobtpu {command} 12 13`, or `jobtpu {command} --sweep 12` "
                              "(--tag, --name, --status, --user, --all-users, --sweep)")


def describe(job: "Job") -> str:
    """One line about a job for a bulk command's listing: id, status, name and overrides."""
    parts = [str(job.status)]
    if job.name:
        parts.append(job.name)
    if job.sweep is not None:
        parts.append(f"sweep {job.sweep} #{job.sweep_index}")
    if job.overrides:
        parts.append(" ".join(job.overrides))
    return f"job {job.id} ({', '.join(parts)})"


def announce(verb: str, jobs: "list[Job]", sel: Selection, dry_run: bool, by_id: bool = True) -> None:
    """What a bulk command acts on, one line per job on stdout, before it acts (with --dry-run,
    instead), so every act says what it changed. Jobs named only by id are said too unless `by_id`
    is false (resume and rerun print their ids instead)."""
    from jobtpu.render.text import printable

    if not (sel.filters or dry_run or (by_id and jobs)):
        return
    from jobtpu.commands.common import note, say

    if not jobs:
        note(f"jobtpu: no job to {verb} matches the selection")
        return
    prefix = f"would {verb}" if dry_run else verb
    for job in jobs:
        say(printable(f"{prefix} {describe(job)}"))


def chosen_jobs(home: "Home", chosen: Selection, state: "State | None" = None) -> "list[Job]":
    """The jobs `status` lists (select.select over state.json's jobs, or with --history over
    history.jsonl's, newest first). An id missing from state.json is looked for in history.jsonl,
    where `clean` moved it; an id or sweep found nowhere is an error. `state`: state.json, already read."""
    from jobtpu.home.store import Store
    from jobtpu.views.listing import find_jobs, history

    pool = history(home) if chosen.history else (state or Store(home).load()).jobs
    where = "history.jsonl" if chosen.history else "state.json"
    missing = sorted(set(chosen.ids) - {j.id for j in pool})
    if missing and chosen.history:
        raise NotFoundError(f"no job {missing[0]} in history.jsonl",
                            hint="`jobtpu status --history --all-users --all` lists every job `clean` moved there")
    if missing:  # cleaned jobs named by id, in id order with the rest
        pool = sorted([*pool, *find_jobs(home, pool, missing)], key=lambda j: j.id)
    for sweep in chosen.sweeps:
        if not any(j.sweep == sweep for j in pool):
            raise NotFoundError(f"no sweep {sweep} in {where}",
                                hint="a sweep's id is its first job's id, as `submit --sweep` printed it")
    return select(pool, chosen, chooser(home, chosen))


# ---- the selection's arguments ----------------------------------------------------------------------

# The status words as `status --status` accepts them; the same as model.Status (a test holds them equal).
STATUS_NAMES = ("queued", "launching", "running", "killing", "finished", "failed", "killed")


def status_words(text: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    wrong = [w for w in words if w not in STATUS_NAMES]
    if wrong or not words:
        from jobtpu.suggest import nearest

        close = nearest((wrong or [text])[0], STATUS_NAMES)
        meant = f"did you mean {close!r}? " if close else ""
        raise argparse.ArgumentTypeError(f"{(wrong or [text])[0]!r} is not a status: {meant}use {', '.join(STATUS_NAMES)}")
    return words


def add_selection_args(p: argparse.ArgumentParser, ids_help: str, history: bool = False,
                       dry_run: bool = False) -> None:
    """The one set of selectors (above) of status, report and the bulk commands, so the
    same options pick the same jobs everywhere; `history`: status's --history, `dry_run`: a bulk
    command's --dry-run and --force."""
    p.add_argument("ids", nargs="*", type=args.job_id, metavar="ID", help=ids_help)
    p.add_argument("--tag", action="append", default=[], dest="tags", metavar="TAG",
                   help="jobs carrying this tag, repeatable (a job must carry every one given)")
    p.add_argument("--name", action="append", default=[], dest="names", metavar="GLOB",
                   help="jobs whose whole name matches GLOB (like 'sweep-*'), repeatable (any of them)")
    p.add_argument("--status", action="extend", default=[], dest="statuses", type=status_words,
                   metavar="S[,S]", help=f"jobs in one of these statuses ({', '.join(STATUS_NAMES)}), repeatable")
    p.add_argument("--sweep", action="append", default=[], dest="sweeps", type=args.job_id, metavar="ID",
                   help="the jobs of sweep ID, whoever submitted them, repeatable (any of them)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", help="this user's jobs (default: yours, unless ids or a sweep are given)")
    who.add_argument("--all-users", action="store_true", help="every user's jobs")
    if history:
        p.add_argument("--history", action="store_true",
                       help="the jobs `clean` moved to history.jsonl, newest first, instead of state.json's")
    if dry_run:
        p.add_argument("--dry-run", action="store_true", help="print the jobs it would act on; change nothing")
        p.add_argument("--force", action="store_true", help="also another user's jobs (recorded in each job)")


def selection_from(parsed: argparse.Namespace) -> Selection:
    """What the selectors add_selection_args added were given, as a Selection."""
    return Selection(ids=tuple(parsed.ids), tags=tuple(parsed.tags), names=tuple(parsed.names),
                     statuses=tuple(parsed.statuses), sweeps=tuple(parsed.sweeps),
                     user=parsed.user, all_users=parsed.all_users, history=getattr(parsed, "history", False))

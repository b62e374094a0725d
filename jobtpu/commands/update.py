"""`jobtpu update`: change fields of queued (or held) jobs, as Slurm's `scontrol update` does: their
request, priority, config overrides, machine and a sweep's --max-running (docs/reference/commands.md
§2.9.2). Under the pass lock, as `hold` is, with the ownership rule of kill and hold; each job's
changes are recorded as a `job_updated` event. The changes to one job are worked out by a pure
function (`apply_changes`), so a table test covers them."""

import argparse
import shlex
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.commands.select import (
    Selection,
    UsageError,
    add_selection_args,
    describe,
    require_some,
    select_current,
    selection_from,
)
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.users import check_owners, known_user
from jobtpu.render.text import printable

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Fleet
    from jobtpu.schema.state import Job


class Changes(NamedTuple):
    """What `update` was asked to change (None or empty: leave it)."""

    req: tuple[str, ...] | None = None  # the new --req tokens, all of them
    priority: int | None = None
    set: tuple[str, ...] = ()  # KEY=VALUE config overrides to add, or to replace the same key's
    unset: tuple[str, ...] = ()  # KEYs whose overrides to drop
    machine: str | None = None  # pin to this machine (a name, an alias, a TPU's node)
    no_machine: bool = False  # drop the pin
    max_running: int | None = None  # a sweep's cap; 0: no cap
    priority_class: str | None = None  # --class: machines.json's priority class, as submit checks it

    @property
    def any(self) -> bool:
        return (self.req is not None or self.priority is not None or bool(self.set or self.unset)
                or self.machine is not None or self.no_machine or self.max_running is not None
                or self.priority_class is not None)


def _override_key(word: str) -> str | None:
    """`'--config.lr=0.1'` (as a job keeps it, shell-quoted) → `config.lr`; None for a word that is not one."""
    try:
        parts = shlex.split(word)
    except ValueError:
        return None
    if len(parts) != 1 or "=" not in parts[0]:
        return None
    return parts[0].partition("=")[0].lstrip("-")


def apply_changes(job: "Job", changes: Changes, fleet: "Fleet", team: Mapping[str, str],
                  own: Mapping[str, str]) -> dict[str, list[Any]]:
    """Pure: change a queued job as asked; each field that changed → [was, now]. Raises, changing
    nothing, when the result could not run: a request or machine no machine could ever give, a
    --max-running on a job of no sweep. `team`, `own`: the aliases its overrides' keys go through."""
    from jobtpu.decide.fit import parse_request, why_not
    from jobtpu.home.settings import config_overrides, full_key
    from jobtpu.inputs import override_parts
    from jobtpu.limits import check_overrides

    req = list(changes.req) if changes.req is not None else list(job.req)
    pin = None if changes.no_machine else fleet.resolve(changes.machine).name if changes.machine else job.pin
    if req != job.req or pin != job.pin:
        request = parse_request(req)
        if all(why_not(m, request, pin) is not None for m in fleet.machines.values()):
            asked = " ".join(req) or "a slot"
            raise JobtpuError(f"job {job.id}: no machine could ever run {asked}" + (f" on {pin}" if pin else ""),
                              hint="`jobtpu machines` lists what each machine offers")
    if changes.priority_class is not None:  # the job's owner must be allowed it, as at submit
        from jobtpu.commands.submit import check_class

        check_class(fleet, changes.priority_class, job.user)
    if changes.max_running is not None and job.sweep is None:
        raise JobtpuError(f"job {job.id} is in no sweep: --max-running caps a sweep's running jobs",
                          hint="select a sweep's jobs, like `jobtpu update --sweep 12 --max-running 4`")
    overrides = list(job.overrides)
    values = dict(job.sweep_values)
    for key in changes.unset:
        full = full_key(key.lstrip("-"), team, own)
        kept = [w for w in overrides if _override_key(w) != full]
        if len(kept) == len(overrides):
            raise JobtpuError(f"job {job.id} has no override {key!r}",
                              hint=f"its overrides: {' '.join(overrides) or '(none)'}")
        overrides = kept
        values.pop(key.lstrip("-"), None)
    for word in changes.set:
        key, value = override_parts(word)
        full = full_key(key, team, own)
        overrides = [w for w in overrides if _override_key(w) != full] + config_overrides([word], team, own)
        if key in values:  # a sweep's value: its JOBTPU_SWEEP_<KEY> follows the argument
            values[key] = value
    check_overrides(overrides)
    found: dict[str, list[Any]] = {}

    def change(name: str, now: Any) -> None:
        was = getattr(job, name)
        if was != now:
            found[name] = [" ".join(was) if isinstance(was, list) else was,
                           " ".join(now) if isinstance(now, list) else now]
            setattr(job, name, now)

    change("req", req)
    change("pin", pin)
    if changes.priority is not None:
        change("priority", changes.priority)
    change("overrides", overrides)
    job.sweep_values = values
    if changes.max_running is not None:
        change("max_running", changes.max_running or None)
    if changes.priority_class is not None:
        change("priority_class", changes.priority_class)
    return found


def said(changed: dict[str, list[Any]]) -> str:
    """`priority 0 -> 5; req v3 -> v3-32`."""
    return "; ".join(f"{name} {'(none)' if was in (None, '') else was} -> {'(none)' if now in (None, '') else now}"
                     for name, (was, now) in changed.items())


def update(home: Home, sel: Selection, changes: Changes, force: bool = False, dry_run: bool = False) -> int:
    """Change the selected queued jobs; one line per job says what changed."""
    from jobtpu.decide import events as ev
    from jobtpu.decide.events import Event
    from jobtpu.home.settings import load_settings
    from jobtpu.passes.session import locked_session
    from jobtpu.passes.tell import told_by_hand
    from jobtpu.schema.msgspec_lib import msgspec

    require_some(sel, "update")
    if not changes.any:
        raise UsageError("update: give what to change", hint="--req, --priority, --set KEY=VALUE, --unset KEY, "
                         "--machine NAME, --no-machine, --max-running N or --class NAME (`jobtpu update --help`)")
    me = known_user(home, None)
    lines: list[str] = []
    with locked_session(home) as session:
        chosen = select_current(home, session.state.jobs, sel, "update")
        if not sel.filters:  # named by id: each must wait in the queue
            for job in chosen:
                if job.status != "queued":
                    raise JobtpuError(f"job {job.id} is {job.status}; only a queued (or held) job can be updated",
                                      hint="change it for its next run: `jobtpu kill` it, then submit again")
        jobs = [j for j in chosen if j.status == "queued"]
        if sel.filters and not jobs:
            note("jobtpu: no queued job to update matches the selection")
            return 0
        # Worked out on copies first: every job's changes are checked before any is made (all or nothing).
        copies = [msgspec.structs.replace(j, forced=list(j.forced)) for j in jobs]
        aliases = {user: load_settings(home, user).aliases for user in {j.user for j in jobs}}
        planned = [apply_changes(c, changes, session.fleet, session.fleet.config_aliases, aliases[c.user])
                   for c in copies]
        check_owners(home, copies, me, force, "update")  # all allowed, or none is changed
        prefix = "would update" if dry_run else "update"
        for job, changed in zip(jobs, planned, strict=True):
            print(printable(f"{prefix} {describe(job)}: {said(changed) or 'nothing changes'}"))
        if dry_run:
            return 0
        now = time.time()
        found = []
        place = {j.id: i for i, j in enumerate(session.state.jobs)}
        for copy, job, changed in zip(copies, jobs, planned, strict=True):
            if changed or len(copy.forced) != len(job.forced):
                session.state.jobs[place[job.id]] = copy
            if changed:
                found.append(Event(now, ev.JOB_UPDATED, job=job.id, user=job.user,
                                   detail={"changes": changed, "by": me, **({"name": job.name} if job.name else {})}))
        lines = told_by_hand(session, found)
    for line in lines:
        note(line)
    return 0


def changes_from(parsed: argparse.Namespace) -> Changes:
    return Changes(req=tuple(parsed.req) if parsed.req else None, priority=parsed.priority,
                   set=tuple(parsed.set), unset=tuple(parsed.unset), machine=parsed.machine,
                   no_machine=parsed.no_machine, max_running=parsed.max_running, priority_class=parsed.priority_class)


def add_parser(subparsers: "args.Subparsers") -> None:
    p = args.add_command(subparsers, "update")
    add_selection_args(p, "the queued jobs", dry_run=True)
    p.add_argument("--req", action="append", metavar="TOKEN",
                   help="the job's request from now on, repeatable: every --req given replaces all its tokens")
    p.add_argument("--priority", type=args.priority, metavar="N", help="its order among your queued jobs")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override to add, or to replace the same key's (through the aliases), repeatable")
    p.add_argument("--unset", action="append", default=[], metavar="KEY", help="drop the override of KEY, repeatable")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--machine", metavar="NAME", help="run only on this machine (a name, an alias, a TPU's node)")
    where.add_argument("--no-machine", action="store_true", help="run on any machine that fits")
    p.add_argument("--max-running", type=args.tries, metavar="N",
                   help="a sweep's jobs: at most N of its jobs launching or running at once (0: no cap)")
    p.add_argument("--class", dest="priority_class", metavar="NAME",
                   help="its priority class across users (machines.json's priority_classes), as submit takes it")
    p.set_defaults(func=lambda home, a: update(home, selection_from(a), changes_from(a), a.force, a.dry_run))

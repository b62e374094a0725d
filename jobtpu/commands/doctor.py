"""`jobtpu doctor`: check that the home's passes run, then a machine's workers (reachable, disk, python,
TPU device, stale lock file), and with --fix repair what is safe."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.errors import UsageError
from jobtpu.home.layout import Home

if TYPE_CHECKING:
    from jobtpu.schema.state import LastPass


def doctor(home: Home, name: str | None, fix: bool, accelerator: bool = False) -> int:
    """Check the passes and a machine's workers; exit 1 when any check found a problem."""
    from jobtpu.home.store import Store

    if name is None and (fix or accelerator):
        raise UsageError("--fix and --accelerator act on a machine: name it",
                         hint="run `jobtpu doctor NAME --fix` (`jobtpu machines` lists them)")
    if name is None:
        text, problem = passes_check(Store(home).load().last_pass, time.time())
        note(text)
        return 1 if _lease_checks(home) or problem else 0
    from jobtpu.fleet.doctor import doctor as check_machine
    from jobtpu.home.machines import load_fleet

    fleet = load_fleet(home)  # a broken machines.json or an unknown name is the one line, before any check
    machine = fleet.require(name)
    problems = check_machine(home, fleet, machine, fix=fix, report=note, accelerator=accelerator)
    text, problem = passes_check(Store(home).load().last_pass, time.time(), machine_asked=True)
    note(text)  # after the machine's own lines: how its jobs get started
    return 1 if problems or problem else 0


def _lease_checks(home: Home) -> bool:
    """The runner lease and the home's filesystem (whether a standby can work there); whether any is a problem."""
    from jobtpu.commands.runner import filesystem_check, lease_lines
    checks = lease_lines(home)
    if checks:  # a home with a standby needs a shared filesystem (`jobtpu runner` says it of any home)
        checks.append(filesystem_check(home))
    for text, problem in checks:
        note(("problem: " if problem else "") + text)
    return any(problem for _, problem in checks)


def passes_check(last: LastPass | None, now: float, machine_asked: bool = False) -> tuple[str, bool]:
    """Whether passes run: late (no pass for timing's stale_intervals of their interval, from the
    last pass recorded, as `status` says it) is a problem, naming the command that installs them.
    No pass yet is a problem too, unless a machine is being checked before any job (a new home)."""
    from jobtpu import timing
    from jobtpu.commands.cron import INSTALL
    from jobtpu.commands.freshness import ago, expected_every, freshness

    if last is None:
        what = f"no manage pass has run in this home yet: `{INSTALL}` runs one every minute"
        return (f"passes: not yet: {what}", False) if machine_asked else (f"passes: problem: {what}", True)
    _, stale = freshness(last, now)
    t = timing.current()
    every = expected_every(last, now, t.stale_intervals, t.default_interval)
    age = now - float(last.ended)
    if not stale:
        return f"passes: ok: the last pass ended {ago(age)} ago (they run every {every:g} s)", False
    return (f"passes: problem: no manage pass for {ago(age)}, and they should run every {every:g} s: "
            f"`{INSTALL}` runs them from cron"), True


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "doctor")
    p.add_argument("name", nargs="?", help="the machine, as machines.json names it (without: only the passes)")
    p.add_argument("--fix", action="store_true",
                   help="repair what is safe: create the remote root, stop unmanaged job processes, stale TPU locks")
    p.add_argument("--accelerator", action="store_true",
                   help="also check the TPU answers on every worker (JAX's devices, else the device files)")
    p.set_defaults(func=lambda home, a: doctor(home, a.name, a.fix, a.accelerator))

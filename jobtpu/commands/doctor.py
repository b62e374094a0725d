"""`jobtpu doctor`: check a machine's workers (reachable, disk, python, TPU device, stale lock file),
and with --fix repair what is safe."""

from __future__ import annotations

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.home.layout import Home


def doctor(home: Home, name: str, fix: bool, accelerator: bool = False) -> int:
    """Check a machine's workers; exit 1 when any check found a problem."""
    from jobtpu.remote.doctor import doctor as check_machine
    from jobtpu.schema.machines import load_fleet

    fleet = load_fleet(home)
    machine = fleet.require(name)
    problems = check_machine(home, fleet, machine, fix=fix, report=note, accelerator=accelerator)
    return 1 if problems else 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "doctor", "check a machine: reachable, disk, python, TPU device, stale lock file")
    p.add_argument("name", help="the machine, as machines.json names it")
    p.add_argument("--fix", action="store_true",
                   help="repair what is safe: create the remote root, stop unmanaged job processes, stale TPU locks")
    p.add_argument("--accelerator", action="store_true",
                   help="also check the TPU answers on every worker (JAX's devices, else the device files)")
    p.set_defaults(func=lambda home, a: doctor(home, a.name, a.fix, a.accelerator))

"""The home's words Tab offers (docs/reference/python.md §11.4): job ids, sweep ids, machine names
and aliases, request tokens and resource counts, accelerators, config keys and alias names, read
from the home a command would use; state.json at most once, decoding only the fields offered. Tab's
walk over the command line (commands/completion.py) asks for them by kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.home.layout import Home

ACTIVE = ("queued", "launching", "running", "killing")


def home_values(kind: str, home_arg: str) -> list[str]:
    """The home's words of one kind; nothing when the home cannot be read (Tab never prints an error)."""
    from jobtpu.home.layout import find_home

    try:
        home = find_home(home_arg or None)
        return _READERS[kind](home)
    except Exception:  # noqa: BLE001 - a broken home completes nothing, and says nothing mid-line
        return []


def _jobs(home: Home) -> list[str]:
    """Job ids: yours queued or running first, then your others, then everyone's, newest first in each."""
    from jobtpu.home.actor import resolve_user
    from jobtpu.home.safefs import CAP_LARGE, read_regular

    brief = msgspec.json.decode(read_regular(home.root, "state.json", CAP_LARGE), type=_Brief)
    me = resolve_user(None)
    order = sorted(brief.jobs, key=lambda j: (j.user != me, j.status not in ACTIVE, -j.id))
    return [str(j.id) for j in order]


def _sweeps(home: Home) -> list[str]:
    from jobtpu.home.safefs import CAP_LARGE, read_regular

    brief = msgspec.json.decode(read_regular(home.root, "state.json", CAP_LARGE), type=_Brief)
    return [str(s) for s in sorted({j.sweep for j in brief.jobs if j.sweep is not None}, reverse=True)]


def _machines(home: Home) -> list[str]:
    from jobtpu.home.machines import load_fleet

    fleet = load_fleet(home)
    return [n for m in fleet.machines.values() for n in (m.name, *m.aliases)]


def _req(home: Home) -> list[str]:
    from jobtpu.home.machines import load_fleet

    fleet = load_fleet(home)
    resources = sorted({f"{r}=" for m in fleet.machines.values() for r in m.capacity})
    return [*_accelerators(home), *resources, "preemptible", "on-demand"]


def _accelerators(home: Home) -> list[str]:
    from jobtpu.home.machines import load_fleet

    return sorted({m.accelerator for m in load_fleet(home).machines.values() if m.accelerator})


def _counts(home: Home) -> list[str]:
    """`NAME=N` for each resource the fleet offers: every N up to the most one machine has."""
    from jobtpu.home.machines import load_fleet

    most: dict[str, int] = {}
    for machine in load_fleet(home).machines.values():
        for name, n in machine.capacity.items():
            most[name] = max(most.get(name, 0), int(n))
    return [f"{name}={n}" for name in sorted(most) for n in counts_up_to(most[name])]


def counts_up_to(most: int) -> list[int]:
    """Pure: the counts offered of a resource a machine has `most` of: each up to 16, beyond that
    the powers of two and the most itself (a box of 64 slots offers 7 counts, not 64)."""
    if most <= 16:
        return list(range(1, most + 1))
    powers = [2 ** k for k in range(most.bit_length()) if 2 ** k < most]
    return [*powers, most]


def _config(home: Home) -> list[str]:
    from jobtpu.home.settings import CONFIG_KEYS

    return list(CONFIG_KEYS)


def _alias_names(home: Home) -> list[str]:
    """Config alias names: yours, the team's (machines.json) and the built-in ones."""
    from jobtpu.home.actor import resolve_user
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.settings import effective_aliases, load_settings

    own = load_settings(home, resolve_user(None)).aliases
    return sorted(effective_aliases(load_fleet(home).config_aliases, own))


def _aliases(home: Home) -> list[str]:
    """An override's or a sweep's key, as an alias: `lr=`."""
    return [f"{name}=" for name in _alias_names(home)]


_READERS: dict[str, Callable[[Home], list[str]]] = {
    "ids": _jobs, "sweeps": _sweeps, "machines": _machines, "req": _req, "config": _config, "aliases": _aliases,
    "alias-names": _alias_names, "accelerators": _accelerators, "counts": _counts}


class _BriefJob(msgspec.Struct):
    """What Tab needs of a job: decoding only these fields of state.json is a fraction of a full read."""

    id: int
    user: str = ""
    status: str = "queued"
    sweep: int | None = None


class _Brief(msgspec.Struct):
    jobs: list[_BriefJob] = []

"""`jobtpu machines`: the fleet's state as the last pass saw it (no SSH, no API call): kind,
accelerator, state, running jobs, free resources, claims in the team sheet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobtpu.commands import args
from jobtpu.commands.common import emit_json
from jobtpu.home.layout import Home
from jobtpu.home.store import Store

if TYPE_CHECKING:
    import argparse

    from jobtpu.schema.fleet import Fleet, Machine
    from jobtpu.schema.state import State


def machine_rows(home: Home, state: State | None = None) -> list[dict[str, Any]]:
    """Each machine as `machines --json` gives it (schema/published.py's MachineRow), with its
    claim in the team sheet when the home has one (as the last pass's read of it saw them)."""
    from jobtpu.home.machines import load_fleet

    fleet = load_fleet(home)
    return fleet_rows(fleet, state or Store(home).load(), _sheet_claims(home) if fleet.sheet is not None else None)


def fleet_rows(fleet: Fleet, state: State, claims: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """machine_rows' rows from the fleet, state.json and the sheet's claims (None: no sheet)."""
    from jobtpu.decide.dispatch import used_resources
    from jobtpu.fleet.drivers import driver_for
    from jobtpu.schema.records import MachineRecord

    used = used_resources(state.jobs)
    rows = []
    for m in fleet.machines.values():
        known = state.machines.get(m.name) or MachineRecord()
        taken = used.get(m.name, {})
        api_error = known.api_error  # the TPU API could not be asked this pass (credentials)
        workers = m.known_workers
        rows.append({
            "name": m.name, "aliases": list(m.aliases), "kind": m.kind, "accelerator": m.accelerator, "preemptible": m.preemptible,
            "workers": known.workers if known.workers is not None else workers,
            "state": "unknown" if api_error else known.state or ("up" if m.runs_here else "unknown"),
            "health": known.health, "health_description": known.health_description,
            "detail": api_error or (known.detail if known.state is not None or m.runs_here else driver_for(m).never_seen(m)),
            "running": sum(1 for j in state.jobs if m.name in j.holds and j.active),
            "unreachable_since": known.since,
            "next_try": driver_for(m).create_retry(known),
            "note": known.note,
            "drained": {"reason": known.drained.reason, "by": known.drained.by, "at": known.drained.at}
            if known.drained else None,
            "free": {r: n - len(taken.get(r, set())) for r, n in m.capacity.items()},
            **driver_for(m).provider_columns(m, known),
        })
    if claims is not None:
        _with_claims(rows, claims)
    for row in rows:  # a drain is said first: why queued jobs pass the machine by
        if row["drained"] is not None:
            said = "drained" + (f": {row['drained']['reason']}" if row["drained"]["reason"] else "")
            row["detail"] = "; ".join(x for x in (said, row["detail"]) if x)
    return rows


def _sheet_claims(home: Home) -> Mapping[str, str]:
    """Machines a person claimed in the team sheet, as the last pass's read of it saw them (no API call)."""
    from jobtpu.passes.sheet_hook import memo_path
    from jobtpu.sheet.memo import load_memo

    return load_memo(memo_path(home)).claims


def _with_claims(rows: list[dict[str, Any]], claims: Mapping[str, str]) -> None:
    from jobtpu.decide.observation import claim_reason

    for row in rows:
        holder = claims.get(row["name"])
        row["claimed_by"] = holder
        if holder:
            row["detail"] = "; ".join(x for x in (claim_reason(holder), row["detail"]) if x)


def machines(home: Home, as_json: bool, name: str | None = None) -> int:
    from jobtpu.commands.freshness import last_pass_json, say_freshness
    from jobtpu.home.machines import load_fleet

    fleet = load_fleet(home)
    machine = fleet.resolve(name) if name is not None else None  # an unknown name changes nothing
    state = Store(home).load()
    rows = [row for row in fleet_rows(fleet, state, _sheet_claims(home) if fleet.sheet is not None else None)
            if machine is None or row["name"] == machine.name]
    if as_json:
        emit_json({"machines": rows, "last_pass": last_pass_json(state.last_pass)})
        return 0
    import time

    from rich.console import Console

    from jobtpu.home.settings import viewer_settings, viewer_zone
    from jobtpu.render.display import machines_table
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.published import MachineRow
    from jobtpu.views.rows import machine_rows as table_rows

    console = Console()
    zone = viewer_zone(viewer_settings(home))
    if machine is None:
        typed = msgspec.convert(rows, list[MachineRow])
        console.print(machines_table(table_rows(fleet, state, typed, time.time(), zone), console.width))
    else:
        console.print(_detail(rows[0], machine, state, zone), highlight=False, markup=False, soft_wrap=True)
    say_freshness(state.last_pass)
    return 0


def _detail(row: dict[str, Any], machine: Machine, state: State, zone: Any) -> str:
    """`machines NAME`: one line per thing known of the machine (views/machine.py)."""
    from jobtpu.render.text import clock, printable
    from jobtpu.schema.records import MachineRecord
    from jobtpu.views.machine import machine_lines

    holding = [j for j in state.jobs if machine.name in j.holds and j.active]
    lines = machine_lines(row, machine, state.machines.get(machine.name) or MachineRecord(), holding,
                          lambda t: clock(t, zone), state.last_pass.ended if state.last_pass else None)
    width = max(len(what) for what, _ in lines)
    return "\n".join(printable(f"{what + ':':<{width + 1}} {value}") for what, value in lines)


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "machines")
    # `machines NAME` (one machine in detail) beside `machines drain NAME` and `machines undrain NAME`:
    # argparse cannot have an optional NAME and sub-commands at once, so the words are read here.
    p.add_argument("words", nargs="*", metavar="NAME | drain NAME | undrain NAME",
                   help="one machine in detail (its name or an alias): where it is, who holds it, what the last "
                        "pass saw; `drain NAME` starts no new job there (what runs goes on), `undrain NAME` "
                        "lets queued jobs start there again")
    p.add_argument("--reason", metavar="TEXT",
                   help="with drain: why, shown by `machines` and in queued jobs' pending reasons (one line)")
    p.add_argument("--json", action="store_true", help="the same as JSON")
    p.set_defaults(func=_machines_command)


ACTS = ("drain", "undrain")


def _machines_command(home: Home, a: argparse.Namespace) -> int:
    """The words: none (the table), a machine's name (its detail), or drain/undrain and a name."""
    from jobtpu.errors import UsageError

    words: list[str] = a.words
    if words and words[0] in ACTS:
        if len(words) != 2 or a.json:
            raise UsageError(f"`machines {words[0]}` takes one machine's name" + (" and no --json" if a.json else ""),
                             hint=f"e.g. `jobtpu machines {words[0]} v3-32-p1" +
                                  (' --reason "disk full"`' if words[0] == "drain" else "`"))
        if words[0] == "undrain" and a.reason is not None:
            raise UsageError("--reason goes with `machines drain`", hint="`jobtpu machines undrain NAME`")
        return _drain(home, words[1], a.reason or "", undrain=words[0] == "undrain")
    if a.reason is not None:
        raise UsageError("--reason goes with `machines drain NAME`", hint='e.g. `jobtpu machines drain box --reason "disk full"`')
    if len(words) > 1:
        raise UsageError(f"`machines` takes one machine's name, not {len(words)} words",
                         hint="`jobtpu machines NAME`, `jobtpu machines drain NAME` or `jobtpu machines undrain NAME`")
    return machines(home, a.json, words[0] if words else None)


def _drain(home: Home, name: str, reason: str, undrain: bool) -> int:
    from jobtpu.commands.drain import drain  # here: `--help` loads no more than it needs

    return drain(home, name, reason, undrain)

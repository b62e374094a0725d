"""`jobtpu machines`: the fleet's state as the last pass saw it (no SSH, no API call): kind,
accelerator, state, running jobs, free resources, claims in the team sheet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobtpu.commands import args
from jobtpu.commands.common import emit_json
from jobtpu.home.layout import Home
from jobtpu.home.store import Store

if TYPE_CHECKING:
    import argparse

    from jobtpu.schema.fleet import Machine
    from jobtpu.schema.records import MachineRecord
    from jobtpu.schema.state import State


def machine_rows(home: Home, state: State | None = None) -> list[dict[str, Any]]:
    from jobtpu.decide.dispatch import used_resources
    from jobtpu.schema.machines import load_fleet
    from jobtpu.schema.records import MachineRecord

    fleet = load_fleet(home)
    state = state or Store(home).load()
    used = used_resources(state.jobs)
    rows = []
    for m in fleet.machines.values():
        known = state.machines.get(m.name) or MachineRecord()
        taken = used.get(m.name, {})
        api_error = known.api_error  # the TPU API could not be asked this pass (credentials)
        workers = len(m.hosts) if m.kind == "ssh" else 1 if m.kind == "local" else None
        rows.append({
            "name": m.name, "kind": m.kind, "accelerator": m.accelerator, "preemptible": m.preemptible,
            "workers": known.workers if known.workers is not None else workers,
            "state": "unknown" if api_error else known.state or ("up" if m.kind == "local" else "unknown"),
            "health": known.health, "health_description": known.health_description,
            "detail": api_error or (known.detail if known.state is not None or m.kind == "local" else _never_seen(m)),
            "running": sum(1 for j in state.jobs if j.machine == m.name and j.active),
            "unreachable_since": known.since,
            "next_try": known.next_try if m.is_tpu else None,  # an ssh machine's is its short pause (reach.py)
            "note": known.note,
            "drained": {"reason": known.drained.reason, "by": known.drained.by, "at": known.drained.at}
            if known.drained else None,
            "free": {r: n - len(taken.get(r, set())) for r, n in m.capacity.items()},
            **(_tpu_columns(m, known) if m.is_tpu else {}),
        })
    if fleet.sheet is not None:
        _sheet_claims(home, rows)
    for row in rows:  # a drain is said first: why queued jobs pass the machine by
        if row["drained"] is not None:
            said = "drained" + (f": {row['drained']['reason']}" if row["drained"]["reason"] else "")
            row["detail"] = "; ".join(x for x in (said, row["detail"]) if x)
    return rows


def _sheet_claims(home: Home, rows: list[dict[str, Any]]) -> None:
    """Machines a person claimed in the team sheet, as the last pass's read of it saw them (no API call)."""
    from jobtpu.sheet.hook import memo_path
    from jobtpu.sheet.memo import load_memo
    from jobtpu.sheet.rows import claim_reason

    claims = load_memo(memo_path(home)).claims
    for row in rows:
        holder = claims.get(row["name"])
        row["claimed_by"] = holder
        if holder:
            row["detail"] = "; ".join(x for x in (claim_reason(holder), row["detail"]) if x)


def _tpu_columns(machine: Machine, known: MachineRecord) -> dict[str, Any]:
    from jobtpu.commands.tpu import provisioning

    return {"provisioning": provisioning(machine, known), "zone": known.zone or machine.zone,
            "moved": known.moved,
            "queued_resource": known.queued_state if machine.queued_resource else None,
            "refused": known.refused.message if known.refused else None}


def _never_seen(machine: Machine) -> str:
    if machine.is_tpu:
        return "not asked yet: the next `jobtpu manage` asks the TPU API"
    # An idle ssh machine costs no round trip in a pass; it is first contacted when a job goes there.
    return f"not contacted yet: a pass contacts it when a job goes there; `jobtpu doctor {machine.name}` checks it now"


def machines(home: Home, as_json: bool) -> int:
    from jobtpu.commands.freshness import last_pass_json, say_freshness

    state = Store(home).load()
    rows = machine_rows(home, state)
    if as_json:
        emit_json({"machines": rows, "last_pass": last_pass_json(state.last_pass)})
        return 0
    from rich.console import Console

    from jobtpu.home.settings import viewer_settings, viewer_zone
    from jobtpu.views.display import machines_table

    console = Console()
    console.print(machines_table(rows, console.width, viewer_zone(viewer_settings(home))))
    say_freshness(state.last_pass)
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "machines", "the fleet: kind, accelerator, state, running jobs, free resources")
    p.add_argument("--json", action="store_true", help="the same as JSON")
    p.set_defaults(func=lambda home, a: machines(home, a.json))
    _add_drain_parsers(p)


def _add_drain_parsers(p: argparse.ArgumentParser) -> None:
    """`machines drain NAME [--reason TEXT]` and `machines undrain NAME` (commands/drain.py)."""
    sub = p.add_subparsers(dest="machines_act", metavar="drain|undrain", parser_class=type(p))
    d = args.add_command(sub, "drain", "start no new job on the machine; what runs there goes on")
    d.add_argument("name", metavar="NAME", help="the machine (its name, an alias, or a TPU's node name)")
    d.add_argument("--reason", default="", metavar="TEXT", help="why, shown by `machines` and in queued jobs' "
                   "pending reasons (one line)")
    d.set_defaults(func=lambda home, a: _drain(home, a.name, a.reason, undrain=False))
    u = args.add_command(sub, "undrain", "let queued jobs start on a drained machine again")
    u.add_argument("name", metavar="NAME", help="the machine")
    u.set_defaults(func=lambda home, a: _drain(home, a.name, "", undrain=True))


def _drain(home: Home, name: str, reason: str, undrain: bool) -> int:
    from jobtpu.commands.drain import drain  # here: `--help` loads no more than it needs

    return drain(home, name, reason, undrain)

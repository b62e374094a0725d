"""The fleet commands: manage (the pass), machines (the fleet's state), doctor (check a machine)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jobtpu.commands.common import emit_json, error_text, note
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.views.text import printable

if TYPE_CHECKING:
    from jobtpu.schema.machines import Machine
    from jobtpu.schema.state import MachineRecord, State


# ---- manage ---------------------------------------------------------------------------------------

def manage(home: Home, loop: float | None, dry_run: bool) -> int:
    """One pass, or (with `loop`) a pass every `loop` seconds until interrupted."""
    from jobtpu.passes import manage as passes
    from jobtpu.passes.session import kept_connections

    with kept_connections(loop is not None):  # a loop keeps its SSH connections open between rounds
        return _manage_rounds(home, loop, dry_run, passes.run_pass)


def _manage_rounds(home: Home, loop: float | None, dry_run: bool, run_pass: Any) -> int:
    from jobtpu.commands.watch import record_pass_failure

    while True:
        try:
            report = run_pass(home, dry_run=dry_run, on_note=None if dry_run else note, every=loop)
        except Exception as e:
            # A loop logs every failed round (nobody may be reading its terminal); a single pass
            # that fails on the user's mistake (a broken machines.json) changes nothing, as every
            # command does, and says so: only its other failures (a bug, a full disk) are logged.
            if not dry_run and (loop is not None or not isinstance(e, JobtpuError)):
                record_pass_failure(home, e)
            if loop is None:
                raise
            # The loop babysits jobs at 3 am: a typo in machines.json, a busy state file (one line),
            # a full disk or a bug (the traceback) is reported, and the next round tries again.
            if isinstance(e, JobtpuError):
                note(error_text(e))
            else:
                import traceback

                note("jobtpu: the pass failed; trying again next round\n" + traceback.format_exc().rstrip())
        else:
            if dry_run:
                for line in report.notes or ["nothing to do"]:
                    print(printable(line))
            elif report.skipped:
                note("jobtpu: another manage pass is running; skipped")
            if loop is None:
                return 0
        time.sleep(loop)


# ---- machines -------------------------------------------------------------------------------------

def machine_rows(home: Home, state: State | None = None) -> list[dict[str, Any]]:
    from jobtpu.decide.core import used_resources
    from jobtpu.schema.machines import load_fleet
    from jobtpu.schema.state import MachineRecord

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
            "free": {r: n - len(taken.get(r, set())) for r, n in m.capacity.items()},
            **(_tpu_columns(m, known) if m.is_tpu else {}),
        })
    if fleet.sheet is not None:
        _sheet_claims(home, rows)
    return rows


def _sheet_claims(home: Home, rows: list[dict[str, Any]]) -> None:
    """Machines a person claimed in the team sheet, as the last pass's read of it saw them (no API call)."""
    from jobtpu.sheet.api import claim_reason, load_memo
    from jobtpu.sheet.hook import memo_path

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
    from jobtpu.commands.watch import last_pass_json, say_freshness

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


def doctor(home: Home, name: str, fix: bool, accelerator: bool = False) -> int:
    """Check a machine's workers; exit 1 when any check found a problem."""
    from jobtpu.remote.doctor import doctor as check_machine
    from jobtpu.schema.machines import load_fleet

    fleet = load_fleet(home)
    machine = fleet.require(name)
    problems = check_machine(home, fleet, machine, fix=fix, report=note, accelerator=accelerator)
    return 1 if problems else 0

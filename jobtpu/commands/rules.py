"""`jobtpu rules`: what each rule does when an attempt ends, and which machines default to it.

Every cell is computed by asking rules.py and the fleet's own default, the functions a pass decides
with, so the table cannot drift from what happens."""

from __future__ import annotations

from typing import Any

from jobtpu.commands import args
from jobtpu.commands.common import emit_json
from jobtpu.home.layout import Home

# How a recovery word reads (docs/reference/requests-and-rules.md §7.1 uses the same words).
SAYS = {"resume": "resume", "rerun": "run from the start", "recreate-resume": "recreate the TPU, then resume",
        "recreate-rerun": "recreate the TPU, then run from the start", None: "fail"}
# The same, shorter, for a terminal too narrow for the table in full words.
SHORT = {"recreate the TPU, then resume": "recreate+resume", "recreate the TPU, then run from the start":
         "recreate+rerun", "run from the start": "rerun", "local machine": "local", "ssh machine": "ssh",
         "preemptible or spot TPU": "spot/preemptible TPU"}


def _outcome(rule: str, reasons: tuple[str, ...]) -> str:
    """What `rule` does about an attempt that ended with any of `reasons` (one recovery left)."""
    from jobtpu.decide import rules

    said = {SAYS.get(word, str(word)) for word in (rules.recovery(rule, r, 0, 1) for r in reasons)}
    return " / ".join(sorted(said))


def rule_rows(home: Home) -> list[dict[str, Any]]:
    from jobtpu.decide import rules
    from jobtpu.home.machines import load_fleet
    from jobtpu.schema import state as model
    from jobtpu.schema.fleet import Machine, MachineKind

    kinds = {"local machine": Machine(name="local", kind=MachineKind.LOCAL),
             "ssh machine": Machine(name="box", kind=MachineKind.SSH),
             "on-demand TPU": Machine(name="tpu", kind=MachineKind.TPU),
             "preemptible or spot TPU": Machine(name="tpu", kind=MachineKind.TPU, preemptible=True)}
    # The home's own machines, when it has a machines.json (a broken one is reported, as everywhere).
    fleet = load_fleet(home).machines.values() if home.machines_file.exists() else []
    other = (model.OOM, model.TIMEOUT, model.LAUNCH_FAILED, model.KILLED, model.exit_reason(1))
    return [{
        "rule": rule,
        "preempted": _outcome(rule, (model.PREEMPTED,)),
        "grpc_lost_hang": _outcome(rule, tuple(sorted(rules.RETRIABLE))),
        "other_failure": _outcome(rule, other),
        "exit_0": "finished",
        "default_for": [kind for kind, m in kinds.items() if m.default_rule() == rule],
        "machines": [m.name for m in fleet if m.default_rule() == rule],
    } for rule in rules.RULES]


def show_rules(home: Home, as_json: bool) -> int:
    rows = rule_rows(home)
    if as_json:
        emit_json({"rules": rows})
        return 0
    from rich.console import Console

    from jobtpu.render.display import rules_table

    console = Console()
    console.print(rules_table(rows, console.width, SHORT))
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "rules")
    p.add_argument("--json", action="store_true", help="the same as JSON")
    p.set_defaults(func=lambda home, a: show_rules(home, a.json))

"""`jobtpu tpu describe|status|apply|reapply|delete|setup|restart NAME`: TPU node operations through the TPU
API. Operations are started, recorded in state.json and followed by later passes; nothing here waits
(but `setup` and `restart`, repairs done now: repairs.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jobtpu.commands import args
from jobtpu.commands.common import emit_json
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.render.text import printable
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.nodespec import provisioning
from jobtpu.schema.records import Operation, StepKind

if TYPE_CHECKING:
    from jobtpu.passes.session import Session
    from jobtpu.schema.fleet import Machine


def tpu_command(home: Home, op: str, name: str) -> dict[str, Any]:
    """Run one operation; what to show (also the --json document)."""
    from jobtpu.passes.session import locked_session

    with locked_session(home) as p:
        machine = p.fleet.resolve(name)
        name = machine.name  # an alias or the node's name, as machines.json names the machine
        if not machine.cloud_node:
            raise JobtpuError(f"{name} is a {machine.kind} machine, not a TPU")
        record = p.state.machine(name)
        machine = machine.in_zone(record.zone)  # the zone it is in now
        api = p.tpu_api()
        node = api.get_node(str(machine.zone), str(machine.node))
        p.nodes[name] = node
        busy = [j.id for j in p.state.jobs if j.machine == name and j.active]
        if op in ("reapply", "delete") and busy:
            raise JobtpuError(f"{name} runs job(s) {', '.join(map(str, busy))}",
                              hint=f"`jobtpu kill {' '.join(map(str, busy))}` first")
        now = time.time()
        if op in ("apply", "reapply"):
            record.refused = None  # the user asks again: a refused create is tried once more
        if op == "apply":
            if node is not None:
                raise JobtpuError(f"{name}: node {machine.node} already exists ({node.state})",
                                  hint=f"`jobtpu tpu reapply {name}` deletes and recreates it")
            _recreate(p, machine, now)
        elif op == "reapply":
            record.next_try = None
            _recreate(p, machine, now)
        elif op == "delete":
            if node is None:
                raise JobtpuError(f"{name}: node {machine.node} does not exist")
            from jobtpu.decide.tpu_plan import delete_by_hand

            steps = delete_by_hand(record, bool(machine.queued_resource))
            p.commit()  # the intent is on disk before the API is called, as a pass saves its steps
            if StepKind.DELETE_QUEUED in steps:
                api.delete_queued(machine)
            operation = api.delete_node(machine)
            if operation is not None:  # None: the node went away by itself meanwhile
                record.operation = Operation("delete", operation, now)
            record.steps = None
        # describe / status only read: the next pass records what the API says.
        return {
            "machine": name, "node": machine.node, "zone": machine.zone, "accelerator": machine.accelerator,
            "preemptible": machine.preemptible, "provisioning": provisioning(machine, record), "exists": node is not None,
            "tpu_state": node.state if node else None, "health": node.health if node else None,
            "health_description": node.health_description if node else None,
            "addresses": node.addresses(machine.use_external_ip) if node else [],
            "runtime_version": machine.runtime_version, "created": node.create_time if node else None,
            "jobtpu_state": record.state, "detail": record.detail,
            "operation": msgspec.to_builtins(record.operation), "recreations": record.recreations,
            "failures": record.failures, "running_jobs": busy,
            "refused": record.refused.message if record.refused else None, "zones": list(machine.zones),
            "queued_resource": record.queued_state if machine.queued_resource else None,
            "recorded_spec": record.spec,
        }


def _recreate(p: Session, machine: Machine, now: float) -> None:
    """Plan the first step of bringing the node back, save it, then carry it out (as a pass does)."""
    from jobtpu.tpu.flow import carry_out, request_recreate

    work = request_recreate(p, machine, now)
    if work is not None:
        p.commit()
        carry_out(p, p.tpu_api(), work, now)


def tpu(home: Home, op: str, name: str, as_json: bool, force: bool = False) -> int:
    if force and op != "setup":
        raise JobtpuError(f"--force is for `jobtpu tpu setup`, not {op}",
                          hint="reapply and delete are refused while a job runs: `jobtpu kill` it first")
    if op == "setup":
        if as_json:
            raise JobtpuError("`jobtpu tpu setup` prints each worker's output; it has no --json",
                              hint=f"run `jobtpu tpu setup {name}` without --json")
        from jobtpu.passes.session import locked_session
        from jobtpu.tpu.repairs import setup_now

        with locked_session(home) as p:
            return setup_now(p, name, force, lambda line: print(printable(line), flush=True))
    if op == "restart":
        from jobtpu.tpu.repairs import restart

        if as_json:
            raise JobtpuError("`jobtpu tpu restart` has no --json", hint=f"run `jobtpu tpu restart {name}` without it")
        from jobtpu.passes.session import locked_session

        with locked_session(home) as p:
            return restart(p, name, lambda line: print(printable(line), flush=True))
    info = tpu_command(home, op, name)
    if as_json:
        emit_json(info)
    elif op == "status":
        print(printable(f"{info['machine']}: {info['tpu_state'] or 'no node'} ({info['jobtpu_state'] or 'unknown'})"
                        + (f" — {info['detail']}" if info.get("detail") else "")))
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(printable(f"{key:<{width}}  {value if value not in (None, [], {}) else '-'}"))
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "tpu")
    p.add_argument("op", choices=("describe", "status", "apply", "reapply", "delete", "setup", "restart"),
                   help="describe or status (read), apply (create), reapply (recreate) or delete the node; "
                        "setup: run the machine's setup commands again on every worker now; restart: stop "
                        "and start the node (single-host v4 and newer)")
    p.add_argument("name", help="the TPU machine, as machines.json names it")
    p.add_argument("--json", action="store_true", help="what describe shows, as JSON")
    p.add_argument("--force", action="store_true", help="setup: run even while a job runs there")
    p.set_defaults(func=lambda home, a: tpu(home, a.op, a.name, a.json, a.force))

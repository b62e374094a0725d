"""`jobtpu tpu describe|status|apply|reapply|delete|setup|restart NAME`: TPU node operations through the TPU
API (tpu/operations.py). Operations are started, recorded in state.json and followed by later passes;
nothing here waits (but `setup` and `restart`, repairs done now: tpu/repairs.py)."""

from __future__ import annotations

from typing import Any

from jobtpu.commands import args
from jobtpu.commands.common import emit_json
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.render.text import printable


def tpu_command(home: Home, op: str, name: str) -> dict[str, Any]:
    """Run one operation under the pass lock; what to show (also the --json document)."""
    from jobtpu.passes.session import locked_session
    from jobtpu.tpu.operations import node_operation

    with locked_session(home) as p:
        return node_operation(p, op, name, p.commit)


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

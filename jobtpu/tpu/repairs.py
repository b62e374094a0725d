"""Repairs on demand for a TPU machine (docs/reference/commands.md §2.11). `jobtpu tpu setup NAME` reruns its
setup on every worker now: a pass runs setup once per node incarnation; this is for the time a
person fixed what made it fail (a bucket's permission, a package index) or changed the commands.
`jobtpu tpu restart NAME` stops and starts the node through the TPU API, where Google allows it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobtpu import timing
from jobtpu.errors import JobtpuError, RemoteError
from jobtpu.schema.accelerator import accelerator as parse_accelerator
from jobtpu.schema.records import MachineState, Setup, SetupStatus
from jobtpu.tpu.runtime import tpu_runtime

if TYPE_CHECKING:
    from jobtpu.schema.fleet import Machine
    from jobtpu.schema.tpu_answers import NodeInfo
    from jobtpu.transport.base import WorkerAccess




def running_jobs(p: WorkerAccess, name: str) -> list[int]:
    return [j.id for j in p.state.jobs if name in j.holds and j.active]  # a gang's every slice


def refuse_if_busy(p: WorkerAccess, name: str, force: bool, what: str, hint: str = "add --force, or ") -> None:
    """One line naming the jobs a repair would run under (or end), unless --force."""
    busy = running_jobs(p, name)
    if busy and not force:
        ids = ", ".join(map(str, busy))
        them = "them" if len(busy) > 1 else "it"
        raise JobtpuError(f"{name} runs job{'s' if len(busy) > 1 else ''} {ids}: {what.format(them=them)}",
                          hint=f"{hint}`jobtpu kill {ids}` first")


def ready_node(p: WorkerAccess, machine: Machine) -> NodeInfo:
    """The machine's node, which must be up for its workers to be reached."""
    from jobtpu.schema.tpu_answers import UP, health_of

    node = tpu_runtime(p).api().get_node(str(machine.zone), str(machine.node))
    if node is None:
        raise JobtpuError(f"{machine.name}: node {machine.node} does not exist in {machine.zone}",
                          hint=f"`jobtpu tpu apply {machine.name}` creates it")
    health, why = health_of(node.state)
    if health != UP:
        raise JobtpuError(f"{machine.name}: node {machine.node} is {node.state} ({why})",
                          hint=f"`jobtpu tpu status {machine.name}` shows when it is back")
    tpu_runtime(p).saw(machine.name, node, node.addresses(machine.use_external_ip))
    return node


def tpu_machine(p: WorkerAccess, name: str) -> Machine:
    """The TPU machine `name` means, in the zone it is in now."""
    machine = p.fleet.resolve(name)
    if not machine.cloud_node:
        raise JobtpuError(f"{machine.name} is a {machine.kind} machine, not a TPU")
    return machine.in_zone(p.state.machine(machine.name).zone)


def setup_now(p: WorkerAccess, name: str, force: bool, say: Callable[[str], None]) -> int:
    """Rerun the machine's setup on every worker, under the pass lock (the caller's session holds it);
    each worker's output as `[K] line`, then one result line. 1 when a worker failed."""
    from jobtpu.remote.scripts import setup_now_script, setup_tag
    from jobtpu.schema.worker_protocol import last_setup

    machine = tpu_machine(p, name)
    if not machine.setup:
        raise JobtpuError(f"{machine.name} has no setup commands",
                          hint=f"add \"setup\": [...] to its entry in {p.home.machines_file}")
    refuse_if_busy(p, machine.name, force, "its setup would run under {them}")
    node = ready_node(p, machine)
    incarnation = str(node.create_time or "")
    # The tag of this incarnation: a pass that has not seen it yet finds the setup done.
    tag = setup_tag(incarnation)

    def one(ep: Any) -> tuple[list[str], str]:
        try:
            out = p.run_on(machine, ep, setup_now_script(machine.root, tag, ep.index, machine.setup),
                           timeout=timing.current().setup_now_timeout)
        except RemoteError as e:
            return [f"cannot run the setup: {e.message}"], "unreachable"
        lines, report = last_setup(out)
        return lines, report.said if report is not None else "error"

    results = p.parallel(one, p.endpoints(machine))
    for index, (lines, _) in enumerate(results):
        for line in lines:
            say(f"[{index}] {line}")
    failed = [(i, word) for i, (_, word) in enumerate(results) if word != "done"]
    _record(p, machine, incarnation, failed, results)
    if not failed:
        say(f"{machine.name}: setup done on {len(results)} worker{'s' if len(results) > 1 else ''}")
        return 0
    i, word = failed[0]
    why = {"running": "a pass's setup is still running there; wait for it and try again",
           "unreachable": "it could not be reached", "error": "the setup script did not run to its end"
           }.get(word, f"a setup command exited {word.removeprefix('failed ')}")
    others = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    say(f"{machine.name}: setup failed on worker {i}{others}: {why}; fix it and run "
        f"`jobtpu tpu setup {machine.name}` again")
    return 1


def _record(p: WorkerAccess, machine: Machine, incarnation: str, failed: list[tuple[int, str]],
            results: list[tuple[list[str], str]]) -> None:
    """What the passes see: done, or failed for good (a person is on it: passes do not retry it).
    Only for the incarnation the record knows; a pass that meets a new one plans its setup itself."""
    from jobtpu.decide.tpu_outcomes import SETUP_RETRIES

    record = p.state.machine(machine.name)
    if record.incarnation != incarnation:
        return
    if not failed:
        record.setup = Setup(SetupStatus.DONE, incarnation=incarnation)
        record.state, record.detail = MachineState.UP, "ready (setup run by `jobtpu tpu setup`)"
        return
    i = failed[0][0]
    tail = " ".join(results[i][0])[-300:] or failed[0][1]
    record.setup = Setup(SetupStatus.FAILED, tries=SETUP_RETRIES, incarnation=incarnation, error=tail)
    record.state, record.detail = MachineState.SETUP_FAILED, f"worker {i}: {tail[-200:]}"


def why_no_restart(accelerator: str | None, workers: int) -> str | None:
    """Why Google will not stop this node, or None. Pure."""
    found = parse_accelerator(accelerator)
    if found is not None and found.count is not None and not found.can_stop:
        return f"TPU VMs of type {accelerator} cannot be stopped (Google stops v4 and newer only)"
    if workers > 1:
        return f"Google stops single-host TPU nodes only, and this one has {workers} workers"
    return None


def restart(p: WorkerAccess, name: str, say: Callable[[str], None]) -> int:
    """Stop the node, then start it, waiting for each; under the pass lock (the caller's session holds
    it), so no pass meanwhile takes the stopped node for preempted. Its disk is kept: setup is not run
    again."""
    machine = tpu_machine(p, name)
    refuse_if_busy(p, machine.name, False, "a restart would kill {them}", hint="")
    api = tpu_runtime(p).api()
    node = api.get_node(str(machine.zone), str(machine.node))
    if node is None:
        raise JobtpuError(f"{machine.name}: node {machine.node} does not exist in {machine.zone}",
                          hint=f"`jobtpu tpu apply {machine.name}` creates it")
    why = why_no_restart(node.accelerator or machine.accelerator, len(node.addresses(False)))
    if why is not None:
        raise JobtpuError(f"{machine.name}: {why}",
                          hint=f"`jobtpu tpu reapply {machine.name}` deletes and recreates the node instead")
    for step, doing, begin in (("stop", "stopping", api.stop_node), ("start", "starting", api.start_node)):
        say(f"{machine.name}: {doing} node {machine.node} …")
        _wait(api, begin(machine), f"{machine.name}: the {step}")
    after = api.get_node(str(machine.zone), str(machine.node))
    say(f"{machine.name}: node {machine.node} restarted ({after.state if after else 'gone'}); its disk "
        f"was kept, so setup was not run again (`jobtpu tpu setup {machine.name}` reruns it)")
    return 0


def _wait(api: Any, operation: str, what: str) -> None:
    wait = timing.current().restart_wait
    deadline = time.monotonic() + wait
    while True:
        info = api.operation(operation)
        if info.done:
            if info.error_code:
                raise JobtpuError(f"{what} failed: {info.error_message}",
                                  hint="`jobtpu tpu status` shows the node; `jobtpu tpu reapply` recreates it")
            return
        if time.monotonic() > deadline:
            raise JobtpuError(f"{what} has not finished after {wait:.0f}s (operation {operation})",
                              hint="`jobtpu tpu status` shows how the node is; the next pass follows it")
        time.sleep(timing.current().restart_poll)

"""A launch's copies of the job's snapshot: one upload from the home per machine, and per gang of
machines (`submit --slices`: its slices' workers fetch from each other too) (docs/design.md §4.1).

The launch script runs on every worker at once. Those that lack the snapshot (or hold a damaged copy)
get it: when two or more do, the home sends it to one worker only (worker 0 when it holds a copy
already, else the first that lacks it), which serves it once to each of the others over the machine's
internal addresses (peerfile.py: on the address they reach it at only, to a random token that no
argument or file name on a worker holds, for timing's peer_copy_wait at most); each
checks what it fetched against the snapshot's name before the launch unpacks it. A worker whose fetch
fails (refused, timed out, a copy that is not the snapshot) gets the home's copy pushed, and the pass
says so. No key of the home's is ever placed on a worker: the workers fetch from each other over HTTP."""

from __future__ import annotations

import contextlib
import secrets as random_ids
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobtpu import timing
from jobtpu.decide.outcomes import LaunchReport, NoAnswer
from jobtpu.decide.placement import peer_hosts
from jobtpu.decide.workers import LaunchOutcome, LaunchResult, LaunchSpec
from jobtpu.errors import RemoteError, UnreachableError, message_of
from jobtpu.remote.scripts import (
    Served,
    launch_script,
    parse_fetch,
    parse_launch,
    parse_serve,
    peer_fetch_script,
    peer_serve_script,
    peer_stop_script,
)
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.transport.base import Endpoint

if TYPE_CHECKING:
    from jobtpu.passes.context import Pass

ARCHIVE_OUTCOMES = (LaunchOutcome.NEED_ARCHIVE, LaunchOutcome.BAD_ARCHIVE)  # launch outcomes a copy of the home's snapshot may fix
Worker = tuple[Endpoint, LaunchSpec]
Placed = tuple[Machine, Endpoint, LaunchSpec]  # a worker with its machine (a gang's launch spans several)


def launch_workers(p: Pass, machine: Machine, workers: list[Worker]) -> dict[int, LaunchReport]:
    """Launch every worker; copy the snapshot to those that lack it and launch them again."""
    reports = launch_gang_workers(p, [(machine, workers)])
    return {ep.index: reports[spec.ref.worker] for ep, spec in workers}


def launch_gang_workers(p: Pass, slices: list[tuple[Machine, list[Worker]]]) -> dict[int, LaunchReport]:
    """Launch every worker of every machine (a gang's slices: one machine for a one-slice job), each
    report under its worker's index in the job; the snapshot leaves the home once for them all, and
    the workers that lack it fetch it from the one that has it, across the gang's machines too."""
    every = [(machine, ep, spec) for machine, workers in slices for ep, spec in workers]
    reports = dict(p.parallel(lambda w: (w[2].ref.worker, _attempt(p, w[0], w[1], w[2], launch_script([w[2]]))), every))
    lacking = [w for w in every if _lacks(reports[w[2].ref.worker])]
    if not lacking:
        return reports
    problem = p.home_archive_problem(lacking[0][2].archive)
    if problem is not None:
        for _, _, spec in lacking:
            reports[spec.ref.worker] = LaunchResult(spec.ref, LaunchOutcome.FAIL,
                                                    detail=f"the snapshot {spec.archive} in the home {problem}")
        return reports
    if len(lacking) < 2 or not all(_addresses_fit(p, m, w[0][1]) for m, w in slices if w):
        reports.update(p.parallel(lambda w: (w[2].ref.worker, pushed_launch(p, *w)), lacking))
        return reports
    reports.update(_through_a_peer(p, every[0], reports, lacking))
    return reports


class Serving(msgspec.Struct, frozen=True):
    """A worker serving its copy: where the others fetch it, the token they give, and the server's
    name (no secret: the name of its folder on the worker, for stopping it)."""

    worker: int
    url: str
    token: str
    serve_id: str


def _through_a_peer(p: Pass, first: Placed, reports: dict[int, LaunchReport],
                    lacking: list[Placed]) -> dict[int, LaunchReport]:
    """The home's copy to one worker (none when the first worker holds one already), the others' from it."""
    archive = lacking[0][2].archive
    served: Serving | Served = Served(None)
    source, pushed = first, False
    if first not in lacking and isinstance(reports[first[2].ref.worker], LaunchResult):
        served = _serve(p, first[0], first[1], archive, len(lacking))
    if not isinstance(served, Serving):  # the first worker holds no copy it can serve: the first that lacks one gets the home's
        source, lacking = lacking[0], lacking[1:]
        try:
            p.push_archive(source[0], source[1], archive)
        except (RemoteError, OSError) as e:
            out: dict[int, LaunchReport] = {source[2].ref.worker: _no_answer(e)}
            out.update(p.parallel(lambda w: (w[2].ref.worker, pushed_launch(p, *w)), lacking))
            return out
        served, pushed = _serve(p, source[0], source[1], archive, len(lacking)), True

    def one(w: Placed) -> tuple[int, LaunchReport, bool]:  # the source (when pushed to) launches again meanwhile
        if w is source:
            return w[2].ref.worker, _relaunch(p, *w), False
        return (w[2].ref.worker, *_fetch_launch(p, w[0], (w[1], w[2]), source[2].ref.worker, served))

    done = p.parallel(one, [source, *lacking] if pushed else lacking)
    if isinstance(served, Serving) and sum(fetched for *_, fetched in done) < len(lacking):
        _stop(p, source[0], source[1], served.serve_id)  # some peers never fetched: the server need not wait for them
    return {index: report for index, report, _ in done}


def _fetch_launch(p: Pass, machine: Machine, worker: Worker, source: int,
                  served: Serving | Served) -> tuple[LaunchReport, bool]:
    """Fetch from the source and launch, in one round trip; on any failure, the home's copy and a line.
    With whether it fetched from the source's server."""
    ep, spec = worker
    if isinstance(served, Served):
        cause = f"worker {source} could not serve it: {served.why}"
    else:
        wait = timing.current().script_timeout + timing.current().peer_copy_wait
        try:
            out = p.run_on(machine, ep, peer_fetch_script(served.url, served.token, spec), timeout=wait)
        except (RemoteError, OSError) as e:
            return _no_answer(e), False
        fetched, result = parse_fetch(out), parse_launch(out).get(spec.ref)
        if fetched.ok and not _lacks(result):
            return result or NoAnswer("the launch script said nothing of this worker"), not fetched.held
        cause = fetched.why if not fetched.ok else f"its copy was unusable: {result.detail if result else ''}"
    p.copy_notes.append((spec.ref.job, ep.index, f"job {spec.ref.job}: worker {ep.index} could not fetch the "
                         f"snapshot from worker {source} ({cause}); pushed from the home"))
    return pushed_launch(p, machine, ep, spec), False


def _serve(p: Pass, machine: Machine, ep: Endpoint, archive: str, peers: int) -> Serving | Served:
    """Start the worker serving its copy to `peers` fetches: where they fetch it, or why not. It
    listens where the peers reach it and nowhere else (never the wildcard address)."""
    token, serve_id = random_ids.token_hex(16), random_ids.token_hex(8)
    addr = reach_address(p, machine, ep)
    try:
        served = parse_serve(p.run_on(machine, ep, peer_serve_script(machine.root, archive, addr, serve_id, token,
                                                                     peers)))
    except (RemoteError, OSError) as e:
        return Served(None, message_of(e))
    if served.port is None:
        return served
    host = f"[{addr}]" if ":" in addr else addr
    return Serving(ep.index, f"http://{host}:{served.port}/{archive}", token, serve_id)


def _stop(p: Pass, machine: Machine, ep: Endpoint, serve_id: str) -> None:
    with contextlib.suppress(RemoteError, OSError):  # it ends by itself after peer_copy_wait anyway
        p.run_on(machine, ep, peer_stop_script(machine.root, serve_id))


def internal_address(p: Pass, machine: Machine, ep: Endpoint) -> str:
    """The worker's address on the machine's internal network: a TPU's from the API, an ssh box's host."""
    internal = _internal(p, machine)
    return internal[ep.index] if ep.index < len(internal) else (ep.addr or "127.0.0.1")


def reach_address(p: Pass, machine: Machine, ep: Endpoint) -> str:
    """Where the other workers reach it: machines.json's peer_addresses, else its internal address."""
    peers = peer_addresses_of(p, machine, [e.addr or "127.0.0.1" for e in p.endpoints(machine)])
    return peers[ep.index] if ep.index < len(peers) else internal_address(p, machine, ep)


def peer_addresses_of(p: Pass, machine: Machine, reached: Sequence[str]) -> tuple[str, ...]:
    """Where the workers jobtpu reaches at `reached` reach each other (placement.peer_hosts): for the
    snapshot's peer copy and a job's JOBTPU_HOSTS and JOBTPU_COORDINATOR alike."""
    return peer_hosts(reached, _internal(p, machine), machine.peer_addresses)


def _internal(p: Pass, machine: Machine) -> tuple[str, ...]:
    """The workers' addresses on the machine's internal network as its provider knows them (a TPU's
    from the API, its networkEndpoints), in worker order; none for an ssh box."""
    return p.internal_addresses(machine)


def _addresses_fit(p: Pass, machine: Machine, spec: LaunchSpec) -> bool:
    """peer_addresses name one address per worker (checked when loaded for ssh machines; a TPU's
    workers are known only from the API): otherwise every worker gets the home's copy, and a line."""
    workers = len(p.endpoints(machine))
    if not machine.peer_addresses or len(machine.peer_addresses) == workers:
        return True
    p.copy_notes.append((spec.ref.job, -1, f"job {spec.ref.job}: machines.json gives {machine.name} "
                         f"{len(machine.peer_addresses)} peer_addresses for its {workers} workers; the snapshot "
                         "was pushed from the home to each worker that lacked it (fix peer_addresses)"))
    return False


def pushed_launch(p: Pass, machine: Machine, ep: Endpoint, spec: LaunchSpec) -> LaunchReport:
    """The home's copy of the snapshot to the worker, then its launch again."""
    try:
        p.push_archive(machine, ep, spec.archive)
    except (RemoteError, OSError) as e:
        return _no_answer(e)
    return _relaunch(p, machine, ep, spec)


def _relaunch(p: Pass, machine: Machine, ep: Endpoint, spec: LaunchSpec) -> LaunchReport:
    again = _attempt(p, machine, ep, spec, launch_script([spec]))
    if isinstance(again, LaunchResult) and again.outcome in ARCHIVE_OUTCOMES:
        why = again.detail or "it is missing right after the copy"
        return LaunchResult(spec.ref, LaunchOutcome.FAIL, detail=f"the copy of the snapshot on the worker is unusable: {why}")
    return again


def _attempt(p: Pass, machine: Machine, ep: Endpoint, spec: LaunchSpec, script: str) -> LaunchReport:
    try:
        result = parse_launch(p.run_on(machine, ep, script)).get(spec.ref)
    except (RemoteError, OSError) as e:
        return _no_answer(e)
    return result or NoAnswer("the launch script said nothing of this worker")


def _lacks(report: LaunchReport | None) -> bool:
    return isinstance(report, LaunchResult) and report.outcome in ARCHIVE_OUTCOMES


def _no_answer(e: Exception) -> NoAnswer:
    return NoAnswer(message_of(e), unreachable=isinstance(e, UnreachableError))

"""A sweep on a Slurm cluster as ONE job array (docs/reference/machines-json.md §3.3.1). The launches of
a pass that are members of one sweep, one worker each, bound for one Slurm machine, and not resuming
(a resume may first copy its checkpoint: it goes alone) are carried out by one launch script
(sh/slurm_array.sh): each member's env file (its sweep values) and line of one member table, then one
`sbatch --array=0-N%M` (M: the sweep's --max-running, Slurm's throttle) of one shared batch script;
member i reads line i by SLURM_ARRAY_TASK_ID and makes its own claim and job folder on its node. Each
member's report is its launch's, as a lone launch's is (decide/settle.py reads them alike)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobtpu.decide.observation import Launch
from jobtpu.decide.outcomes import LaunchReport, NoAnswer
from jobtpu.decide.settle import LaunchDone
from jobtpu.decide.workers import LaunchOutcome, LaunchResult, LaunchSpec, WorkerRef
from jobtpu.errors import RemoteError, UnreachableError, message_of
from jobtpu.home import fence
from jobtpu.home.specs import records_trusted
from jobtpu.passes.peercopy import ARCHIVE_OUTCOMES, Worker
from jobtpu.remote.scripts import parse_launch
from jobtpu.schema.fleet import Machine
from jobtpu.schema.state import Job, Status
from jobtpu.slurm.scripts import array_launch_script
from jobtpu.transport.base import Endpoint

if TYPE_CHECKING:
    from jobtpu.passes.context import Pass

SpecsOf = Callable[[Job, Machine, list[Endpoint], int], list[Worker]]  # a job's worker specs (act.py's)


def array_groups(p: Pass, ready: list[Launch]) -> tuple[list[list[Launch]], list[Launch]]:
    """The launches that go as job arrays (the members of one sweep on one Slurm machine, one or
    more), and the rest, each launched alone."""
    groups: dict[tuple[str, int, str | None], list[Launch]] = {}
    rest: list[Launch] = []
    jobs = {job.id: job for job in p.state.jobs}  # one look-up each, not a scan of every job per launch
    trusted: bool | None = None  # whether state.json is this account's alone: looked up once, when asked
    for action in ready:
        job, machine = jobs.get(action.job), p.fleet.get(action.machine)
        if (job is None or machine is None or not machine.scheduled or action.gang or action.workers != 1
                or job.sweep is None or job.resume or job.status is not Status.LAUNCHING):
            rest.append(action)
            continue
        if machine.runs_as_this_account:
            trusted = records_trusted(p.home) if trusted is None else trusted
            if not trusted:  # each job's spec checked as it starts, its allowed secrets alone (act.py): alone
                rest.append(action)
                continue
        # One array, one set of sbatch options: members handed after other Slurm jobs (--after) go apart.
        after = job.current.slurm_after if job.current is not None else None
        groups.setdefault((machine.name, job.sweep, after), []).append(action)
    # A lone member goes as an array of one: a handover of its sweep cut short after sbatch answered
    # is found again only by the array path (by the array's name and table), never submitted twice.
    return list(groups.values()), rest


def launch_array(p: Pass, group: list[Launch], specs_of: SpecsOf) -> list[LaunchDone]:
    """Launch a sweep's members as one job array; a member whose snapshot the cluster lacks gets the
    home's copy pushed (once for all), and those members go as a second array."""
    token = fence.check(p.home) or 0  # a runner that lost its lease starts nothing (home-files.md §1.7)
    members: list[tuple[Job, Machine, Endpoint, LaunchSpec]] = []
    jobs = {job.id: job for job in p.state.jobs}
    for action in group:
        job, machine = jobs.get(action.job), p.fleet.get(action.machine)
        if job is None or machine is None:
            continue
        for ep, spec in specs_of(job, machine, p.endpoints(machine)[:1], token):
            members.append((job, machine, ep, spec))
    if not members:
        return []
    _, machine, ep, _ = members[0]
    throttle = members[0][0].max_running
    specs = [spec for _, _, _, spec in members]
    reports = _run(p, machine, ep, specs, throttle)
    lacking = [spec for spec in specs if _lacks(reports.get(spec.ref))]
    if lacking:
        reports.update(_pushed(p, machine, ep, lacking, throttle))
    return [LaunchDone(job.id, machine, {ep.index: reports.get(spec.ref) or NoAnswer(
        "the launch script said nothing of this worker")}) for job, machine, ep, spec in members]


def _pushed(p: Pass, machine: Machine, ep: Endpoint, lacking: list[LaunchSpec],
            throttle: int | None) -> dict[WorkerRef, LaunchReport]:
    out: dict[WorkerRef, LaunchReport] = {}
    for archive in dict.fromkeys(spec.archive for spec in lacking):
        problem = p.home_archive_problem(archive)
        if problem is not None:
            out.update({spec.ref: LaunchResult(spec.ref, LaunchOutcome.FAIL, detail=f"the snapshot {archive} in the home {problem}")
                        for spec in lacking if spec.archive == archive})
            continue
        try:
            p.push_archive(machine, ep, archive)
        except (RemoteError, OSError) as e:
            out.update({spec.ref: _no_answer(e) for spec in lacking if spec.archive == archive})
    again = [spec for spec in lacking if spec.ref not in out]
    if again:
        for ref, report in _run(p, machine, ep, again, throttle).items():
            if _lacks(report):
                why = getattr(report, "detail", "") or "it is missing right after the copy"
                report = LaunchResult(ref, LaunchOutcome.FAIL, detail=f"the copy of the snapshot on the cluster is unusable: {why}")
            out[ref] = report
    return out


def _run(p: Pass, machine: Machine, ep: Endpoint, specs: list[LaunchSpec], throttle: int | None) -> dict[WorkerRef, LaunchReport]:
    try:
        found = parse_launch(p.run_on(machine, ep, array_launch_script(specs, throttle)))
    except (RemoteError, OSError) as e:
        return {spec.ref: _no_answer(e) for spec in specs}
    return {spec.ref: found[spec.ref] for spec in specs if spec.ref in found}


def _lacks(report: LaunchReport | None) -> bool:
    return isinstance(report, LaunchResult) and report.outcome in ARCHIVE_OUTCOMES


def _no_answer(e: Exception) -> NoAnswer:
    return NoAnswer(message_of(e), unreachable=isinstance(e, UnreachableError))

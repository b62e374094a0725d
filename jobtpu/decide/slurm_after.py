"""--after and --after-any on a Slurm cluster (docs/reference/machines-json.md §3.3.1). A job whose
dependencies all run handed to ONE Slurm cluster is handed there at once with sbatch's
--dependency (afterok for --after, afterany for --after-any): Slurm starts it the moment they end,
without waiting for a pass. Otherwise it waits in jobtpu, as on every machine. Pure.

jobtpu's rule stays the judge (docs/reference/commands.md §2.2.4): while the dependent pends in
Slurm, a pass checks the Slurm jobs it was handed after still are its dependencies' attempts. When
one is not (the dependency was requeued or preempted and resumes as a new attempt with a new Slurm
id, or was retried), the dependent is handed back to waiting in jobtpu: its Slurm job is cancelled
(it never ran) and a later pass hands it again after the new id, or keeps it waiting. It is not
moved onto the new id with `scontrol update`: the new attempt may go to another machine or wait in
jobtpu with no Slurm id at all, and the old id may already have released it in Slurm; handing back
is right in every case, and costs nothing but a Slurm job that never ran.

Slurm's afterany is about one Slurm job, jobtpu's --after-any about the job: it waits until the job
ended, however it ended, and an attempt its rule or --retries follows with another is no such end.
Slurm starts an afterany dependent the moment the Slurm job ends, before any pass could hand it
back, so an --after-any dependency is handed to Slurm only while its running attempt is its last
(`last_attempt`); otherwise the dependent waits in jobtpu for the job's own end."""

from __future__ import annotations

from collections.abc import Mapping

from jobtpu.decide.observation import rule_of
from jobtpu.schema.fleet import Fleet
from jobtpu.schema.state import Job, Status

HANDED_BACK = "handed back"  # the verdict on a dependent whose Slurm dependency no longer holds
NEVER = "DependencyNeverSatisfied"  # Slurm's pending reason when a job it waits for ended otherwise


def _satisfied(dep: Job, ok: bool) -> bool:
    """Whether jobtpu's rule lets the dependent go as far as `dep` is concerned."""
    return dep.ended and (dep.status is Status.FINISHED or not ok)


def last_attempt(dep: Job, fleet: Fleet) -> bool:
    """Whether no attempt of `dep` can follow the running one, however it ends: its rule recovers
    nothing (`pass`, or each budget a recovery spends is used up) and no --retries are left."""
    rule = rule_of(dep, fleet.get(dep.machine) if dep.machine else None)
    recovers = rule != "pass" and any(limit is None or used < limit for used, limit in (
        (dep.recoveries, dep.max_recoveries), (dep.preemptions, dep.max_preemptions)))
    return not recovers and dep.retried >= dep.retries


def _handed_id(dep: Job, fleet: Fleet, stopping: bool = False) -> tuple[str, str] | None:
    """(machine, Slurm job id) of a dependency whose attempt runs handed to a Slurm cluster (or, with
    `stopping`, is being stopped there: its Slurm job ends, and Slurm judges that end)."""
    attempt = dep.current
    statuses = (Status.RUNNING, Status.KILLING) if stopping else (Status.RUNNING,)
    if dep.status not in statuses or attempt is None or attempt.slurm_job is None or dep.gang:
        return None
    machine = fleet.get(dep.machine) if dep.machine else None
    if machine is None or not machine.scheduled:
        return None
    return machine.name, str(attempt.slurm_job)


def _kinds(job: Job) -> list[tuple[int, bool]]:
    """Each dependency once, with whether it must finish (--after wins over --after-any)."""
    return [(i, True) for i in dict.fromkeys(job.after)] + [
        (i, False) for i in dict.fromkeys(job.after_any) if i not in job.after]


def handover(job: Job, by_id: Mapping[int, Job], fleet: Fleet) -> tuple[str, str] | None:
    """(machine, sbatch's --dependency value) when every dependency the job still waits for runs
    handed to that one Slurm cluster: "afterok:12:13_4", "afterok:12,afterany:14". None when it must
    wait in jobtpu (a dependency elsewhere, not yet handed, an --after-any one whose running attempt
    another may follow, or none left to wait for)."""
    machine: str | None = None
    ok: list[str] = []
    any_: list[str] = []
    for dep_id, must_finish in _kinds(job):
        dep = by_id.get(dep_id)
        if dep is None or _satisfied(dep, must_finish):
            continue
        handed = _handed_id(dep, fleet)
        if handed is None or machine not in (None, handed[0]) or not (must_finish or last_attempt(dep, fleet)):
            return None
        machine = handed[0]
        (ok if must_finish else any_).append(handed[1])
    if machine is None:
        return None
    parts = [f"{kind}:{':'.join(ids)}" for kind, ids in (("afterok", ok), ("afterany", any_)) if ids]
    return machine, ",".join(parts)


def handed_ids(dependency: str) -> set[str]:
    """The Slurm job ids a --dependency value names."""
    return {i for part in dependency.split(",") for i in part.split(":")[1:]}


def still_holds(job: Job, dependency: str, waiting: str | None, by_id: Mapping[int, Job], fleet: Fleet) -> bool:
    """Whether a dependent pending in Slurm after `dependency` may stay so: each dependency it still
    waits for runs as one of the Slurm jobs it was handed after, and Slurm has not said one of those
    ended otherwise while jobtpu's rule would still let it go (a dependency finished, or ended under
    --after-any, by an attempt with another Slurm id). A dependency that failed is not judged here:
    jobtpu's rule fails the dependent (rules.failed_dependency)."""
    ids = handed_ids(dependency)
    for dep_id, must_finish in _kinds(job):
        dep = by_id.get(dep_id)
        if dep is None or _satisfied(dep, must_finish):
            continue
        handed = _handed_id(dep, fleet, stopping=True)
        if handed is None or handed[1] not in ids:
            return False
    return waiting != NEVER

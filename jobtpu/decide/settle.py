"""The settle step of a pass: what the plain reports of its acts mean for the jobs and machines.

Acting (passes/act.py) carries out launches and stops and hands back only what happened: a launch its
machine's setup held back, each worker's launch report, whether a stop's workers are all gone. This
step alone says what they mean, through decide/outcomes.py's pure functions (`goes_ahead`,
`launched`, `killed`) and, for a stop whose rule brings its TPU back, `want_back`, as values: the new
records of the jobs and machines, each status move with its cause (`Settled`), which the caller
applies; what it is given it leaves as it is. The same step settles `jobtpu kill`'s stops outside a
pass. No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jobtpu.decide.observation import Kill, Launch, Plan
from jobtpu.decide.outcomes import LaunchReport, goes_ahead, killed, launched, setup_done
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import MachineRecord
from jobtpu.schema.state import Job, State, Transition


class LaunchHeld(msgspec.Struct, frozen=True):
    """A launch not tried: the setup this pass ran on its machine left it `setup` ("setting up",
    "setup failed"), so nothing started."""

    job: int
    machine: str
    setup: str


def held_by_setup(action: Launch, setups: Mapping[str, str | None]) -> LaunchHeld | None:
    """The launch held back by the setup this pass ran on one of its machines (`setups`: a machine's
    state after it, outcomes.setup_done), or None. A gang's is held by any of its slices': started
    on the others alone it could never run."""
    for name in action.gang or (action.machine,):
        setup = setups.get(name)
        if not setup_done(setup):
            return LaunchHeld(action.job, name, str(setup))
    return None


class LaunchDone(msgspec.Struct, frozen=True):
    """A launch carried out: each worker's report, undecided (a local-spec refusal is a report too)."""

    job: int
    machine: Machine
    reports: dict[int, LaunchReport]


class StopDone(msgspec.Struct, frozen=True):
    """A stop carried out: whether every worker of the job is gone."""

    job: int
    machine: Machine
    all_gone: bool


ActReport = LaunchHeld | LaunchDone | StopDone


class Settled(msgspec.Struct):
    """What settling reports changes, as values: it changes nothing it is given. `jobs` holds the
    new record of each job it changed, every status move with its cause (`jobs.moves`), and the
    Kills a launch that half failed needs (`jobs.actions`); `machines` the new record of each
    machine asked back. The caller applies them (`apply_to`)."""

    jobs: Plan = msgspec.field(default_factory=Plan)
    machines: dict[str, MachineRecord] = msgspec.field(default_factory=dict)

    @property
    def moves(self) -> list[Transition]:
        return self.jobs.moves

    @property
    def kills(self) -> list[Kill]:
        return [action for action in self.jobs.actions if isinstance(action, Kill)]

    def apply_to(self, state: State) -> None:
        """Carry the settled records into `state`, each into the record it replaces (those holding
        one, such as the machine work of the pass, see it changed)."""
        self.jobs.apply_to(state.jobs)
        for name, new in self.machines.items():
            record = state.machine(name)
            for field in MachineRecord.__struct_fields__:
                setattr(record, field, getattr(new, field))


def settle(state: State, reports: Sequence[ActReport], now: float) -> Settled:
    """What each report means for its job (and machine), read in the order given, each against what
    the ones before it settled; among them the Kills a launch that half failed needs: its started
    workers, to be stopped in the same pass before it ends launch_failed. `state` stays as given."""
    settled = Settled()
    jobs = {job.id: job for job in state.jobs}  # one look-up per report, not a scan of every job (a sweep's thousand)
    for report in reports:
        settled.jobs.actions.extend(settle_one(state, report, now, settled, jobs))
    settled.jobs.drop_unchanged(jobs)
    return settled


def settle_one(state: State, report: ActReport, now: float, settled: Settled, jobs: dict[int, Job]) -> list[Kill]:
    """What one report means, added to `settled`; a job gone from state.json meanwhile has nothing to move."""
    job = jobs.get(report.job)
    if job is None:
        return []
    if isinstance(report, LaunchHeld):
        goes_ahead(job, report.machine, report.setup, settled.jobs)  # held back: queued again, waiting for that setup
        return []
    if isinstance(report, LaunchDone):
        return launched(job, report.machine, report.reports, now, settled.jobs)
    recreate = killed(job, report.machine.name, report.all_gone, now, settled.jobs)
    if recreate is not None and report.machine.cloud_node:
        name = recreate.machine  # the next pass plans that step and saves it first
        new = want_back(settled.machines.get(name) or state.machines.get(name) or MachineRecord())
        if new is not None:
            settled.machines[name] = new
    return []


def want_back(record: MachineRecord) -> MachineRecord | None:
    """After a stop whose rule recreates the TPU: the machine's new record, which the next pass plans
    (and saves) the first step of; None when it is already asked back or being recreated."""
    if record.want_recreate or record.operation:
        return None
    return msgspec.structs.replace(record, want_recreate=True)

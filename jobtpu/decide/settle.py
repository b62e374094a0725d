"""The settle step of a pass: what the plain reports of its acts mean for the jobs and machines.

Acting (passes/act.py) carries out launches and stops and hands back only what happened: a launch its
machine's setup held back, each worker's launch report, whether a stop's workers are all gone. This
step alone applies what they mean, through decide/outcomes.py's pure functions (`goes_ahead`,
`launched`, `killed`) and, for a stop whose rule brings its TPU back, `want_back`. The same
step settles `jobtpu kill`'s stops outside a pass. No I/O."""

from __future__ import annotations

from collections.abc import Sequence

from jobtpu.decide.observation import Kill
from jobtpu.decide.outcomes import LaunchReport, goes_ahead, killed, launched
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import MachineRecord
from jobtpu.schema.state import State, Transition


class LaunchHeld(msgspec.Struct, frozen=True):
    """A launch not tried: the setup this pass ran on its machine left it `setup` ("setting up",
    "setup failed"), so nothing started."""

    job: int
    machine: str
    setup: str


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


def settle(state: State, reports: Sequence[ActReport], now: float,
           moves: list[Transition] | None = None) -> list[Kill]:
    """Apply each report to its job (and machine), in the order given; the Kills a launch that half
    failed needs: its started workers, to be stopped in the same pass before it ends launch_failed.
    Every status change made is added to `moves`, in order."""
    moved: list[Transition] = moves if moves is not None else []
    kills = [settle_one(state, report, now, moved) for report in reports]
    return [kill for kill in kills if kill is not None]


def settle_one(state: State, report: ActReport, now: float, moves: list[Transition]) -> Kill | None:
    """What one report means; a job gone from state.json meanwhile has nothing to move."""
    job = state.job(report.job)
    if job is None:
        return None
    if isinstance(report, LaunchHeld):
        goes_ahead(job, report.machine, report.setup, moves)  # held back: queued again, waiting for that setup
        return None
    if isinstance(report, LaunchDone):
        return launched(job, report.machine, report.reports, now, moves)
    recreate = killed(job, report.machine.name, report.all_gone, now, moves)
    if recreate is not None and report.machine.cloud_node:
        want_back(state.machine(recreate.machine))  # the next pass plans that step and saves it first
    return None


def want_back(record: MachineRecord) -> None:
    """After a stop whose rule recreates the TPU: the next pass plans (and saves) the first step."""
    if not (record.want_recreate or record.operation):
        record.want_recreate = True

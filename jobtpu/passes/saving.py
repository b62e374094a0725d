"""Which attempts saved a checkpoint, from what a pass's probes brought home (docs/reference/job-environment.md
§8.2.1): a pass hook that records each attempt's last save (Attempt.saved) before the pass decides, so
that an attempt that saved and then ended in the same pass is resumed from (decide/saving.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobtpu.decide.saving import unsaved_rerun
from jobtpu.fleet.drivers import driver_for
from jobtpu.home.logfiles import log_rel
from jobtpu.passes.progress import new_lines
from jobtpu.render.text import printable
from jobtpu.schema.records import MachineRecord
from jobtpu.schema.resume_policy import region_of
from jobtpu.schema.saving import Saved
from jobtpu.schema.state import Cause

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from jobtpu.decide.observation import Observation
    from jobtpu.decide.workers import WorkerState
    from jobtpu.home.store import Encoded
    from jobtpu.passes.session import Session
    from jobtpu.schema.state import Job, Transition

# A pattern as RE2 compiled it, or why it cannot: a cache of pure results, shared by every pass.
_PATTERNS: dict[str, Any] = {}


class SavingHook:
    """Records the saves a pass's probes show (one line per --saved-when pattern it had to ignore);
    after the pass, one line per job a recovery reruns from scratch because no attempt of it saved."""

    def __init__(self) -> None:
        self.reruns: list[str] = []

    def before_decide(self, p: Session, seen: Observation) -> list[str]:
        ignored: list[str] = []
        track_saves(p, seen, ignored)
        return ignored

    def before_intents(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        return None

    def before_result(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        self.reruns = unsaved_reruns(p.state.jobs, moves)
        return None

    def after_pass(self, p: Session, seen: Observation) -> list[str]:
        return self.reruns


def unsaved_reruns(jobs: Sequence[Job], moves: Sequence[Transition]) -> list[str]:
    """The pass's note for each job a recovery queued to rerun from scratch, no attempt having saved
    (decide/saving.py): its event says so too (passes/changes.py)."""
    recovered = {m.job for m in moves if m.cause is Cause.RECOVER}
    return [f"job {job.id}: no attempt saved a checkpoint: attempt {job.attempt} reruns from scratch"
            for job in jobs if job.id in recovered and unsaved_rerun(job)]


def track_saves(p: Session, seen: Observation, ignored: list[str]) -> None:
    """For each attempt of a job that says how a save shows: whether its worker 0 saved, by the marker
    the probe found or a line of its log this pass brought home."""
    by_id = {job.id: job for job in p.state.jobs if job.saving is not None}
    for name, view in seen.machines.items():
        for ref, ws in view.workers.items():
            job = by_id.get(ref.job)
            if job is None or ref.worker != 0:
                continue
            attempt = next((a for a in job.attempts if a.n == ref.attempt), None)
            at = _saved_at(p, job, ws, seen.now, ignored) if attempt is not None else None
            if attempt is None or at is None:
                continue
            machine = p.fleet.get(name)
            zone = driver_for(machine).zone_and_node(machine, p.state.machines.get(name) or MachineRecord())[0] \
                if machine is not None else ""
            attempt.saved = Saved(at=round(at, 3), region=region_of(zone))


def _saved_at(p: Session, job: Job, ws: WorkerState, now: float, ignored: list[str]) -> float | None:
    """When worker 0 last saved as this pass sees it: the marker's time, or now for a line matching
    --saved-when among those the pass brought home; None when neither shows a new save."""
    if ws.saved_at is not None:  # only a job with a --saved-marker is asked for one
        return ws.saved_at
    pattern = _pattern(job, ignored) if ws.log_bytes else None
    if pattern is not None:
        lines = new_lines(p.home.root, log_rel(job.id, ws.ref.attempt, 0), ws.log_offset)
        if any(pattern.search(line[:4096]) for line in lines):
            return now
    return None


def _pattern(job: Job, ignored: list[str]) -> Any:
    """The job's --saved-when compiled by RE2; None (and one line in `ignored`) for a pattern
    checked at submit but edited in by hand since: it is ignored, never run by Python's `re`."""
    from jobtpu.decide.progress import compile_pattern

    text = job.saving.when if job.saving is not None else None
    if text is None:
        return None
    if text not in _PATTERNS:
        try:
            _PATTERNS[text] = compile_pattern(text, "--saved-when")
        except ValueError as e:
            _PATTERNS[text] = str(e)
    found = _PATTERNS[text]
    if isinstance(found, str):
        ignored.append(printable(f"job {job.id}: its --saved-when pattern is ignored: {found}"[:300]))
        return None
    return found

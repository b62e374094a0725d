"""Each attempt's progress and last sign of life, from what a pass's probes brought home (for
`jobtpu report`): a pass hook that records them in the result the pass saves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError
from jobtpu.home.logfiles import log_rel, read_from
from jobtpu.render.text import printable
from jobtpu.schema.state import Job

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobtpu.decide.observation import Observation
    from jobtpu.decide.progress import ProgressPattern
    from jobtpu.home.store import Encoded
    from jobtpu.passes.session import Session
    from jobtpu.schema.state import Transition

# A pattern as compiled, or why RE2 cannot take it: a cache of pure results, shared by every pass.
_REGEXES: dict[str, ProgressPattern | str] = {}


class ProgressHook:
    """Records progress in the state the pass is about to save as its result; after the pass, one
    line per --progress pattern it had to ignore."""

    def __init__(self) -> None:
        self.ignored: list[str] = []

    def before_decide(self, p: Session, seen: Observation) -> list[str]:
        return []

    def before_intents(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        return None

    def before_result(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        track_progress(p, seen, self.ignored)
        return None

    def after_pass(self, p: Session, seen: Observation) -> list[str]:
        return self.ignored


def _regex(job: Job, ignored: list[str]) -> ProgressPattern | None:
    """The job's --progress pattern compiled by RE2; None (and one line in `ignored`) for a pattern
    checked at submit but edited in by hand since: it is ignored, never run by Python's `re`."""
    from jobtpu.decide.progress import compile_progress

    text = job.progress
    if text is None:
        return None
    if text not in _REGEXES:
        try:
            _REGEXES[text] = compile_progress(text)
        except ValueError as e:
            _REGEXES[text] = str(e)
    found = _REGEXES[text]
    if isinstance(found, str):
        line = printable(f"job {job.id}: its progress pattern is ignored: {found}"[:300])
        if line not in ignored:
            ignored.append(line)
        return None
    return found


def track_progress(p: Session, seen: Observation, ignored: list[str]) -> None:
    """For each attempt a probe saw: when it was last alive, and the progress its worker 0 reported
    in the log lines this pass brought home (JOBTPU_PROGRESS, or the job's --progress regex)."""
    from jobtpu.decide.progress import Progress, scan

    by_id = {job.id: job for job in p.state.jobs}
    for view in seen.machines.values():
        for ref, ws in view.workers.items():
            job = by_id.get(ref.job)
            attempt = next((a for a in job.attempts if a.n == ref.attempt), None) if job else None
            if job is None or attempt is None:
                continue
            if ws.alive and not ws.waiting and attempt.ended is None:  # a job Slurm holds pending runs not
                attempt.last_alive = seen.now
            if ref.worker != 0 or not ws.log_bytes:
                continue
            lines = new_lines(p.home.root, log_rel(ref.job, ref.attempt, 0), ws.log_offset)
            record = Progress.from_json(attempt.progress)
            updated = scan(lines, seen.now, _regex(job, ignored), record)
            if updated != record:
                attempt.progress = updated.to_json()


LINE_LIMIT = 1 << 16  # a progress line is short: a longer unfinished line is not looked back into


def new_lines(root: Path, rel: PurePath, offset: int) -> list[str]:
    """The complete lines of the log from the line that held byte `offset` (unfinished then, so not
    read by the last pass) to the last newline: each complete line is read exactly once. Read through
    safefs (docs/design.md §2): a link or FIFO there yields nothing (the pull fails that job)."""
    start = max(0, offset - LINE_LIMIT)
    try:
        data = read_from(root, rel, start, limit=1 << 30)
    except (OSError, JobtpuError):
        return []
    head = data[: offset - start]
    cut = head.rfind(b"\n") + 1 if start == 0 or b"\n" in head else len(head)
    body = data[cut:]
    end = body.rfind(b"\n")
    return body[:end].decode(errors="replace").splitlines() if end >= 0 else []

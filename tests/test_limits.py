"""Limits a hostile or careless teammate cannot push past (docs/reference.md "Limits"): progress
patterns matched in linear time, caps on what a submit stores, `--after` cycles, sheet cells."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import jobtpu, make_home, submit, wait_for, write_tree

SLOW = r"(?:a+)+(\d+)$"  # exponential for a backtracking engine on a line of a's without a digit


def _attempt_progress(home: Path, job_id: int) -> dict[str, float] | None:
    state = json.loads((home / "state.json").read_text())
    job = next(j for j in state["jobs"] if j["id"] == job_id)
    return job["attempts"][-1].get("progress") if job.get("attempts") else None


def test_a_catastrophic_progress_pattern_costs_the_pass_nothing(tmp_path: Path) -> None:
    """A pattern a backtracking engine takes hours over on a 40-character line: RE2 matches it in
    linear time, so each pass ends well within its bound, and the same pattern still finds steps."""
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"job.sh": "echo " + "a" * 40 + "\necho aaa12\nsleep 10\n"})
    job_id = submit(home, src, "sh job.sh", "--progress", SLOW)

    def stepped() -> bool:
        started = time.monotonic()
        jobtpu(home, "manage", timeout=30)
        assert time.monotonic() - started < 20, "a pass took too long"
        found = _attempt_progress(home, job_id)
        return bool(found and found.get("step") == 12)

    wait_for(stepped, timeout=60, interval=0.2, what="the pass to read step 12")
    jobtpu(home, "kill", str(job_id))
    jobtpu(home, "manage", timeout=30)


@pytest.mark.fast
@pytest.mark.parametrize("pattern", [r"(a+)\1(\d+)", r"(?=step)step (\d+)", r"(?<!x)step (\d+)"])
def test_a_pattern_re2_cannot_take_is_refused_at_submit(tmp_path: Path, pattern: str) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"a.txt": "x"})
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--progress", pattern, check=False)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "RE2" in lines[0] and "backreference" in lines[0], done.stderr
    assert len(lines) <= 2 and "Traceback" not in done.stderr, done.stderr
    assert not (home / "state.json").exists() or "jobs\": []" in (home / "state.json").read_text()


def test_a_hand_edited_pattern_re2_cannot_take_is_ignored_with_one_line(tmp_path: Path) -> None:
    """A pattern edited into state.json after submit is never run by Python's `re`: the pass says
    so in one line and goes on."""
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"job.sh": "echo " + "a" * 40 + "\nsleep 10\n"})
    job_id = submit(home, src, "sh job.sh", "--progress", r"step (\d+)")
    state_file = home / "state.json"
    state = json.loads(state_file.read_text())
    for job in state["jobs"]:
        if job["id"] == job_id:
            job["progress"] = r"(?:a+)+(\d+)\1$"
    state_file.write_text(json.dumps(state))

    def said() -> str | None:
        done = jobtpu(home, "manage", timeout=30)
        return done.stderr if "progress pattern is ignored" in done.stderr else None

    err = wait_for(said, timeout=60, interval=0.2, what="the pass to ignore the pattern")
    assert "Traceback" not in err
    assert sum("progress pattern is ignored" in line for line in err.splitlines()) == 1
    jobtpu(home, "kill", str(job_id))
    jobtpu(home, "manage", timeout=30)

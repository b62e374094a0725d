"""Every product wait in one object (jobtpu/timing.py), shortened through one variable,
$JOBTPU_TIMING (docs/design.md, "Timing"); the documented $JOBTPU_LOCK_WAIT keeps working."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobtpu import timing
from jobtpu.errors import JobtpuError
from tests.helpers import jobtpu, make_home, wait_for

pytestmark = pytest.mark.fast


def test_a_shortened_pass_interval_makes_status_say_stale_within_a_second(tmp_path: Path) -> None:
    """The wait `status` allows a pass from cron (3 × 60 s) is the timing object's, so a test need not
    sleep out three minutes to see the STALE line."""
    home = make_home(tmp_path)
    jobtpu(home, "manage")
    quick = timing.env(default_interval=0.1)

    def said(env: dict[str, str]) -> str:
        done = jobtpu(home, "status", env={**env, "COLUMNS": "400"})
        return done.stdout + done.stderr

    fresh = said({"JOBTPU_TIMING": json.dumps({"default_interval": 3600})})
    assert "STALE" not in fresh, fresh
    stale = wait_for(lambda: "STALE: last pass" in (out := said(quick)) and out,
                     timeout=15, interval=0.2, what="status to call the last pass stale")
    assert "passes should run every 0.1 s" in stale, stale


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("JOBTPU_TIMING", "nope", "$JOBTPU_TIMING is not JSON"),
    ("JOBTPU_TIMING", "[0.5]", "$JOBTPU_TIMING must be a JSON object of seconds"),
    ("JOBTPU_TIMING", '{"lock_weight": 1}', "$JOBTPU_TIMING: no wait named 'lock_weight'; known: lock_wait,"),
    ("JOBTPU_TIMING", '{"lock_wait": -1}', "$JOBTPU_TIMING lock_wait: -1 is not a number of seconds"),
    ("JOBTPU_LOCK_WAIT", "soon", "$JOBTPU_LOCK_WAIT: 'soon' is not a number of seconds"),
])
def test_a_bad_timing_variable_is_one_line_and_changes_nothing(tmp_path: Path, variable: str, value: str,
                                                                said: str) -> None:
    home = make_home(tmp_path)
    before = sorted(p.name for p in home.iterdir())
    done = jobtpu(home, "submit", "--dir", str(tmp_path), "--cmd", "true", check=False, env={variable: value})
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in home.iterdir()) == before  # nothing submitted, no state.json made


def test_documented_variables_still_set_their_wait_and_win_over_the_object() -> None:
    assert timing.parse(None, {}) == timing.DEFAULTS
    got = timing.parse('{"lock_wait": 9, "setup_wait": 0.5}', {"JOBTPU_LOCK_WAIT": "0.25", "JOBTPU_STOP_POLL": "0.2"})
    assert (got.lock_wait, got.setup_wait, got.stop_poll) == (0.25, 0.5, 0.2)
    assert got.grace == timing.DEFAULTS.grace
    with pytest.raises(JobtpuError, match="no wait named"):
        timing.env(nothing=1)

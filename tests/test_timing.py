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


def test_a_quick_loop_that_stops_beside_a_slower_one_is_not_late() -> None:
    """docs/reference/state-json.md §4.1: `watch` (5 s) stops while `manage --loop 60` goes on: the
    60 s loop's gaps are not late; once that loop too is silent for three of its intervals, they are."""
    from jobtpu.commands.freshness import freshness
    from jobtpu.schema.state import recorded

    loop = recorded(None, 1000.0, 0.5, 60.0, 3, 60.0)
    watch = recorded(loop, 1030.0, 0.2, 5.0, 3, 60.0)
    watch = recorded(watch, 1035.0, 0.2, 5.0, 3, 60.0)
    assert (watch.every, watch.slowest, watch.slowest_at) == (5.0, 60.0, 1000.0)
    assert freshness(watch, 1035 + 50)[1] is False  # watch quit 50 s ago; the loop passes within 60 s
    assert freshness(watch, 1000 + 181)[1] is True  # nothing from the loop either for 3 × 60 s
    again = recorded(watch, 1060.0, 0.5, 60.0, 3, 60.0)
    assert (again.every, again.slowest, again.slowest_at) == (60.0, None, None)
    # A slow source long gone is forgotten: a 5 s loop alone is late after 15 s.
    alone = recorded(recorded(loop, 1200.0, 0.2, 5.0, 3, 60.0), 1205.0, 0.2, 5.0, 3, 60.0)
    assert (alone.slowest, alone.slowest_at) == (None, None)
    assert freshness(alone, 1205 + 16)[1] is True
    # Cron (no interval: 60 s assumed) beside a 5 s watch: the same.
    cron = recorded(None, 2000.0, 0.3, None, 3, 60.0)
    assert freshness(recorded(cron, 2010.0, 0.2, 5.0, 3, 60.0), 2010 + 40)[1] is False


def test_status_after_a_quick_loop_stops_beside_a_slower_one_is_not_stale(tmp_path: Path) -> None:
    """Through the CLI: passes of a 60 s source, then of a 0.2 s one that stops. A home with only the
    quick source's pass turns STALE; the one where the 60 s source still passes does not."""
    both, quick_only = make_home(tmp_path / "both"), make_home(tmp_path / "quick")
    jobtpu(both, "manage", "--every", "60")
    for home in (both, quick_only):
        jobtpu(home, "manage", "--every", "0.2")
    wait_for(lambda: "STALE: last pass" in jobtpu(quick_only, "status").stderr, timeout=30, interval=0.1,
             what="the quick source alone to read as late")
    assert "STALE" not in jobtpu(both, "status").stderr
    assert "passes: ok: the last pass ended" in jobtpu(both, "doctor").stderr

"""`report --usage` (docs/reference/commands.md §2.26): chip- and GPU-hours used and lost to preemption,
by user and by machine, over a period."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobtpu.decide.goodput import AttemptRecord, job_report
from jobtpu.views.usage import render_usage, usage
from tests.helpers import jobtpu, make_home, manage_until, submit, write_tree

pytestmark = pytest.mark.fast
H = 3600.0


def test_used_is_time_in_the_period_times_what_was_held_and_lost_is_the_preempted_work() -> None:
    # alice: 2 h on a v3-32 (16 chips), preempted, then 1 h more; bob: 1 h of 2 GPUs on a box.
    alice = job_report(1, "", [AttemptRecord(0, "v3-32-p1", 0.0, 2 * H, "preempted", chips=16),
                               AttemptRecord(1, "v3-32-p1", 2.5 * H, 3.5 * H, "finished", chips=16, resume=True)],
                       [], {}, 4 * H)
    bob = job_report(2, "", [AttemptRecord(0, "box", 1 * H, 2 * H, "finished", chips=2, unit="GPU")], [], {}, 4 * H)
    by_user, by_machine = usage([("alice", alice), ("bob", bob)], since=0.0, now=4 * H)
    assert by_user["alice"].used == {"chip": 3 * 16 * H} and by_user["alice"].lost == {"chip": 2 * 16 * H}
    assert by_user["alice"].whole_attempts  # it resumed, with no progress reported: the attempt counts whole
    rerun = job_report(3, "", [AttemptRecord(0, "v3-32-p1", 0.0, 2 * H, "preempted", chips=16),
                               AttemptRecord(1, "v3-32-p1", 2.5 * H, 3.5 * H, "finished", chips=16)], [], {}, 4 * H)
    again, _ = usage([("carol", rerun)], since=0.0, now=4 * H)
    assert again["carol"].lost == {"chip": 1 * 16 * H} and not again["carol"].whole_attempts  # a rerun redid 1 h
    assert by_user["bob"].used == {"GPU": 2 * H} and by_user["bob"].lost == {"GPU": 0.0}
    assert by_machine["v3-32-p1"].used == {"chip": 48 * H} and by_machine["box"].used == {"GPU": 2 * H}
    # From 3 h on only alice's last half hour counts, and no loss: the preemption came before.
    by_user, _ = usage([("alice", alice), ("bob", bob)], since=3 * H, now=4 * H)
    assert by_user["alice"].used == {"chip": 0.5 * 16 * H} and by_user["alice"].lost == {"chip": 0.0}
    assert by_user["bob"].used == {"GPU": 0.0}
    text = render_usage(*usage([("alice", alice), ("bob", bob)], 0.0, 4 * H), "since the start")
    assert text.splitlines()[2:5] == ["user   chip-h used  chip-h lost  GPU-h used  GPU-h lost",
                                      "alice         48.0         32.0         0.0         0.0",
                                      "bob            0.0          0.0         2.0         0.0"], text


def test_report_usage_lists_every_users_jobs_by_user_and_by_machine(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"box": {"kind": "local", "resources": {"gpu": 4}}})
    src = write_tree(tmp_path / "src", {"a.sh": "true\n"})
    first = submit(home, src, "sleep 0.2", "--req", "gpu=2")
    manage_until(home, [first], {"finished"})
    shown = jobtpu(home, "report", "--usage", "--since", "1d").stdout.splitlines()
    assert shown[0].startswith("accelerator use since ") and shown[2].split()[0] == "user"
    assert shown[3].split()[0] == "tester" and float(shown[3].split()[3]) >= 0.0
    assert [line.split()[0] for line in shown[5:7]] == ["machine", "box"], shown
    done = jobtpu(home, "report", "--since", "1d", check=False)
    assert done.returncode == 1 and done.stderr.splitlines()[0] == "jobtpu: error: --since goes with --usage"
    assert json.loads(jobtpu(home, "status", "--json").stdout)["jobs"][0]["status"] == "finished"

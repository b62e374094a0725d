"""`jobtpu metrics`' counters (docs/reference/commands.md §2.30): jobs ended by outcome and
preemptions, from the events, only ever growing (so Prometheus' rate() reads them): not when `clean`
moves the jobs to history, not when the event log rotates and drops its oldest file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import jobtpu, make_home, manage_until, submit

pytestmark = pytest.mark.fast


def counters(text: str) -> dict[tuple[str, ...], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, *(v for _, v in sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name.endswith("_total")}


def test_ended_jobs_are_counted_by_outcome_and_clean_takes_nothing_away(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    ok = submit(home, tmp_path, "true", in_process=False)
    bad = submit(home, tmp_path, "false", in_process=False)
    held = submit(home, tmp_path, "true", "--hold", in_process=False)
    manage_until(home, [ok, bad], {"finished", "failed"}, timeout=120)
    jobtpu(home, "kill", str(held))
    before = counters(jobtpu(home, "metrics").stdout)
    assert before == {("jobtpu_jobs_ended_total", "failed", "tester"): 1,
                      ("jobtpu_jobs_ended_total", "finished", "tester"): 1,
                      ("jobtpu_jobs_ended_total", "killed", "tester"): 1,
                      ("jobtpu_preemptions_total", "local"): 0}
    jobtpu(home, "clean")
    assert jobtpu(home, "status", "--json").stdout.count('"id"') == 0  # all three are in history now
    assert counters(jobtpu(home, "metrics").stdout) == before


def test_the_counters_never_go_down_when_the_log_drops_its_oldest_file(tmp_path: Path) -> None:
    from jobtpu.commands.metrics import metrics_text
    from jobtpu.decide import events as ev
    from jobtpu.decide.events import Event
    from jobtpu.home.layout import Home
    from jobtpu.home.store import Store
    from jobtpu.passes.tell import with_ids
    from jobtpu.tell import eventlog

    home = make_home(tmp_path)
    seen: list[dict[tuple[str, ...], float]] = []
    for i in range(60):  # a small log (2 KiB, one rotated file kept) drops files many times over
        batch = [Event(1000.0 + i, ev.JOB_ENDED, job=i, user="ann", detail={"status": "failed" if i % 3 else "finished"}),
                 Event(1000.0 + i, ev.PREEMPTED, job=i, machine="local", user="ann")]
        eventlog.append(home, with_ids(batch), max_bytes=2048, keep=1)  # ids, as a pass gives them
        seen.append(counters(metrics_text(Home(home), Store(Home(home)).load(), now=2000.0)))
    assert eventlog.rotated_path(home, 2).exists() is False and len(eventlog.read(home)) < 60
    for earlier, later in zip(seen, seen[1:], strict=False):
        assert all(later[key] >= value for key, value in earlier.items()), (earlier, later)
    assert seen[-1] == {("jobtpu_jobs_ended_total", "failed", "ann"): 40,
                        ("jobtpu_jobs_ended_total", "finished", "ann"): 20,
                        ("jobtpu_jobs_ended_total", "killed", "ann"): 0,
                        ("jobtpu_preemptions_total", "local"): 60}


def _plant(home: Path, kind: str, elsewhere: Path) -> None:
    path = home / "events.totals.json"
    if kind == "folder":
        path.mkdir()
        (path / "a member's file").write_text("kept\n")
    elif kind == "link":
        path.symlink_to(elsewhere)
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("kind", ["folder", "link", "fifo"])
def test_something_planted_at_the_totals_name_never_stops_the_log(tmp_path: Path, kind: str) -> None:
    """What is not a regular file at events.totals.json (docs/reference/home-files.md) is cleared as
    the log's rotated names are: the log goes on rotating and the counters on counting; a link's
    target is never written."""
    from jobtpu.commands.metrics import metrics_text
    from jobtpu.decide import events as ev
    from jobtpu.decide.events import Event
    from jobtpu.home.layout import Home
    from jobtpu.home.store import Store
    from jobtpu.passes.tell import with_ids
    from jobtpu.tell import eventlog

    home = make_home(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("someone's\n")
    _plant(home, kind, elsewhere)
    said: list[str] = []
    for i in range(30):
        batch = [Event(1000.0 + i, ev.JOB_ENDED, job=i, user="ann", detail={"status": "finished"})]
        said += eventlog.append(home, with_ids(batch), max_bytes=2048, keep=1)
    assert any("events.totals.json was" in line for line in said), said
    assert elsewhere.read_text() == "someone's\n"
    assert [p.name for p in home.glob("events.totals.json.not-a-log.*/*")] == (["a member's file"] if kind == "folder" else [])
    text = metrics_text(Home(home), Store(Home(home)).load(), now=2000.0)
    assert counters(text)[("jobtpu_jobs_ended_total", "finished", "ann")] == 30


def test_a_totals_file_with_a_count_below_zero_is_one_line_never_a_counter_going_down(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (home / "events.totals.json").write_text(json.dumps({"ended": {"ann": {"finished": -5}}, "preempted": {"local": 2}}))
    done = jobtpu(home, "metrics", check=False)
    assert done.returncode != 0 and done.stdout == "", done.stdout
    assert "events.totals.json cannot be read" in done.stderr and "Traceback" not in done.stderr, done.stderr

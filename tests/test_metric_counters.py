"""`jobtpu metrics`' counters (docs/reference/commands.md §2.30): jobs ended by outcome and
preemptions, from the events, only ever growing (so Prometheus' rate() reads them): not when `clean`
moves the jobs to history, not when the event log rotates and drops its oldest file."""

from __future__ import annotations

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

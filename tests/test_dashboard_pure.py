"""The dashboard's pure parts as tables (docs/reference/commands.md §2.29): the order the jobs page
reads in, its summary per user and per machine, the charts' data (chips in use, goodput and
preemptions per day, a job's timeline split as `report` splits it, a sweep compared on a metric of
its progress markers), a job's readable record, and the words the fleet page's acts and the
submit form become."""

from __future__ import annotations

from typing import Any

import pytest

from jobtpu.errors import UsageError
from jobtpu.schema.job_report import AttemptCost, Interruption, JobReport
from jobtpu.schema.state import Attempt, Job, Status
from jobtpu.web import acts, charts, dashboard, fleet_acts, submit_form

pytestmark = pytest.mark.fast

DAY = 86400.0
NOON = 1_800_000_000.0 - (1_800_000_000.0 % DAY) + DAY / 2  # a UTC noon


def job(n: int, status: str, user: str = "alice", machine: str | None = None, ended: float | None = None,
        held: bool = False, req: list[str] | None = None) -> Job:
    attempts = [Attempt(0, machine or "m1", started=NOON - 100, ended=ended)] if (machine or ended) else []
    return Job(n, user, "true", "a.tar", NOON - 1000, status=Status(status), machine=machine, attempts=attempts,
               held=held, req=req or [])


@pytest.mark.parametrize(("jobs", "order"), [
    # what runs, then what waits (held after the rest), then what ended, the last to end first
    ([job(1, "finished", ended=NOON - 50), job(2, "running", machine="m1"), job(3, "queued"),
      job(4, "failed", ended=NOON - 10), job(5, "launching", machine="m2")], [2, 5, 3, 4, 1]),
    ([job(1, "queued", held=True), job(2, "queued"), job(3, "killing", machine="m1")], [3, 2, 1]),
    ([job(1, "killed", ended=NOON - 5), job(2, "finished", ended=NOON - 60)], [1, 2]),
    ([], []),
])
def test_work_comes_first_and_the_last_to_end_leads_what_ended(jobs: list[Job], order: list[int]) -> None:
    assert [j.id for j in dashboard.work_first(jobs)] == order  # type: ignore[union-attr]


def test_a_collapsed_sweep_stands_with_the_queued() -> None:
    sweep = [job(10, "queued"), job(11, "queued")]
    got = dashboard.work_first([job(1, "finished", ended=NOON), sweep, job(2, "running", machine="m")])
    assert [g[0].id if isinstance(g, list) else g.id for g in got] == [2, 10, 1]


def test_the_summary_counts_what_each_user_and_machine_holds_waits_for_and_failed_today() -> None:
    jobs = [job(1, "running", "alice", "tpu-a"), job(2, "running", "bob", "gpu-box", req=["gpu=2"]),
            job(3, "queued", "alice"), job(4, "queued", "alice"), job(5, "failed", "bob", "gpu-box", ended=NOON - 60),
            job(6, "failed", "bob", "gpu-box", ended=NOON - 2 * DAY), job(7, "finished", "alice", "tpu-a", ended=NOON)]

    def chips(j: Job) -> tuple[int | None, str]:
        return (8, "chip") if j.machine == "tpu-a" else (2, "GPU")
    got = dashboard.summary(jobs, chips, today=NOON - NOON % DAY)
    assert [(t.name, t.in_use_text, t.running, t.queued, t.failed_today) for t in got.users] == [
        ("alice", "8 chips", 1, 2, 0), ("bob", "2 GPUs", 1, 0, 1)]
    assert [(t.name, t.in_use_text, t.running, t.failed_today) for t in got.machines] == [
        ("gpu-box", "2 GPUs", 1, 1), ("tpu-a", "8 chips", 1, 0)]


def test_a_gang_is_one_running_job_of_its_user_on_every_machine_it_holds() -> None:
    gang = job(1, "running", "alice", "tpu-a")
    gang.gang, gang.slices = ["tpu-a", "tpu-b"], 2
    got = dashboard.summary([gang], lambda j: (8, "chip"), today=NOON - NOON % DAY)
    assert [(t.name, t.in_use_text, t.running) for t in got.users] == [("alice", "16 chips", 1)]
    assert [(t.name, t.in_use_text, t.running) for t in got.machines] == [("tpu-a", "8 chips", 1), ("tpu-b", "8 chips", 1)]


def test_chips_in_use_step_where_attempts_start_and_end() -> None:
    spans = [charts.Span("alice", 100, 200, 8, "chip"), charts.Span("alice", 150, None, 4, "chip"),
             charts.Span("bob", 50, 120, 2, "GPU"), charts.Span("bob", 0, 10, 2, "GPU")]  # ended before: left out
    got = charts.chips_over_time(spans, since=60, now=300)
    assert got.x == [60, 100, 120, 150, 200, 300]
    assert {s.label: s.values for s in got.series} == {
        "alice (chips)": [0, 8, 8, 12, 4, 4], "bob (GPUs)": [2, 2, 0, 0, 0, 0]}


def cost(n: int, start: float, end: float | None, running: float) -> AttemptCost:
    return AttemptCost(n, "m", None, start, end, 0.0, None, running, start, start + running)


def test_goodput_per_day_is_reports_figure_of_the_jobs_that_ended_that_day_and_preemptions_count() -> None:
    today, yesterday = NOON, NOON - DAY
    reports = [JobReport(1, "", [cost(0, today - 100, today - 10, 90)], [], 100.0, 80.0),
               JobReport(2, "", [cost(0, today - 50, None, 50)], [], 100.0, 40.0),  # running: today
               JobReport(3, "", [cost(0, yesterday, yesterday + 10, 10)], [], 10.0, 10.0)]
    got = charts.goodput_per_day(reports, [today - 5, today - 6, yesterday, NOON - 30 * DAY], today + 60, None)
    assert len(got.x) == charts.DAYS
    goodput, preemptions = (s.values for s in got.series)
    assert goodput[-2:] == [100.0, 60.0] and set(goodput[:-2]) == {None}
    assert preemptions[-2:] == [1, 2] and sum(v or 0 for v in preemptions) == 3


def test_a_jobs_timeline_splits_each_interruption_as_report_does() -> None:
    gap = Interruption(0, 1, "m", "m", lost_at=100, back_at=160, detection=10, recreate=20, setup=0, launch=30,
                       redone_steps=None, redone=None)
    report = JobReport(7, "", [cost(0, 0, 100, 100), cost(1, 160, 200, 40)], [gap], 200.0, 140.0)
    got = charts.timeline(report)
    assert got.x == [0, 100, 110, 130, 160, 200]
    assert {s.label: s.values for s in got.series} == {
        "running": [1, 0, 0, 0, 1, 0], "detection": [0, 1, 0, 0, 0, 0], "delete+create": [0, 0, 1, 0, 0, 0],
        "setup": [0, 0, 0, 0, 0, 0], "launch": [0, 0, 0, 1, 0, 0]}


def test_a_sweeps_members_are_compared_on_a_metric_of_their_progress_markers() -> None:
    lines = {"1 lr=1": ["noise", "JOBTPU_PROGRESS step=1 loss=0.9", "JOBTPU_PROGRESS step=2 loss=0.5 acc=0.7",
                        "JOBTPU_PROGRESS loss=7"],  # no step: no point
             "2 lr=2": ["JOBTPU_PROGRESS step=2 checkpoint=2 loss=0.8", "JOBTPU_PROGRESS step=3 loss=1e-1"]}
    members = {k: charts.marker_values(v) for k, v in lines.items()}
    assert charts.metrics_in(members) == ["acc", "loss"]
    got = charts.sweep_metric(members, "loss")
    assert (got.x, got.time_x) == ([1, 2, 3], False)
    assert {s.label: s.values for s in got.series} == {"1 lr=1": [0.9, 0.5, None], "2 lr=2": [None, 0.8, 0.1]}


def test_a_jobs_record_reads_as_lines_how_it_runs_first_empty_ones_left_out() -> None:
    record: dict[str, Any] = {"id": 3, "cmd": "python t.py", "req": ["v4-8", "preemptible"], "pin": None,
                              "env": {"A": "1"}, "created": 5.0, "attempts": [{}], "overrides": [], "retries": 2,
                              "sweep_values": {"lr": "0.1"}, "max_recoveries": 20}
    assert dashboard.job_details(record, lambda t: f"T{t:g}") == [
        ("command", "python t.py"), ("requests", "v4-8, preemptible"), ("sweep values", "lr=0.1"),
        ("retries", "2"), ("environment", "A=1"), ("submitted", "T5"), ("max recoveries", "20")]


@pytest.mark.parametrize(("form", "words"), [
    ({"verb": ["drain"], "machine": ["tpu-a"], "value": ["bad host"]}, ["machines", "drain", "tpu-a", "--reason=bad host"]),
    ({"verb": ["drain"], "machine": ["tpu-a"]}, ["machines", "drain", "tpu-a"]),
    ({"verb": ["undrain"], "machine": ["tpu-a"], "value": ["ignored"]}, ["machines", "undrain", "tpu-a"]),
    ({"verb": ["apply"], "machine": ["tpu-a"]}, ["tpu", "apply", "--", "tpu-a"]),
    ({"verb": ["reapply"], "machine": ["tpu-a"], "force": ["1"]}, ["tpu", "reapply", "--", "tpu-a"]),
    ({"verb": ["setup"], "machine": ["tpu-a"], "force": ["1"]}, ["tpu", "setup", "--force", "--", "tpu-a"]),
    ({"verb": ["restart"], "machine": ["tpu-a"]}, ["tpu", "restart", "--", "tpu-a"]),
])
def test_a_machine_act_form_becomes_the_commands_own_words(form: dict[str, list[str]], words: list[str]) -> None:
    assert acts.act_words(form) == words
    assert acts.preview_words(words) is None  # previewed as the command and what it does (fleet_acts.preview)


@pytest.mark.parametrize("machine", ["", "--help", "-x", "a\nb", "m" * 300])
def test_a_machine_act_needs_a_machines_name(machine: str) -> None:
    with pytest.raises(UsageError, match="needs a machine's name"):
        acts.act_words({"verb": ["apply"], "machine": [machine]})


@pytest.mark.parametrize(("form", "words"), [
    ({"dir": ["/p"], "cmd": ["python t.py --x"]}, ["submit", "--dir=/p", "--cmd=python t.py --x"]),
    ({"dir": ["2"], "req": ["v4-8  preemptible"], "tag": ["a b"], "name": ["run"]},
     ["submit", "--dir=2", "--name=run", "--req=v4-8", "--req=preemptible", "--tag=a", "--tag=b"]),
    ({"dir": ["/p"], "sweep": ["lr=0.1,0.01\n\n bs=32,64 "], "overrides": ["depth=12 --config.x=1"], "hold": ["1"]},
     ["submit", "--dir=/p", "--sweep=lr=0.1,0.01", "--sweep=bs=32,64", "--hold", "depth=12", "--", "--config.x=1"]),
    ({"dir": ["/p"], "slices": [" 4 "]}, ["submit", "--dir=/p", "--slices=4"]),
])
def test_the_submit_form_becomes_submits_own_words(form: dict[str, list[str]], words: list[str]) -> None:
    assert submit_form.submit_words(form) == words
    assert acts.act_words({**form, "verb": ["submit"]}) == words


def test_a_submits_preview_is_its_dry_run_before_the_words_it_takes_as_they_are() -> None:
    assert acts.preview_words(["submit", "--dir=/p", "a=1", "--", "--x"]) == \
        ["submit", "--dir=/p", "a=1", "--dry-run", "--", "--x"]


@pytest.mark.parametrize(("form", "says"), [
    ({"dir": [""]}, "the folder to snapshot is empty"),
    ({"dir": ["project"]}, "is not a full path"),
    ({"dir": ["/p"], "cmd": ["x" * 5000]}, "longer than"),
    # a bare word among the overrides would be taken for --user (or --machine): the page's user is fixed
    ({"dir": ["/p"], "overrides": ["lr=1 bob"]}, "'bob' is not KEY=VALUE"),
    ({"dir": ["/p"], "overrides": ["v3-32-p1"]}, "is not KEY=VALUE"),
])
def test_a_submit_form_no_submit_could_take_is_one_line(form: dict[str, list[str]], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        submit_form.submit_words(form)


def test_a_machine_acts_words_show_as_typed() -> None:
    assert fleet_acts.shown_words(["tpu", "apply", "--", "tpu-a"]) == "tpu apply tpu-a"


def test_the_shipped_page_files_name_no_other_site_and_put_no_data_in_html() -> None:
    """The page works offline (docs/reference/commands.md §2.29): no address of another site in any
    shipped template, script or style (the licence aside), and the scripts set text as text: the one
    innerHTML is page.js's, of this server's own escaped HTML."""
    import re
    from pathlib import Path

    import jobtpu.web

    web = Path(jobtpu.web.__file__).parent
    shipped = [p for p in [*(web / "static").iterdir(), *(web / "templates").iterdir()] if p.suffix != ".LICENSE"]
    assert {p.name for p in shipped} >= {"uplot.min.js", "charts.js", "page.js", "base.html"}
    for path in shipped:
        text = path.read_text()
        assert not re.search(r"https?://|(?:src|href|url)\s*[=(]\s*[\"']?//", text), path.name
    html_sinks = {p.name: len(re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", p.read_text()))
                  for p in shipped if p.suffix == ".js"}
    assert html_sinks == {**dict.fromkeys(html_sinks, 0), "page.js": 1}, html_sinks


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_a_sweep_members_log_that_is_no_file_leaves_that_member_out_of_the_chart(tmp_path: Any, kind: str) -> None:
    """The sweep's chart reads each member's log (real files in a home): one that is a FIFO, a link or
    a folder is passed over, and the others are still compared; the jobs page is never refused for it."""
    import os

    from jobtpu.home.layout import Home
    from jobtpu.web import chart_pages

    (tmp_path / "logs" / "1").mkdir(parents=True)
    (tmp_path / "logs" / "2").mkdir(parents=True)
    (tmp_path / "logs" / "1" / "0.0.log").write_text("JOBTPU_PROGRESS step=10 loss=0.5\n")
    bad = tmp_path / "logs" / "2" / "0.0.log"
    elsewhere = tmp_path / "elsewhere.log"
    elsewhere.write_text("JOBTPU_PROGRESS step=10 loss=9\n")
    {"fifo": lambda: os.mkfifo(bad), "link": lambda: bad.symlink_to(elsewhere), "folder": bad.mkdir}[kind]()
    members = [job(1, "running", machine="m1"), job(2, "running", machine="m1")]
    for m in members:
        m.sweep, m.sweep_values = 1, {"lr": str(m.id)}
    chart, names, chosen = chart_pages.sweep_chart(Home(tmp_path), members, None)
    assert (names, chosen) == (["loss"], "loss")
    assert chart is not None and [s.label for s in chart.series] == ["1 lr=1"], chart

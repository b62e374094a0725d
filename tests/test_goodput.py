"""Goodput on a hand-made timeline with two preemptions (one recreation, one move to another
machine), progress parsing, and the HTML report rendered by headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from jobtpu.decide import events as ev
from jobtpu.decide import goodput
from jobtpu.decide.events import Event
from jobtpu.decide.goodput import AttemptRecord
from jobtpu.decide.progress import Progress, compile_progress, progress_of, scan
from jobtpu.views.report import render_html, render_text

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


T0 = 1_000_000.0


def _timeline() -> tuple[list[AttemptRecord], list[Event], dict[int, Progress]]:
    """Job 3 on tpu-a (8 chips): preempted, recreated, set up, resumed; preempted again, resumed on
    tpu-b (4 chips), where it finishes. Times in seconds after T0."""
    attempts = [
        AttemptRecord(1, "tpu-a", T0 + 0, T0 + 1160, "preempted", workers=2, chips=8, last_alive=T0 + 1100),
        AttemptRecord(2, "tpu-a", T0 + 1620, T0 + 3000, "preempted", workers=2, chips=8, resume=True,
                      last_alive=T0 + 2900),
        AttemptRecord(3, "tpu-b", T0 + 3100, T0 + 5120, "finished", chips=4, resume=True),
    ]
    log = [Event(T0 + t, kind, job=job, machine=m, attempt=n) for t, kind, job, m, n in [
        (60, ev.JOB_RUNNING, 3, "tpu-a", 1),
        (500, ev.JOB_RUNNING, 4, "tpu-a", 1),  # another job on the same machine: not ours
        (1130, ev.PREEMPTED, None, "other", None),  # another machine: not ours
        (1160, ev.PREEMPTED, 4, "tpu-a", 1),  # seen through the other job on the machine: ours too
        (1170, ev.TPU_DELETE_STARTED, None, "tpu-a", None),
        (1230, ev.TPU_DELETE_DONE, None, "tpu-a", None),
        (1240, ev.TPU_CREATE_STARTED, None, "tpu-a", None),
        (1500, ev.TPU_CREATE_DONE, None, "tpu-a", None),
        (1510, ev.TPU_SETUP_STARTED, None, "tpu-a", None),
        (1600, ev.TPU_SETUP_DONE, None, "tpu-a", None),
        (1620, ev.JOB_LAUNCHED, 3, "tpu-a", 2),
        (1650, ev.JOB_RUNNING, 3, "tpu-a", 2),
        (2990, ev.PREEMPTED, 3, "tpu-a", 2),
        (3100, ev.JOB_LAUNCHED, 3, "tpu-b", 3),
        (3120, ev.JOB_RUNNING, 3, "tpu-b", 3),
    ]]
    progress = {1: Progress(step=1000, step_at=T0 + 1060, checkpoint=800, checkpoint_at=T0 + 860),
                2: Progress(step=2000, step_at=T0 + 2850, checkpoint=1900, checkpoint_at=T0 + 2750),
                3: Progress(step=5000, step_at=T0 + 5100, checkpoint=5000, checkpoint_at=T0 + 5100)}
    return attempts, log, progress


def _report(name: str = "train") -> goodput.JobReport:
    attempts, log, progress = _timeline()
    return goodput.job_report(3, name, attempts, log, progress, now=T0 + 9999)


def test_wall_and_accelerator_time_per_attempt() -> None:
    report = _report()
    assert [(a.n, a.wall, a.accelerator) for a in report.attempts] == [
        (1, 1160, 1160 * 8), (2, 1380, 1380 * 8), (3, 2020, 2020 * 4)]
    # ran: from the first pass that saw it running until last known alive (or its end)
    assert [a.running for a in report.attempts] == [1100 - 60, 2900 - 1650, 5120 - 3120]


def test_each_interruption_is_split_into_detection_recreation_setup_and_launch() -> None:
    first, second = _report().interruptions
    assert (first.after, first.before, first.machine_from, first.machine_to) == (1, 2, "tpu-a", "tpu-a")
    assert (first.detection, first.recreate, first.setup, first.launch) == (60, 340, 100, 50)
    assert first.total == 1650 - 1100
    assert (second.machine_from, second.machine_to) == ("tpu-a", "tpu-b")
    assert (second.detection, second.recreate, second.setup, second.launch) == (90, 0, 0, 130)
    assert second.total == 3120 - 2900


def test_work_redone_after_each_resume_comes_from_checkpoints_and_the_rate() -> None:
    first, second = _report().interruptions
    # attempt 1 made 1000 steps in 1040 s and checkpointed at 800: 200 steps redone
    assert first.redone_steps == 200
    assert first.redone == pytest.approx(200 * 1040 / 1000)
    # attempt 2 resumed from 800, reached 2000 in 1250 s, checkpointed at 1900: 100 steps redone
    assert second.redone_steps == 100
    assert second.redone == pytest.approx(100 / ((2000 - 800) / 1250))


def test_goodput_is_productive_time_over_total() -> None:
    report = _report()
    assert report.total == 5120
    productive = (1040 + 1250 + 2000) - 200 * 1040 / 1000 - 100 / ((2000 - 800) / 1250)
    assert report.productive == pytest.approx(productive)
    assert report.goodput == pytest.approx(productive / 5120)
    assert not report.redone_unknown


def test_a_rerun_redoes_everything_the_interrupted_attempt_ran() -> None:
    attempts, log, progress = _timeline()
    attempts[1].resume = False
    first = goodput.job_report(3, "", attempts, log, progress, now=T0 + 9999).interruptions[0]
    assert first.redone == 1040  # all of attempt 1's running time (attempt 2 ran longer than that)


def test_without_progress_the_work_redone_is_unknown_and_said_so() -> None:
    attempts, log, _ = _timeline()
    report = goodput.job_report(3, "", attempts, log, {}, now=T0 + 9999)
    assert [g.redone for g in report.interruptions] == [None, None]
    assert report.redone_unknown
    assert report.productive == 1040 + 1250 + 2000
    assert "work redone unknown" in render_text([report])


def test_the_time_a_killed_job_waits_for_a_person_to_resume_it_is_not_counted() -> None:
    attempts = [AttemptRecord(0, "box", T0, T0 + 100, "killed", chips=2, unit="GPU"),
                AttemptRecord(1, "box", T0 + 5000, T0 + 5100, "finished", chips=2, unit="GPU", resume=True)]
    report = goodput.job_report(1, "", attempts, [], {}, now=T0 + 9999)
    (gap,) = report.interruptions
    assert gap.by_hand and gap.total == 4900
    assert report.total == 200 and report.goodput == 1.0  # not 200 of 5100: the person's wait is theirs
    text = render_text([report])
    assert "  attempt 0 on box: wall 1m40s, accelerator 0.06 GPU-h, ran 1m40s, killed" in text
    assert "  after attempt 0 (killed): 1h21m until it ran again, waiting on a person (not counted)" in text


def test_a_running_job_counts_until_now() -> None:
    report = goodput.job_report(1, "", [AttemptRecord(1, "box", T0, None, None, chips=None)], [], {}, now=T0 + 300)
    assert report.total == 300 and report.attempts[0].wall == 300 and report.attempts[0].accelerator is None
    assert report.goodput == 1.0


def test_the_text_report_has_a_line_per_attempt_and_interruption() -> None:
    text = render_text([_report("bad\x1b[2Jname")])
    lines = text.splitlines()
    assert lines[0].startswith("job 3 'bad\\x1b[2Jname': goodput 77.7%")
    assert "\x1b" not in text
    assert sum(line.startswith("  attempt ") for line in lines) == 3
    assert "  interruption after attempt 1 (tpu-a -> tpu-a): 9m10s = detection 1m00s, delete+create 5m40s, " \
           "setup 1m40s, launch 50s; work redone 3m28s (200 steps)" in lines


def test_progress_lines_and_a_users_regex() -> None:
    assert progress_of("JOBTPU_PROGRESS step=1200") == (1200, None)
    assert progress_of("[rank0] JOBTPU_PROGRESS checkpoint=1000 step=1250") == (1250, 1000)
    assert progress_of("loss 0.3 step 12") is None
    assert progress_of("JOBTPU_PROGRESS nothing") is None
    one = compile_progress(r"step (\d+)")
    assert progress_of("loss 0.3 step 12", one) == (12, None)
    named = compile_progress(r"saved ckpt (?P<checkpoint>\d+)|it (?P<step>\d+)")
    assert progress_of("saved ckpt 400", named) == (None, 400)
    assert progress_of("it 410", named) == (410, None)
    for bad, why in ((r"step (\d+", "not a valid regular expression"), (r"step \d+", "must capture"),
                     (r"(a)(b)", "must capture")):
        with pytest.raises(ValueError, match=why):
            compile_progress(bad)


def test_scan_keeps_the_last_step_and_checkpoint_with_when_they_were_seen() -> None:
    record = scan(["JOBTPU_PROGRESS step=10", "noise", "JOBTPU_PROGRESS step=20 checkpoint=10"], now=5.0)
    assert record == Progress(step=20, step_at=5.0, checkpoint=10, checkpoint_at=5.0)
    record = scan(["JOBTPU_PROGRESS step=30"], now=9.0, record=record)
    assert record == Progress(step=30, step_at=9.0, checkpoint=10, checkpoint_at=5.0)
    assert Progress.from_json(record.to_json()) == record
    assert Progress.from_json({"step": "x", "checkpoint": True}) == Progress()


# ---- the HTML page in a real browser --------------------------------------------------------------------

class _Dom(HTMLParser):
    """Every element of a dumped DOM: (tag, attributes), and the text inside each element with a class."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.texts.append(data)

    def having(self, attribute: str) -> list[dict[str, str]]:
        return [a for _, a in self.elements if attribute in a]


def _chromium(page: str, tmp_path: Path, *args: str) -> str:
    """Headless Chromium's stdout for the page (root needs --no-sandbox)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "headless Chromium is needed (apt-get install chromium; .ci/run installs it)"
    path = tmp_path / "report.html"
    path.write_text(page)
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", *args, path.as_uri()],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _rendered(page: str, tmp_path: Path) -> _Dom:
    """The DOM headless Chromium builds from the page."""
    dom = _chromium(page, tmp_path, "--dump-dom")
    assert "<html" in dom
    return _Dom(dom)


def _columns(png: bytes) -> dict[bytes, int]:
    """For each colour of an 8-bit RGB(A) PNG, the longest vertical run of it in any column: a bar is
    16 px tall, a preemption mark the lane's height, a legend swatch only 10."""
    pos, idat, width, height, bpp = 8, b"", 0, 0, 3
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # undo the PNG filter of this row
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    best: dict[bytes, int] = {}
    for x in range(0, stride, bpp):
        run, last = 0, b""
        for row in rows:
            pixel = row[x:x + 3]
            run = run + 1 if pixel == last else 1
            last = pixel
            if run > best.get(pixel, 0):
                best[pixel] = run
    return best


def test_the_html_timeline_renders_in_chromium_with_a_bar_per_attempt(tmp_path: Path) -> None:
    other = goodput.job_report(4, "eval", [AttemptRecord(1, "tpu-a", T0 + 200, T0 + 900, "exit 1", chips=8)],
                               [], {}, now=T0 + 9999)
    page = render_html([_report(), other], now=T0 + 9999)
    assert not re.search(r"(src|href)=|https?://|<script", page)  # self-contained, nothing fetched, no script
    dom = _rendered(page, tmp_path)
    rows = {a["data-machine"] for a in dom.having("data-machine")}
    assert rows == {"tpu-a", "tpu-b"}
    bars = {a["data-attempt"]: a for a in dom.having("data-attempt")}
    assert set(bars) == {"job 3 attempt 1", "job 3 attempt 2", "job 3 attempt 3", "job 4 attempt 1"}
    assert "interrupted" in bars["job 3 attempt 1"]["class"] and "finished" in bars["job 3 attempt 3"]["class"]
    assert "failed" in bars["job 4 attempt 1"]["class"]
    assert bars["job 3 attempt 1"]["style"] != bars["job 4 attempt 1"]["style"]  # overlapping: a track each
    marks = [a["data-mark"] for a in dom.having("data-mark")]
    assert marks.count("preempted") == 2 and marks.count("recreate") == 1 and marks.count("setup") == 1
    assert "job 3 train: goodput 77.7% (productive 1h06m of 1h25m)" in "".join(dom.texts)


def test_the_bars_and_marks_are_drawn(tmp_path: Path) -> None:
    """Laid out and painted, not only parsed: a screenshot holds each bar's and mark's colour."""
    other = goodput.job_report(4, "eval", [AttemptRecord(1, "tpu-a", T0 + 200, T0 + 900, "exit 1", chips=8)],
                               [], {}, now=T0 + 9999)
    _chromium(render_html([_report(), other], now=T0 + 9999), tmp_path,
              "--window-size=1000,600", f"--screenshot={tmp_path / 'shot.png'}")
    runs = _columns((tmp_path / "shot.png").read_bytes())
    for name, rgb in (("interrupted", (245, 158, 11)), ("finished", (22, 163, 74)), ("failed", (220, 38, 38))):
        assert runs.get(bytes(rgb), 0) >= 14, f"no {name} bar on the screenshot"
    assert runs.get(bytes((127, 29, 29)), 0) >= 20, "no preemption mark on the screenshot"


def test_hostile_names_stay_text_in_the_page(tmp_path: Path) -> None:
    name = '</title></h2><script>document.title="x"</script><img src=x onerror=alert(1)>'
    machine = '"><svg onload=alert(2)><b data-attempt="forged">'
    report = goodput.job_report(5, name, [AttemptRecord(1, machine, T0, T0 + 60, "finished")], [], {}, now=T0 + 60)
    dom = _rendered(render_html([report], title=f"report {name}"), tmp_path)
    tags = {tag for tag, _ in dom.elements}
    assert not tags & {"script", "img", "svg", "b"}
    assert [a["data-attempt"] for a in dom.having("data-attempt")] == ["job 5 attempt 1"]
    assert [a["data-machine"] for a in dom.having("data-machine")] == [machine]
    assert any(name in text for text in dom.texts)  # shown as the characters it is

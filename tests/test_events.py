"""The event log: appends in batches, rotation by size, reading and following across rotations,
filters, `--since` parsing, and which events are notifications."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from pathlib import Path

import orjson
import pytest

from jobtpu.decide import events
from jobtpu.decide.events import Event
from jobtpu.home.safefs import UnsafePath
from jobtpu.tell import eventlog
from jobtpu.tell.follow import follow

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast



def _job_events(first: int, count: int, job: int = 1) -> list[Event]:
    return [Event(1000.0 + i, events.JOB_LAUNCHED, job=job, machine="box", attempt=i) for i in range(first, first + count)]


def test_append_writes_one_json_line_per_event_and_reads_back(tmp_path: Path) -> None:
    batch = [Event(1.5, events.JOB_ENDED, job=3, machine="box", user="ann", attempt=2,
                   detail={"status": "failed", "reason": "exit 1", "exit_code": 1}),
             events.machine_event(2.0, "box", "up", "unreachable", "no route")]
    eventlog.append(tmp_path, batch)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert eventlog.read(tmp_path) == batch


def test_a_private_home_keeps_the_log_to_its_owner(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    eventlog.append(tmp_path, _job_events(0, 1))
    assert (tmp_path / "events.jsonl").stat().st_mode & 0o777 == 0o600


def test_append_refuses_a_symlink_planted_where_the_log_goes(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "events.jsonl").symlink_to(target)
    with pytest.raises(UnsafePath, match="events.jsonl: is a symbolic link"):  # one line naming it
        eventlog.append(tmp_path, _job_events(0, 1))
    assert target.read_text() == ""


def test_rotation_by_size_keeps_n_files_and_reads_across_them_in_order(tmp_path: Path) -> None:
    line = len(orjson.dumps(_job_events(10, 1)[0].to_json())) + 1
    for i in range(60):  # one event per append, as passes do
        eventlog.append(tmp_path, _job_events(i, 1), max_bytes=line * 5, keep=3)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("events.jsonl"))
    assert names == ["events.jsonl", "events.jsonl.1", "events.jsonl.2", "events.jsonl.3", "events.jsonl.lock"]
    for path in tmp_path.glob("events.jsonl*"):
        assert path.stat().st_size <= line * 5 or path.name.endswith(".lock")
    attempts = [e.attempt for e in eventlog.read(tmp_path)]
    assert attempts == list(range(60 - len(attempts), 60))  # the newest ones, in order, none twice
    assert len(attempts) > 10  # three rotated files and the current one


def test_concurrent_appends_lose_nothing_and_tear_no_line(tmp_path: Path) -> None:
    def writer(job: int) -> None:
        for i in range(50):
            eventlog.append(tmp_path, _job_events(i, 3, job=job), max_bytes=20_000, keep=50)

    threads = [threading.Thread(target=writer, args=(j,)) for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    read = eventlog.read(tmp_path)
    assert len(read) == 4 * 50 * 3
    for job in range(4):
        mine = [e.attempt for e in read if e.job == job]
        assert mine == [i + k for i in range(50) for k in range(3)]  # each writer's order kept


def test_filters_by_job_machine_and_since(tmp_path: Path) -> None:
    eventlog.append(tmp_path, [Event(10.0, events.JOB_LAUNCHED, job=1, machine="a"),
                             Event(20.0, events.JOB_LAUNCHED, job=2, machine="b"),
                             Event(30.0, events.JOB_ENDED, job=1, machine="b", detail={"status": "finished"}),
                             events.machine_event(40.0, "a", "up", "unreachable")])
    assert [e.time for e in eventlog.read(tmp_path, job=1)] == [10.0, 30.0]
    assert [e.time for e in eventlog.read(tmp_path, machine="b")] == [20.0, 30.0]
    assert [e.time for e in eventlog.read(tmp_path, since=25.0)] == [30.0, 40.0]
    assert [e.time for e in eventlog.read(tmp_path, job=1, machine="b")] == [30.0]


def test_a_torn_or_foreign_line_costs_only_that_line(tmp_path: Path) -> None:
    eventlog.append(tmp_path, _job_events(0, 1))
    with open(tmp_path / "events.jsonl", "ab") as f:
        f.write(b'{"time": "yesterday", "kind": 3}\n[1, 2]\n{"time": 5, "kind": "x", "job": true}\n{"time": 1')
    eventlog.append(tmp_path, _job_events(1, 1))  # after a line torn by a crash: on a line of its own
    eventlog.append(tmp_path, _job_events(2, 1))
    assert [e.attempt for e in eventlog.read(tmp_path)] == [0, 1, 2]


# Each line as events.jsonl may hold it → the event it reads as (its to_json), or None: what it costs.
_WRITTEN = (b'{"time":1700000000.5,"kind":"job_ended","id":"ab12","job":4,"machine":"box","user":"ann",'
            b'"attempt":2,"detail":{"status":"failed","exit_code":1},"uid":1000,"account":"ann"}')
LINES = [
    (_WRITTEN, {"time": 1700000000.5, "kind": "job_ended", "id": "ab12", "job": 4, "machine": "box", "user": "ann",
                "attempt": 2, "detail": {"status": "failed", "exit_code": 1}}),
    (b'{"time":5,"kind":"pass_failed"}', {"time": 5.0, "kind": "pass_failed"}),  # an integer time is a time
    (b'{"time":5,"kind":"x","detail":{}}', {"time": 5.0, "kind": "x"}),
    (b'{"time":true,"kind":"x"}', None),  # true is not a number
    (b'{"time":5,"kind":"x","job":true}', None),  # nor a job
    (b'{"time":5,"kind":"x","attempt":1.5}', None),
    (b'{"time":5,"kind":"x","machine":7}', None),
    (b'{"time":5,"kind":"x","detail":[]}', None),  # detail is an object
    (b'{"time":5,"kind":"x","detail":null}', None),
    (b'{"time":5,"kind":"x","id":5}', None),  # an id that is not one is no event either
    (b'{"time":5}', None),
    (b'[1, 2]', None),
    (b'{"time": 1', None),  # torn by a crash
    (b'[' * 100_000, None),
]


@pytest.mark.parametrize(("line", "event"), LINES, ids=[line[:40].decode() for line, _ in LINES])
def test_each_line_reads_as_its_event_or_costs_only_itself(line: bytes, event: dict[str, object] | None) -> None:
    found = list(eventlog.parse_lines([line, _WRITTEN], eventlog.Filter()))
    assert [e.to_json() for e in found] == ([event] if event else []) + [LINES[0][1]]
    if event is not None:  # a line jobtpu wrote reads back and is written again byte for byte
        again = orjson.dumps({**found[0].to_json(), "uid": 1000, "account": "ann"})
        assert line != _WRITTEN or again == line
        assert Event.from_json(orjson.loads(line)) == found[0]  # untold events and outbox items read alike


def test_latest_reads_only_the_end(tmp_path: Path) -> None:
    eventlog.append(tmp_path, _job_events(0, 500))
    assert [e.attempt for e in eventlog.latest(tmp_path, 3)] == [497, 498, 499]
    assert eventlog.latest(tmp_path / "nowhere", 3) == []


def _collect(home: Path, into: list[Event], stop: threading.Event, **filters: object) -> None:
    for event in follow(home, poll=0.02, **filters):  # type: ignore[arg-type]
        into.append(event)
        if stop.is_set():
            return


def test_follow_sees_the_backlog_then_new_events_across_rotations(tmp_path: Path) -> None:
    size = 2000
    eventlog.append(tmp_path, _job_events(0, 30), max_bytes=size, keep=20)
    seen: list[Event] = []
    stop = threading.Event()
    thread = threading.Thread(target=_collect, args=(tmp_path, seen, stop), daemon=True)
    thread.start()
    for i in range(30, 200):  # many rotations, some of them between two polls
        eventlog.append(tmp_path, _job_events(i, 1), max_bytes=size, keep=20)
        if i % 7 == 0:
            time.sleep(0.03)
    deadline = time.monotonic() + 10
    while len(seen) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    eventlog.append(tmp_path, _job_events(200, 1), max_bytes=size, keep=20)  # wakes the follower to stop
    thread.join(5)
    assert [e.attempt for e in seen][:200] == list(range(200))


def test_follow_filters_and_waits_for_a_whole_line(tmp_path: Path) -> None:
    seen: list[Event] = []
    stop = threading.Event()
    thread = threading.Thread(target=_collect, args=(tmp_path, seen, stop), kwargs={"job": 7}, daemon=True)
    thread.start()  # no log yet: it appears later
    time.sleep(0.1)
    line = (events.Event(5.0, events.JOB_ENDED, job=7, detail={"status": "finished"}).to_json())
    data = orjson.dumps(line) + b"\n"
    with open(tmp_path / "events.jsonl", "ab") as f:
        f.write(data[:10])
        f.flush()
        time.sleep(0.1)  # the follower polls a half line: it must wait, not drop it
        f.write(data[10:])
    eventlog.append(tmp_path, [Event(6.0, events.JOB_LAUNCHED, job=8)])
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    eventlog.append(tmp_path, [Event(7.0, events.JOB_LAUNCHED, job=7)])
    thread.join(5)
    assert [e.time for e in seen][:1] == [5.0]
    assert all(e.job == 7 for e in seen)


def test_since_takes_durations_and_iso_times() -> None:
    assert events.parse_since("10m", now=10_000.0) == 10_000.0 - 600
    assert events.parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert events.parse_since("1.5d", now=200_000.0) == 200_000.0 - 1.5 * 86400
    assert events.parse_since("90s", now=100.0) == 10.0
    assert events.parse_since("2026-01-31T12:00:00Z") == datetime.fromisoformat("2026-01-31T12:00:00+00:00").timestamp()
    assert events.parse_since("2026-01-31T12:00") == datetime(2026, 1, 31, 12, 0).timestamp()
    for bad in ("yesterday", "10 parsecs", "", "-5m"):
        with pytest.raises(ValueError, match="is not a time"):
            events.parse_since(bad)


def test_notification_names_of_events() -> None:
    def ended(status: str) -> Event:
        return Event(1.0, events.JOB_ENDED, job=1, detail={"status": status})

    assert events.notification(ended("failed")) == events.FAILED
    assert events.notification(ended("finished")) == events.FINISHED
    assert events.notification(ended("killed")) is None
    assert events.notification(Event(1.0, events.JOB_RESUMED, job=1)) == events.RECOVERED
    assert events.notification(Event(1.0, events.TPU_CREATE_FAILED, machine="t")) == events.RECREATE_FAILED
    assert events.notification(events.machine_event(1.0, "m", "up", "preempted")) == events.MACHINE_DOWN
    assert events.notification(events.machine_event(1.0, "m", "recreating", "up")) == events.MACHINE_UP
    assert events.notification(events.machine_event(1.0, "m", None, "up")) is None  # first sight
    assert events.notification(events.machine_event(1.0, "m", "recreating", "setting up")) is None
    assert events.notification(Event(1.0, events.JOB_LAUNCHED, job=1)) is None


def test_render_line_is_one_terminal_safe_line() -> None:
    event = events.machine_event(0.0, "box\x1b]52;c;bad\x07\nsecond", "up", "unreachable", "ssh: refused")
    line = events.render_line(event)
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line
    assert "up -> unreachable (ssh: refused)" in line


def test_a_job_s_events_are_made_from_the_moves_of_the_pass() -> None:
    """passes/changes.py: a preempted attempt queued to resume and launched again in the same pass
    says so in order; a record changed by no move of the pass (a hand edit) says nothing."""
    from jobtpu.passes.changes import job_events
    from jobtpu.schema import state as model
    from jobtpu.schema.state import Attempt, Cause, Job, Status, Transition

    job = Job(id=7, user="ann", cmd="train", archive="a.tar.gz", created=1.0, name="t", status=Status.LAUNCHING,
              machine="tpu", attempt=1, resume=True, reason=model.RECOVERING,
              attempts=[Attempt(n=0, machine="tpu", started=10.0, ended=50.0, outcome=model.PREEMPTED, workers=4),
                        Attempt(n=1, machine="tpu", started=60.0, resume=True, workers=4)])
    edited = Job(id=8, user="ann", cmd="x", archive="a.tar.gz", created=1.0, status=Status.FAILED, reason="exit 1")
    moves = [Transition(7, Status.RUNNING, Status.QUEUED, model.RECOVERING, None, 0, Cause.RECOVER),
             Transition(7, Status.QUEUED, Status.LAUNCHING, model.RECOVERING, model.RECOVERING, 1, Cause.RELAUNCH)]
    found = job_events(moves, [job, edited], acted=55.0, now=70.0)
    assert [(e.kind, e.job, e.attempt, e.time) for e in found] == [
        (events.PREEMPTED, 7, 0, 50.0), (events.JOB_RECOVERING, 7, 0, 50.0),
        (events.JOB_LAUNCHED, 7, 1, 60.0), (events.JOB_RESUMED, 7, 1, 60.0)]
    assert found[1].detail == {"name": "t", "reason": model.PREEMPTED, "recover": "resume"}

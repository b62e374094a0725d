"""What a pass must tell survives a crash (state.json's `untold`, docs/design.md §3), one member's
unreadable settings stop no one else's notifications, a slow webhook leaks no socket or thread and
backs off, a kill of a queued job is logged, and a pass failing the same way is logged once."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from jobtpu.decide import destinations, events
from jobtpu.decide.events import Event
from jobtpu.tell import eventlog, notify
from jobtpu.tell.outbox import OUTBOX_FILE
from tests.accounts import Team
from tests.helpers import JOBTPU, allow_private_webhooks, jobtpu, make_home, status, submit, wait_for


class Hook:
    """A webhook receiver on 127.0.0.1 that records every body; a `late` one answers only when it is
    closed, long after any delivery's timeout."""

    def __init__(self, late: bool = False) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.posts = 0
        self.late = late
        self.closing = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.posts += 1
                if hook.late:
                    hook.closing.wait()
                hook.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def jobs(self) -> list[int]:
        return [b["event"].get("job") for b in self.bodies]

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def logged(home: Path, kind: str) -> list[dict[str, Any]]:
    path = home / eventlog.EVENTS_FILE
    lines = path.read_text().splitlines() if path.exists() else []
    return [doc for doc in map(json.loads, lines) if doc["kind"] == kind]


@pytest.mark.fast
def test_a_pass_killed_between_its_save_and_its_telling_is_told_by_the_next(tmp_path: Path, hook: Hook) -> None:
    home = make_home(tmp_path, notify=[{"webhook": hook.url, "events": ["finished"]}])
    allow_private_webhooks(home)  # the receiver is on 127.0.0.1
    src = tmp_path / "src"
    src.mkdir()
    job = submit(home, src, "true")
    jobtpu(home, "manage")  # launched (its events logged: the lock is free)
    env = {**os.environ, "JOBTPU_USER": "tester"}
    lock = os.open(home / f"{eventlog.EVENTS_FILE}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)  # the pass that saw the job end blocks on the log, after its save
    try:
        def blocked_after_its_save() -> bool:
            manager = subprocess.Popen([*JOBTPU, "--home", str(home), "manage"], env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                manager.wait(3)  # a pass with no news never takes the log's lock
                return False
            except subprocess.TimeoutExpired:
                pass
            assert status(home)[job]["status"] == "finished"  # saved, not yet told
            manager.send_signal(signal.SIGKILL)
            manager.wait()
            return True
        wait_for(blocked_after_its_save, timeout=60, interval=0.2, what="a pass to block after saving the job's end")
    finally:
        os.close(lock)
    assert logged(home, events.JOB_ENDED) == [] and hook.bodies == []
    jobtpu(home, "manage")
    assert [e["job"] for e in logged(home, events.JOB_ENDED)] == [job]
    assert hook.jobs() == [job]
    jobtpu(home, "manage")  # told: not told again, and dropped from state.json with that pass's result
    assert len(logged(home, events.JOB_ENDED)) == 1 and hook.jobs() == [job]
    assert "untold" not in json.loads((home / "state.json").read_text())


@pytest.mark.fast
def test_events_are_logged_only_once_their_notifications_are_queued(tmp_path: Path, hook: Hook) -> None:
    from jobtpu.passes.tell import publish

    allow_private_webhooks(tmp_path)
    dests = destinations.parse_destinations([{"webhook": hook.url, "events": ["failed"]}])
    (tmp_path / OUTBOX_FILE).mkdir()  # the outbox cannot be written
    event = _ended(7)
    lines = publish(tmp_path, dests, [event])
    # Logged, a later pass would drop it from `untold` though it waits in no outbox (design §3).
    assert logged(tmp_path, events.JOB_ENDED) == [] and hook.bodies == []
    assert any("not logged while the outbox cannot be written" in line for line in lines), lines
    (tmp_path / OUTBOX_FILE).rmdir()
    publish(tmp_path, dests, [event])
    assert [e["id"] for e in logged(tmp_path, events.JOB_ENDED)] == ["e7"] and hook.jobs() == [7]


def test_one_members_unreadable_settings_stop_no_one_elses_notifications(team: Team, hook: Hook) -> None:
    alice, bob = team.accounts
    home = team.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": 2}}}})
    src = team.private_folder(alice, "src")
    job = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true").stdout)
    for account, url in ((alice, hook.url), (bob, "http://127.0.0.1:9/bob")):
        folder = home / "users" / account
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "settings.json").write_text(json.dumps({"notify": [{"webhook": url, "events": ["finished"]}]}))
        for path in (folder, folder / "settings.json"):
            os.chown(path, team.uid(account), team.gid)
        folder.chmod(0o2750)  # each member's own folder (docs/reference/home-files.md §1.6)
        (folder / "settings.json").chmod(0o640)
    (home / "users" / bob / "settings.json").chmod(0o600)
    allow_private_webhooks(home)  # alice's runner.json: her receiver is on 127.0.0.1
    os.chown(home / "runner.json", team.uid(alice), team.gid)

    def told() -> bool:
        done = team.run(alice, "--home", str(home), "manage", check=False)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return bool(hook.bodies) and done.stderr
    said = wait_for(told, timeout=60, interval=0.3, what="alice's notification")
    assert hook.jobs() == [job]
    mine = [line for line in said.splitlines() if f"users/{bob}/settings.json" in line]
    assert len(mine) == 1 and f"{bob}'s own destinations are skipped" in mine[0], said


_DRIP = """
import socket, sys, threading, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
def drip(conn):
    with conn:
        conn.recv(65536)
        for byte in b"HTTP/1.1 200 OK\\r\\nX-Slow: " + b"a" * 100000:
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(1)
while True:
    conn, _ = server.accept()
    threading.Thread(target=drip, args=(conn,), daemon=True).start()
"""


class Drip:
    """A webhook that answers one byte a second, for ever (in a process of its own, so the sockets
    and threads counted here are the deliveries' only)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _DRIP], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}/hook"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _ended(job: int) -> Event:
    event = Event(time.time(), events.JOB_ENDED, job=job, detail={"status": "failed"})
    event.id = f"e{job}"
    return event


@pytest.mark.fast
def test_a_dripping_webhook_leaks_no_socket_or_thread_across_many_rounds(tmp_path: Path) -> None:
    drip = Drip()
    try:
        dests = destinations.parse_destinations([{"webhook": drip.url}])
        outbox = tmp_path / OUTBOX_FILE
        fds, threads = _fds(), threading.active_count()
        for round_no in range(6):  # a budget longer than the gap between two bytes: no read times out
            lines = notify.deliver(outbox, dests, [_ended(round_no)], 1.5)  # returns: the drip never ends
            assert _fds() <= fds and threading.active_count() <= threads, (round_no, lines)
        assert len(json.loads(outbox.read_text())["pending"]) == 6  # kept, none lost
    finally:
        drip.close()


@pytest.mark.fast
def test_a_webhook_answering_after_its_timeout_backs_off_and_delays_only_itself(tmp_path: Path) -> None:
    slow, fast = Hook(late=True), Hook()
    try:
        dests = destinations.parse_destinations([{"webhook": slow.url}, {"webhook": fast.url}])
        outbox = tmp_path / OUTBOX_FILE
        for round_no in range(6):
            notify.deliver(outbox, dests, [_ended(round_no)], 0.5)  # returns: the slow one answers only at close
            assert fast.jobs() == list(range(round_no + 1))  # served every round, whatever the slow one does
        assert slow.posts <= 3, slow.posts  # rounds 1, 2 and 4: not every pass
        pending = json.loads(outbox.read_text())["pending"]
        assert sorted(i["event"]["job"] for i in pending) == list(range(6))  # all still waiting for it
    finally:
        slow.close()
        fast.close()


@pytest.mark.fast
def test_killing_a_queued_job_logs_its_end_and_who_killed_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    job = submit(home, src, "true")
    jobtpu(home, "kill", str(job))
    ended = logged(home, events.JOB_ENDED)
    assert [(e["job"], e["detail"]["status"], e["detail"]["by"]) for e in ended] == [(job, "killed", "tester")]
    jobtpu(home, "manage")
    assert len(logged(home, events.JOB_ENDED)) == 1


@pytest.mark.fast
def test_a_pass_failing_the_same_way_round_after_round_is_logged_once(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (home / "state.json").write_text("{broken")
    env = {**os.environ, "JOBTPU_USER": "tester"}
    loop = subprocess.Popen([*JOBTPU, "--home", str(home), "manage", "--loop", "0.2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert loop.stderr is not None
        for _ in range(5):  # five failed rounds
            loop.stderr.readline()
    finally:
        loop.kill()
        loop.wait()
    assert len(logged(home, events.PASS_FAILED)) == 1


@pytest.mark.fast
def test_passes_in_one_process_hold_a_bounded_number_of_files_and_threads(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What `manage --loop` and `watch` do: pass after pass in one process, with a dripping webhook
    waiting for a notification every pass."""
    from tests.helpers import cli

    drip = Drip()
    try:
        monkeypatch.setenv(timing.ENV, json.dumps({"notify_budget": 1.5}))  # a pass's webhook budget, shortened
        home = make_home(tmp_path, notify=[{"webhook": drip.url, "events": ["failed"]}])
        allow_private_webhooks(home)  # the webhook is on 127.0.0.1
        src = tmp_path / "src"
        src.mkdir()
        job = submit(home, src, "false")
        wait_for(lambda: cli(home, "manage")[0] == 0 and status(home)[job]["status"] == "failed",
                 timeout=60, interval=0.2, what="the job to fail")
        cli(home, "manage")
        fds, threads = _fds(), threading.active_count()
        for _ in range(6):
            assert cli(home, "manage")[0] == 0
            assert _fds() <= fds and threading.active_count() <= threads
        assert json.loads((home / OUTBOX_FILE).read_text())["pending"]  # still waiting, not lost
    finally:
        drip.close()

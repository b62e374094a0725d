"""Watching the fleet through the CLI: the event log, the freshness of what status shows, notifications
to a real local webhook and command, the live dashboard in a real terminal (tmux), and SSH
connections kept open between the rounds of a loop."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.helpers import (
    allow_private_webhooks,
    jobtpu,
    make_home,
    manage_until,
    status,
    submit,
    wait_for,
    write_tree,
)
from tests.sshfleet import SshFleet

ROOT = Path(__file__).resolve().parent.parent


def src_dir(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", {"train.sh": "echo hi\n"})


def set_top(home: Path, **top: Any) -> None:
    doc = json.loads((home / "machines.json").read_text())
    doc.update(top)
    (home / "machines.json").write_text(json.dumps(doc, indent=1))


def kinds(home: Path, *args: str) -> list[tuple[str, int | None]]:
    lines = jobtpu(home, "events", "--json", *args).stdout.splitlines()
    return [(e["kind"], e.get("job")) for e in map(json.loads, lines)]


# ---- events and freshness ---------------------------------------------------------------------------

def test_events_tell_a_jobs_life_in_order_and_filter_by_job_and_time(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = src_dir(tmp_path)
    good, bad = submit(home, src, "sleep 0.5"), submit(home, src, "exit 3")
    manage_until(home, [good, bad], {"finished", "failed"})
    mine = [k for k, job in kinds(home, "--job", str(good))]
    assert mine == ["job_launched", "job_running", "job_ended"], mine
    assert {job for _, job in kinds(home, "--job", str(bad))} == {bad}
    text = jobtpu(home, "events").stdout
    assert re.search(rf"job {bad} attempt 0 on local: failed \(exit 3\)", text), text
    assert kinds(home, "--since", "2026-01-01T00:00") and not kinds(home, "--since", "2099-01-01T00:00")
    assert kinds(home, "--since", "10m") == kinds(home)
    bad_since = jobtpu(home, "events", "--since", "yesterday", check=False)
    assert bad_since.returncode == 2 and "'yesterday' is not a time" in bad_since.stderr
    assert "Traceback" not in bad_since.stderr


def test_status_and_machines_say_how_old_the_last_pass_is_and_warn_when_late(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    submit(home, src_dir(tmp_path), "sleep 30")
    never = jobtpu(home, "status").stderr
    assert "STALE: no manage pass has run yet" in never, never
    jobtpu(home, "manage")
    assert jobtpu(home, "status").stderr == "" and jobtpu(home, "machines").stderr == ""  # fresh: scripts hear nothing
    line = shlex.join([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "status"])
    term = Tmux(tmp_path, ["bash", "-c", f"{line}; sleep 60"])  # a person at a terminal is told
    try:
        wait_for(lambda: re.search(r"last pass \d+ s ago \(took \d+\.\d s\)", term.screen()), timeout=20,
                 what="the freshness line")
    finally:
        term.close()
    doc = json.loads(jobtpu(home, "machines", "--json").stdout)["last_pass"]
    assert doc["stale"] is False and doc["every"] is None and doc["took"] >= 0
    # A loop of 10 s that stopped 35 s ago has missed three passes: late.
    state = json.loads((home / "state.json").read_text())
    state["last_pass"] = {"ended": time.time() - 35, "took": 0.4, "every": 10}
    (home / "state.json").write_text(json.dumps(state))
    for out in (jobtpu(home, "status").stderr, jobtpu(home, "machines").stderr):
        assert re.search(r"STALE: last pass 3[5-9] s ago", out) and "every 10 s" in out, out
    assert json.loads(jobtpu(home, "machines", "--json").stdout)["last_pass"]["stale"] is True
    jobtpu(home, "kill", "1")


def test_a_failed_round_of_a_loop_is_an_event_and_a_single_pass_changes_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    jobtpu(home, "manage")
    (home / "state.json").write_text('{"jobs": [}')
    failed = jobtpu(home, "manage", check=False)  # the user's mistake: one line, nothing written
    assert failed.returncode != 0 and "state.json:1:" in failed.stderr
    assert not (home / "events.jsonl").exists()
    loop = subprocess.Popen([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "manage", "--loop", "0.2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "JOBTPU_USER": "t"})
    try:
        def failure() -> dict[str, Any] | None:
            if not (home / "events.jsonl").exists():
                return None
            events = [json.loads(line) for line in (home / "events.jsonl").read_text().splitlines()]
            return next((e for e in events if e["kind"] == "pass_failed"), None)
        event = wait_for(failure, timeout=20, what="a pass_failed event")
        assert "state.json:1:" in event["detail"]["error"], event
        assert loop.poll() is None  # the loop carries on
    finally:
        loop.terminate()
        loop.wait(timeout=20)


# ---- notifications -------------------------------------------------------------------------------------

class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def webhook(port: int = 0) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server that keeps every JSON body POSTed to it."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Hook)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", server.received  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_webhook_and_command_hear_failed_and_finished_and_a_dead_webhook_leaves_the_pass_green(
        tmp_path: Path) -> None:
    dead_port = free_port()
    with webhook() as (url, received):
        home = make_home(tmp_path)
        allow_private_webhooks(home)  # the receivers are on 127.0.0.1
        set_top(home, notify=[{"webhook": url, "events": ["failed", "finished"]},
                              {"webhook": f"http://127.0.0.1:{dead_port}/hook", "events": ["failed"]},
                              {"command": "cat >> notified.jsonl", "events": ["failed"]}])
        src = src_dir(tmp_path)
        good, bad = submit(home, src, "true"), submit(home, src, "exit 3")
        jobtpu(home, "manage")  # launches both; they end at once
        wait_for(lambda: all((home / "run" / "meta" / str(j) / "0.0.exit").exists() for j in (good, bad)),
                 what="both jobs' exit records")
        dry = jobtpu(home, "manage", "--dry-run")  # sees them end, but a dry run tells nobody
        assert "job 2" in dry.stdout and not received and not (home / "notified.jsonl").exists(), dry.stdout
        assert "job_ended" not in (home / "events.jsonl").read_text()
        manage_until(home, [good, bad], {"finished", "failed"})  # the dead webhook holds no pass up
        wait_for(lambda: len(received) >= 2, timeout=10, what="two notifications")
        by_job = {r["event"]["job"]: r for r in received}
        assert "failed" in by_job[bad]["text"] and f"job {bad}" in by_job[bad]["text"], by_job
        assert "finished" in by_job[good]["text"]
        told = [json.loads(line) for line in (home / "notified.jsonl").read_text().splitlines()]
        assert [(e["kind"], e["job"]) for e in told] == [("job_ended", bad)]
        # The dead webhook's "failed" waits in the outbox; the pass said so and stayed green.
        again = jobtpu(home, "manage")
        assert "webhook 127.0.0.1" in again.stderr and "waiting for the next pass" in again.stderr, again.stderr
    with webhook(dead_port) as (_, late):  # back: the next pass delivers what waited
        jobtpu(home, "manage")
        assert [r["event"]["job"] for r in late] == [bad]
        assert not (home / "notify-outbox.json").exists()


def test_a_users_own_webhook_hears_of_their_jobs_only_and_may_not_be_a_command(tmp_path: Path) -> None:
    ann, bob = {"JOBTPU_USER": "ann"}, {"JOBTPU_USER": "bob"}
    with webhook() as (url, received):
        home = make_home(tmp_path)
        allow_private_webhooks(home)  # the receiver is on 127.0.0.1
        hook = json.dumps([{"webhook": url, "events": ["failed"]}])
        jobtpu(home, "config", "set", "notify", hook, env=ann)
        assert json.loads((home / "users" / "ann" / "settings.json").read_text())["notify"] == json.loads(hook)
        src = src_dir(tmp_path)
        anns = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "exit 3", env=ann).stdout)
        bobs = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "exit 4", env=bob).stdout)
        manage_until(home, [anns, bobs], {"failed"})
        wait_for(lambda: len(received) >= 1, timeout=10, what="ann's notification")
        jobtpu(home, "manage")  # one more pass: nothing else is coming
        assert [(r["event"]["job"], r["event"]["user"]) for r in received] == [(anns, "ann")]
    # A command would run as whoever runs the passes: a user's own list may name webhooks only.
    before = (home / "users" / "ann" / "settings.json").read_bytes()
    done = jobtpu(home, "config", "set", "notify", '[{"command": "touch pwned", "events": ["failed"]}]',
                  env=ann, check=False)
    assert done.returncode == 1 and "webhooks only" in done.stderr and "Traceback" not in done.stderr
    assert (home / "users" / "ann" / "settings.json").read_bytes() == before
    # Written by hand anyway, it is skipped with a line, and the pass stays green and runs nothing.
    (home / "users" / "bob").mkdir(exist_ok=True)
    (home / "users" / "bob" / "settings.json").write_text(
        json.dumps({"notify": [{"command": "touch pwned", "events": ["failed"]}]}))
    again = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "exit 5", env=ann).stdout)
    said = ""
    for _ in range(30):
        said += jobtpu(home, "manage").stderr  # exit 0 every time
        if status(home)[again]["status"] == "failed":
            break
        time.sleep(0.5)
    assert status(home)[again]["status"] == "failed"
    assert "settings.json of user bob: 'notify': a user's own destinations are webhooks only" in said, said
    assert "bob's own destinations are skipped" in said
    assert "Traceback" not in said
    assert not (home / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_a_wrong_notify_entry_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    set_top(home, notify=[{"webhook": "http://127.0.0.1:9/x", "events": ["exploded"]}])
    done = jobtpu(home, "manage", check=False)
    assert done.returncode == 1 and "machines.json: notify[0].events: unknown event 'exploded'" in done.stderr
    assert "Traceback" not in done.stderr and not (home / "state.json").exists()


# ---- the dashboard in a real terminal ----------------------------------------------------------------------

class Tmux:
    """A private tmux server running one command in a window of `size` (columns, lines)."""

    def __init__(self, tmp_path: Path, command: list[str], size: tuple[int, int] = (100, 30)) -> None:
        self.socket = f"jobtpu-test-{os.getpid()}-{id(self)}"
        env = {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)), "JOBTPU_USER": "tester", "TERM": "xterm-256color"}
        line = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *command])
        self._tmux("new-session", "-d", "-s", "w", "-x", str(size[0]), "-y", str(size[1]), line)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "w")

    def keys(self, *keys: str) -> None:
        """Type `keys` in the window, as a person at the terminal would."""
        self._tmux("send-keys", "-t", "w", *keys)

    def alive(self) -> bool:
        return self._tmux("list-panes", "-t", "w", "-F", "#{pane_dead}").strip() == "0"

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._tmux("kill-server")


def watch_command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "jobtpu.cli", "--home", str(home), "watch", *args]


def job_status_on(screen: str, job_id: int) -> str | None:
    match = re.search(rf"^\s*{job_id} (\w+)", screen, re.MULTILINE)
    return match.group(1) if match else None


def test_watch_shows_a_job_go_from_queued_to_running_to_finished_by_itself(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 1}}})
    src = src_dir(tmp_path)
    submit(home, src, "sleep 3")
    second = submit(home, src, "sleep 1.5")  # waits for the only slot
    term = Tmux(tmp_path, watch_command(home, "--interval", "0.5"))
    seen: list[str] = []
    try:
        def finished() -> bool:
            screen = term.screen()
            now = job_status_on(screen, second)
            if now and (not seen or seen[-1] != now):
                seen.append(now)
            return now == "finished"
        wait_for(finished, timeout=60, interval=0.1, what=f"job {second} to finish on the screen")
        screen = term.screen()
        assert term.alive()
    finally:
        term.close()
    assert [s for s in seen if s in ("queued", "running", "finished")] == ["queued", "running", "finished"], seen
    for title in ("jobs", "machines", "events"):
        assert re.search(rf"^{title}\s*$", screen, re.MULTILINE), screen
    assert re.search(rf"job {second} attempt 0 on local: finished", screen), screen
    assert "last pass" in screen and "STALE" not in screen, screen


def test_watch_without_manage_warns_that_no_pass_runs_and_survives_broken_files(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, src_dir(tmp_path), "true")
    before = (home / "state.json").read_bytes()
    term = Tmux(tmp_path, watch_command(home, "--no-manage", "--interval", "0.3"))
    try:
        wait_for(lambda: "STALE: no manage pass has run yet" in term.screen(), timeout=20, what="the stale warning")
        assert job_status_on(term.screen(), job) == "queued"
        good = (home / "machines.json").read_text()
        (home / "machines.json").write_text("{ not json")
        wait_for(lambda: "machines.json:1:3" in term.screen(), timeout=20, what="the machines.json error")
        (home / "state.json").write_text('{"jobs": 7}')
        wait_for(lambda: "state.json: $.jobs: expected array" in term.screen(), timeout=20, what="the state error")
        (home / "machines.json").write_text(good)
        (home / "state.json").write_bytes(before)
        wait_for(lambda: job_status_on(term.screen(), job) == "queued" and "error" not in term.screen(),
                 timeout=20, what="the dashboard to recover")
        assert term.alive()
    finally:
        term.close()
    assert (home / "state.json").read_bytes() == before  # only displayed: no pass ran
    assert status(home)[job]["status"] == "queued"


def test_watch_says_how_to_leave_and_q_quits_it_in_an_80x24_terminal(tmp_path: Path) -> None:
    """`q` ends watch at once, even mid-wait of a long interval (docs/reference/commands.md §2.27);
    its screen says so, and the terminal is given back as it was (the shell reads lines again)."""
    home = make_home(tmp_path)
    job = submit(home, src_dir(tmp_path), "sleep 30")
    line = shlex.join(watch_command(home, "--interval", "600"))
    term = Tmux(tmp_path, ["bash", "-c", f"{line}; echo watch exited $?; read -r typed; echo read $typed; sleep 60"],
                size=(80, 24))
    try:
        wait_for(lambda: job_status_on(term.screen(), job) == "running", timeout=60, what="the pass's round")
        first = term.screen().splitlines()[0]
        assert "q or Ctrl-C to quit" in first, first
        term.keys("q")
        wait_for(lambda: "watch exited 0" in term.screen(), timeout=30, what="watch to quit on q")
        term.keys("back", "Enter")  # echoed and read by lines: the terminal's mode is restored
        wait_for(lambda: "read back" in term.screen(), timeout=10, what="the shell to read a line")
        assert re.search(r"^back$", term.screen(), re.MULTILINE), term.screen()
    finally:
        term.close()
    jobtpu(home, "kill", str(job))


def test_events_and_watch_show_times_in_the_users_time_zone(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, src_dir(tmp_path), "true")
    manage_until(home, [job], {"finished"})
    times = [e["time"] for e in map(json.loads, jobtpu(home, "events", "--json").stdout.splitlines())]

    def shown(seconds: float, hours: int, form: str = "%Y-%m-%d %H:%M:%S") -> str:
        return (datetime.fromtimestamp(seconds, UTC) + timedelta(hours=hours)).strftime(form)

    for zone, offset in (("UTC", 0), ("Asia/Shanghai", 8)):  # Shanghai keeps UTC+8 all year
        jobtpu(home, "config", "set", "time_zone", zone)
        lines = jobtpu(home, "events").stdout.splitlines()
        assert [line[:19] for line in lines] == [shown(t, offset) for t in times], lines
    # The dashboard in a real terminal: its clock and its events, in Shanghai's time too.
    term = Tmux(tmp_path, watch_command(home, "--no-manage", "--interval", "0.3"))
    try:
        last = shown(times[-1], 8)
        screen = wait_for(lambda: (lambda s: s if last in s else None)(term.screen()), timeout=20,
                          what="the last event in Shanghai's time")
        clock = re.search(r"jobtpu watch  (\d\d:\d\d:\d\d)", screen)
        assert clock, screen
        there = datetime.now(UTC) + timedelta(hours=8)
        ticked = datetime.combine(there.date(), datetime.strptime(clock[1], "%H:%M:%S").time(), UTC)
        apart = (there - ticked).total_seconds() % 86400  # (around midnight the dates differ)
        assert min(apart, 86400 - apart) < 60, (clock[1], there)
    finally:
        term.close()


def test_status_and_machines_in_a_real_80x24_terminal_are_one_line_per_row(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 1}},
                                "box": {"kind": "ssh", "hosts": ["127.0.0.1:1"], "resources": {"slot": 1, "gpu": 8}},
                                "v3-32": {"kind": "tpu", "node": "v3-32-p1", "zone": "europe-west4-a",
                                          "accelerator": "v3-32", "preemptible": True}}, gcp={"project": "p"})
    src = src_dir(tmp_path)
    ids = [submit(home, src, "true", "--name", "an-experiment-with-a-long-name", "--tag", "ablation-2026",
                  "config.model.depth=48", f"lr={lr}") for lr in ("0.1", "0.01")]
    cli = shlex.join([sys.executable, "-m", "jobtpu.cli", "--home", str(home)])
    term = Tmux(tmp_path, ["bash", "-c", f"{cli} status 2>/dev/null; {cli} machines 2>/dev/null; echo END; sleep 60"],
                size=(80, 24))
    try:
        screen = wait_for(lambda: (lambda s: s if "END" in s else None)(term.screen()), timeout=20,
                          what="status and machines on the screen")
    finally:
        term.close()
    lines = screen.splitlines()
    assert lines[0].replace("why / log", "why/log").split() == ["id", "name", "status", "att", "run", "age", "where",
                                                                   "config", "tags", "why/log"], screen
    assert [line.split()[0] for line in lines[1:3]] == [str(i) for i in ids] and "lr=0.1 " in lines[1], screen
    assert lines[3].strip() == "2 queued", screen
    assert [line.split()[0] for line in lines[4:8]] == ["name", "local", "box", "v3-32"], screen
    assert lines[8] == "END", screen


# ---- connections kept between rounds -------------------------------------------------------------------------

def _box_under_a_loop(ssh_fleet: SshFleet, tmp_path: Path, connect_timeout: int,
                      **entry: Any) -> tuple[Path, Any, int, subprocess.Popen[bytes], Path]:
    """A box with a job running on it under `manage --loop 0.3`: (home, host, job, loop, its stderr file)."""
    box = ssh_fleet.add_machine("box")
    host = box.hosts[0]
    home = tmp_path / "home"
    home.mkdir()
    (home / "machines.json").write_text(json.dumps({"machines": {"box": {
        "kind": "ssh", "hosts": [host.address()], "user": box.user, "identity_file": str(ssh_fleet.identity),
        "connect_timeout": connect_timeout, **entry}}}))
    job = submit(home, src_dir(tmp_path), "sleep 120")
    err_path = tmp_path / "loop.err"
    with open(err_path, "wb") as err:
        loop = subprocess.Popen([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "manage", "--loop", "0.3"],
                                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "JOBTPU_USER": "tester"})
    try:
        wait_for(lambda: status(home)[job]["status"] == "running", timeout=60, what="the job to run")
    except BaseException:
        loop.terminate()
        loop.wait(timeout=30)
        raise
    return home, host, job, loop, err_path


def _last_pass(home: Path) -> float:
    return float(json.loads((home / "state.json").read_text())["last_pass"]["ended"])


def test_manage_loop_keeps_its_ssh_connection_and_reconnects_after_a_drop(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    home, host, job, loop, _ = _box_under_a_loop(ssh_fleet, tmp_path, 5, resources={"slot": 2})
    try:
        def last_pass() -> float:
            return _last_pass(home)

        time.sleep(1.0)  # the launch's connections (an rsync of the snapshot) are done
        connections, since = ssh_fleet.session_count(host), last_pass()
        wait_for(lambda: last_pass() > since + 3, timeout=30, what="ten rounds")
        assert ssh_fleet.session_count(host) == connections  # not one handshake per round
        ssh_fleet.stop_host(host)
        ssh_fleet.start_host(host)
        restarted = time.time()
        wait_for(lambda: last_pass() > restarted + 2, timeout=30, what="rounds after the restart")
        assert ssh_fleet.session_count(host) == connections + 1  # one reconnect, then kept again
        assert status(home)[job]["status"] == "running" and status(home)[job]["reason"] is None
        # Launch, probe and log pull through the kept shell: a job that talks and fails is seen so.
        talker = submit(home, src_dir(tmp_path / "more"), "echo 'through the kept shell é'; exit 3")
        ended = wait_for(lambda: (j := status(home)[talker])["status"] == "failed" and j, timeout=30, what="the end")
        assert ended["reason"] == "exit 3" and ended["exit_code"] == 3
        assert "through the kept shell é" in jobtpu(home, "tail", str(talker)).stdout
    finally:
        loop.terminate()
        loop.wait(timeout=30)
    jobtpu(home, "kill", str(job))


def _loop_until_dead(ssh_fleet: SshFleet, tmp_path: Path, kill: Any, connect_timeout: int) -> str:
    """A manage --loop with a running job on a box whose kept connection then dies by `kill(host)`:
    seconds until the loop says the box is unreachable, and what it said of it."""
    home, host, job, loop, err_path = _box_under_a_loop(ssh_fleet, tmp_path, connect_timeout)
    try:
        def last_pass() -> float:
            return _last_pass(home)

        since = last_pass()
        wait_for(lambda: last_pass() > since + 1, timeout=30, what="rounds on the kept connection")
        kill(host)
        killed = time.monotonic()
        said = wait_for(lambda: "box: up -> unreachable" in (text := err_path.read_text()) and text,
                        timeout=60, what="the loop to say the box is unreachable")
        took = time.monotonic() - killed
    finally:
        loop.terminate()
        loop.wait(timeout=30)
        ssh_fleet.thaw_host(host)
    jobtpu(home, "kill", str(job))
    return f"{took:.1f}s: " + said.split("box: up -> unreachable", 1)[1].splitlines()[0]


def test_manage_loop_reports_a_kept_connection_s_killed_sshd_unreachable_within_the_round(
        ssh_fleet: SshFleet, tmp_path: Path) -> None:
    # Its sessions die with it: the kept connection is closed, a fresh one is refused.
    said = _loop_until_dead(ssh_fleet, tmp_path, ssh_fleet.stop_host, connect_timeout=10)
    assert float(said.split("s:")[0]) < 5 and "connection refused" in said, said


def test_manage_loop_reports_a_kept_connection_s_frozen_host_unreachable_as_a_fresh_connect_would(
        ssh_fleet: SshFleet, tmp_path: Path) -> None:
    # A host that hangs: the kept connection takes the probe and never answers. The round fails it
    # within connect_timeout, as a fresh connect would, not after the probe's timeout (30 s more).
    said = _loop_until_dead(ssh_fleet, tmp_path, ssh_fleet.freeze_host, connect_timeout=2)
    assert float(said.split("s:")[0]) < 2 + 5 and "within 2s" in said, said


def test_watch_names_imported_tpus_by_their_short_names_in_an_80x24_terminal(tmp_path: Path) -> None:
    """docs/reference/commands.md §2.27: a machine reads as its first alias in both sections, and two
    alias-less names that share their start are cut where they differ."""
    from tests.test_status_rows import imported_tpu_home

    home, ids = imported_tpu_home(tmp_path)
    term = Tmux(tmp_path, watch_command(home, "--no-manage", "--interval", "0.3"), size=(80, 24))
    try:
        screen = wait_for(lambda: (lambda s: s if re.search(r"^machines\s*$", s, re.M) else None)(term.screen()),
                          timeout=30, what="the dashboard")
    finally:
        term.close()
    lines = screen.splitlines()
    jobs = {int(line.split()[0]): line for line in lines if re.match(r"^\s*\d+ (running|queued) ", line)}
    assert sorted(jobs) == ids, screen
    wheres = [jobs[job].split()[2] for job in ids[:4]]  # no reason: the machine follows the status
    assert wheres[:2] == ["v3-32-p1", "v4-64-p1"] and len(set(wheres)) == 4, screen
    start = lines.index(next(line for line in lines if line.rstrip() == "machines"))
    shown = [line.split()[0] for line in lines[start + 1:] if line.strip() and not line.startswith("…")]
    assert shown[:3] == ["local", "v3-32-p1", "v3-32-p2"] and "kmh-tpuvm-v3-32-" not in screen, screen

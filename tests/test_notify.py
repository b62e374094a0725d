"""Notifications against a real local HTTP server and real commands: delivery, retries on the next
call, the time budget against a hanging destination, the outbox's caps, and one-line config errors."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jobtpu.decide import destinations, events
from jobtpu.decide.events import Event
from jobtpu.errors import ConfigError
from jobtpu.tell import notify
from jobtpu.tell.outbox import MAX_PENDING, MAX_TRIES, OUTBOX_FILE
from tests.helpers import allow_private_webhooks, pid_alive, wait_for

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast



class Hook:
    """A webhook receiver: records every body; answers with the codes queued in `answers`
    (then 200), or hangs while `hang` is set."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.answers: list[int] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        self.held = 0  # requests being held by a hang right now
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if hook.hang.is_set():
                    hook.held += 1
                    hook.release.wait()
                    hook.held -= 1
                    return
                code = hook.answers.pop(0) if hook.answers else 200
                if code == 200:
                    hook.bodies.append(body)
                self.send_response(code)
                if 300 <= code < 400:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/SECRETPATH"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
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
    """The local receiver is reached directly, whatever proxy this machine's environment names."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _dests(*entries: dict[str, Any]) -> list[destinations.Destination]:
    return destinations.parse_destinations(list(entries), "machines.json: notify")


def _failed(job: int, name: str = "train") -> Event:
    return Event(time.time(), events.JOB_ENDED, job=job, machine="box", user="ann", attempt=1,
                 detail={"status": "failed", "reason": "exit 1", "exit_code": 1, "name": name})


def _pending(outbox: Path) -> list[dict[str, Any]]:
    return json.loads(outbox.read_text())["pending"] if outbox.exists() else []


def test_webhook_receives_a_slack_style_body(tmp_path: Path, hook: Hook) -> None:
    outbox = tmp_path / OUTBOX_FILE
    lines = notify.deliver(outbox, _dests({"webhook": hook.url, "events": ["failed"]}), [_failed(12)], 3)
    assert lines == []
    assert len(hook.bodies) == 1
    body = hook.bodies[0]
    assert body["text"] == "jobtpu: failed: job 12 (train) attempt 1 on box: failed (exit 1)"
    assert body["event"]["job"] == 12 and body["event"]["detail"]["reason"] == "exit 1"
    assert not outbox.exists()  # nothing pending


def test_only_the_events_a_destination_names_are_sent(tmp_path: Path, hook: Hook) -> None:
    finished = Event(1.0, events.JOB_ENDED, job=1, detail={"status": "finished"})
    launched = Event(1.0, events.JOB_LAUNCHED, job=1)
    notify.deliver(tmp_path / "outbox", _dests({"webhook": hook.url, "events": ["failed"]}),
                   [finished, launched, _failed(2)], 3)
    assert [b["event"]["job"] for b in hook.bodies] == [2]


def test_a_500_is_retried_on_the_next_call_and_delivered_once(tmp_path: Path, hook: Hook) -> None:
    outbox = tmp_path / OUTBOX_FILE
    dests = _dests({"webhook": hook.url, "events": ["failed"]})
    hook.answers = [500]
    lines = notify.deliver(outbox, dests, [_failed(5)], 3)
    assert len(lines) == 1 and "HTTP 500" in lines[0] and "1 waiting" in lines[0]
    assert hook.bodies == []
    assert [i["tries"] for i in _pending(outbox)] == [1]
    assert "SECRETPATH" not in outbox.read_text()  # a webhook URL is a secret: the outbox keys it by digest
    assert "SECRETPATH" not in lines[0]
    assert notify.deliver(outbox, dests, [], 3) == []  # the next pass, nothing new: the pending one goes
    assert [b["event"]["job"] for b in hook.bodies] == [5]
    assert notify.deliver(outbox, dests, [], 3) == []
    assert len(hook.bodies) == 1 and not outbox.exists()


def test_a_redirect_is_not_taken_for_a_delivery(tmp_path: Path, hook: Hook) -> None:
    outbox = tmp_path / OUTBOX_FILE
    hook.answers = [302, 302]  # followed, the POST would become a GET without the event, answered 200
    lines = notify.deliver(outbox, _dests({"webhook": hook.url}), [_failed(6)], 3)
    assert len(lines) == 1 and "HTTP 302" in lines[0]
    assert len(_pending(outbox)) == 1 and hook.bodies == []


def test_a_pass_that_dies_mid_delivery_sends_again_next_time(tmp_path: Path) -> None:
    """At least once: the outbox is on disk before anything is sent, so a pass killed while a
    destination was being served leaves the item for the next pass."""
    got, crashed = tmp_path / "got", tmp_path / "crashed"
    cmd = f"cat >> {got}; if [ ! -e {crashed} ]; then touch {crashed}; kill -9 $PPID; sleep 5; fi"
    outbox = tmp_path / OUTBOX_FILE
    script = ("import sys, time; from pathlib import Path; from jobtpu.decide import events; "
              "from jobtpu.tell import notify; from jobtpu.decide import destinations; dests = destinations.parse_destinations([{'command': sys.argv[2]}]); "
              "event = events.Event(time.time(), events.JOB_ENDED, job=11, detail={'status': 'failed'}); "
              "notify.deliver(Path(sys.argv[1]), dests, [event], 10)")
    done = subprocess.run([sys.executable, "-c", script, str(outbox), cmd], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert len(got.read_text().splitlines()) == 1 and len(_pending(outbox)) == 1
    assert notify.deliver(outbox, _dests({"command": cmd}), [], 3) == []
    assert [json.loads(line)["job"] for line in got.read_text().splitlines()] == [11, 11]
    assert not outbox.exists()


def test_a_hanging_webhook_costs_at_most_the_budget_and_is_kept(tmp_path: Path, hook: Hook) -> None:
    outbox = tmp_path / OUTBOX_FILE
    written = tmp_path / "by-command"
    dests = _dests({"webhook": hook.url}, {"command": f"cat >> {written}"})
    hook.hang.set()
    lines = notify.deliver(outbox, dests, [_failed(1), _failed(2)], 1.0)
    assert hook.held == 1  # it gave up at its budget while the webhook still held its request
    assert len(lines) == 1 and "webhook 127.0.0.1" in lines[0]
    assert [json.loads(line)["job"] for line in written.read_text().splitlines()] == [1, 2]  # the other one is served
    assert [i["event"]["job"] for i in _pending(outbox)] == [1, 2]
    hook.hang.clear()
    hook.release.set()
    assert notify.deliver(outbox, dests, [], 3) == []
    assert [b["event"]["job"] for b in hook.bodies][-2:] == [1, 2]  # in order
    assert len(written.read_text().splitlines()) == 2  # the command is not sent them again


def test_a_refused_connection_is_one_line_and_kept(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed at once: nothing listens there
    outbox = tmp_path / OUTBOX_FILE
    lines = notify.deliver(outbox, _dests({"webhook": f"http://127.0.0.1:{port}/x"}), [_failed(3)], 2)
    assert len(lines) == 1 and "refused" in lines[0].lower()
    assert len(_pending(outbox)) == 1


def test_a_webhook_answering_garbage_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/"
        # A failure is said at once, not a thread dying and waited on till the budget: with a budget
        # longer than the suite's timeout, waiting it out would fail the test.
        lines = notify.deliver(tmp_path / "outbox", _dests({"webhook": url}), [_failed(1)], 3600)
    assert len(lines) == 1 and lines[0].startswith("notifications: webhook 127.0.0.1: BadStatusLine")
    assert len(_pending(tmp_path / "outbox")) == 1


def test_an_outbox_the_home_cannot_write_does_not_stop_delivery(tmp_path: Path) -> None:
    outbox, got = tmp_path / "outbox", tmp_path / "got"
    outbox.mkdir()  # what a full disk or a foreign file does to the write: an OSError
    lines = notify.deliver(outbox, _dests({"command": f"cat >> {got}"}), [_failed(2)], 3)
    assert lines[-1] == "notifications: cannot write outbox: Is a directory"
    assert len(lines) == 2  # it could not be read either; said once each
    assert json.loads(got.read_text())["job"] == 2


def test_a_command_gets_the_event_on_stdin_and_the_line_in_its_environment(tmp_path: Path) -> None:
    out = tmp_path / "got"
    cmd = f'cat > {out}.json; printf "%s|%s" "$JOBTPU_NOTIFY_EVENT" "$JOBTPU_NOTIFY_TEXT" > {out}.env'
    assert notify.deliver(tmp_path / "outbox", _dests({"command": cmd, "events": ["failed"]}), [_failed(9)], 3) == []
    assert json.loads(Path(f"{out}.json").read_text())["job"] == 9
    name, text = Path(f"{out}.env").read_text().split("|")
    assert name == "failed" and text.startswith("jobtpu: failed: job 9")


def test_a_hanging_command_is_killed_with_its_group_at_the_budget(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    cmd = f"sleep 3600 & echo $! >> {pids}; echo $$ >> {pids}; wait"  # longer than the suite's timeout
    lines = notify.deliver(tmp_path / "outbox", _dests({"command": cmd}), [_failed(1)], 1.0)
    assert len(lines) == 1 and "timed out" in lines[0]  # at its budget: the command would never end
    for pid in map(int, pids.read_text().split()):
        wait_for(lambda pid=pid: not pid_alive(pid), timeout=5, what=f"process {pid} to be stopped")
    assert len(_pending(tmp_path / "outbox")) == 1


def test_a_failing_command_is_retried_on_the_next_call(tmp_path: Path) -> None:
    flag, got = tmp_path / "broken", tmp_path / "got"
    flag.write_text("")
    cmd = f'if [ -e {flag} ]; then echo "mail: no relay" >&2; exit 3; fi; cat >> {got}'
    dests = _dests({"command": cmd})
    lines = notify.deliver(tmp_path / "outbox", dests, [_failed(4)], 3)
    assert len(lines) == 1 and "exit 3: mail: no relay" in lines[0]
    flag.unlink()
    assert notify.deliver(tmp_path / "outbox", dests, [], 3) == []
    assert [json.loads(line)["job"] for line in got.read_text().splitlines()] == [4]


def test_a_dead_destination_cannot_grow_the_outbox_for_ever(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    dests = _dests({"command": "exit 1"})
    lines = notify.deliver(outbox, dests, [_failed(i) for i in range(MAX_PENDING + 50)], 3)
    assert f"notifications: 50 more than {MAX_PENDING} waiting for command exit 1; the oldest dropped" in lines
    pending = _pending(outbox)
    assert len(pending) == MAX_PENDING
    assert pending[0]["event"]["job"] == 50  # the oldest went first
    for _ in range(MAX_TRIES - 2):
        notify.deliver(outbox, dests, [], 3)
    assert len(_pending(outbox)) == MAX_PENDING
    notify.deliver(outbox, dests, [], 3)  # the last failed pass they may wait through
    lines = notify.deliver(outbox, dests, [], 3)
    assert any("gave up on 200 notification(s)" in line for line in lines)
    assert not outbox.exists()


def test_a_destination_removed_from_the_config_takes_its_pending_items_with_it(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    notify.deliver(outbox, _dests({"command": "exit 1"}), [_failed(1)], 3)
    assert len(_pending(outbox)) == 1
    assert notify.deliver(outbox, _dests({"command": "true"}), [], 3) == []
    assert not outbox.exists()


def test_a_quiet_pass_writes_nothing(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    launched = Event(1.0, events.JOB_LAUNCHED, job=1)
    assert notify.deliver(outbox, _dests({"command": "exit 1"}), [launched], 3) == []
    assert not outbox.exists()


def test_a_damaged_outbox_costs_its_items_not_the_pass(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    got = tmp_path / "got"
    outbox.write_text('{"pending": [{"dest": 1}]')
    lines = notify.deliver(outbox, _dests({"command": f"cat >> {got}"}), [_failed(8)], 3)
    assert lines == ["notifications: outbox is damaged; pending notifications dropped"]
    assert json.loads(got.read_text())["job"] == 8


def test_hostile_names_cannot_mention_everyone_in_slack(tmp_path: Path, hook: Hook) -> None:
    event = Event(1.0, events.JOB_ENDED, job=1, machine="<!channel>", detail={"status": "failed", "reason": "<@U1>"})
    notify.deliver(tmp_path / "outbox", _dests({"webhook": hook.url}), [event], 3)
    text = hook.bodies[0]["text"]
    assert "<" not in text and ">" not in text and "&lt;!channel&gt;" in text


@pytest.mark.parametrize(("entry", "message"), [
    ({"webhook": "http://x", "evnts": ["failed"]}, "unknown key 'evnts'"),
    ({"webhook": "http://x", "events": ["fail"]}, "unknown event 'fail'"),
    ({"webhook": "http://x", "events": []}, "must be a non-empty list"),
    ({"webhook": "http://x", "command": "true"}, "exactly one of"),
    ({"events": ["failed"]}, "exactly one of"),
    ({"webhook": "file:///etc/passwd"}, "http:// or https:// URL"),
    ({"webhook": "https://x:99999/"}, r"not a valid URL \(Port out of range"),
    ({"webhook": "https://x:abc/"}, r"not a valid URL \(Port could not be cast"),
    ({"webhook": "http://[::1/hook"}, r"not a valid URL \(Invalid IPv6 URL"),
    ({"command": "  "}, "non-empty shell command"),
    ("notify-send", "must be an object"),
])
def test_a_bad_destination_is_one_line_naming_where(entry: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        destinations.parse_destinations([{"command": "true"}, entry], "machines.json: notify")
    assert caught.value.message.startswith("machines.json: notify[1]")
    assert "\n" not in caught.value.message


# Every spelling of an address a webhook's host may take, and what the pass makes of it (design §7):
# an IPv6 address carrying an IPv4 one is judged by that one, an IPv4 address in any inet_aton
# spelling is the address it spells.
@pytest.mark.parametrize(("url", "verdict"), [
    ("http://127.0.0.1/", "loopback"),
    ("http://2130706433/", "loopback"),  # decimal
    ("http://0177.0.0.1/", "loopback"),  # octal
    ("http://0x7f.1/", "loopback"),  # hex, two parts
    ("http://0x7f000001/", "loopback"),
    ("http://127.1/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://[::7f00:1]/", "loopback 127.0.0.1 inside"),  # IPv4-compatible
    ("http://[::127.0.0.1]/", "loopback 127.0.0.1 inside"),
    ("http://[::ffff:127.0.0.1]/", "loopback 127.0.0.1 inside"),  # IPv4-mapped
    ("http://[::ffff:0:7f00:1]/", "loopback 127.0.0.1 inside"),  # IPv4-translated
    ("http://[64:ff9b::7f00:1]/", "loopback 127.0.0.1 inside"),  # NAT64
    ("http://[64:ff9b:1::7f00:1]/", "loopback 127.0.0.1 inside"),  # local-use NAT64
    ("http://[64:ff9b:1::808:808]/", "not public"),
    ("http://[2002:7f00:1::]/", "loopback 127.0.0.1 inside"),  # 6to4
    ("http://[2002:a00:5::]/", "private 10.0.0.5 inside"),
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "loopback 127.0.0.1 inside"),  # Teredo's client
    ("http://[2001:0:808:808::f7f7:f7f7]/", "not public"),  # Teredo, both ends public
    ("http://10.0.0.5:8080/hook", "private"),
    ("http://012.0.0.5/", "private"),  # 10.0.0.5 in octal
    ("http://172.16.0.1/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://100.64.0.1/", "private"),  # shared address space (CGNAT)
    ("http://[fc00::1]/", "private"),
    ("http://169.254.169.254/", "link-local"),  # a cloud's metadata server
    ("http://[fe80::1%25eth0]/", "link-local"),
    ("http://[::ffff:169.254.169.254]/", "link-local 169.254.169.254 inside"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://240.0.0.1/", "reserved"),
    ("http://255.255.255.255/", "reserved"),
    ("https://8.8.8.8/", None),
    ("https://134744072/", None),  # 8.8.8.8, decimal
    ("https://[2606:4700::1111]/", None),
    ("https://[::ffff:8.8.8.8]/", None),
    ("https://[64:ff9b::808:808]/", None),  # NAT64 of a public address
    ("https://[2002:808:808::]/", None),  # 6to4 of a public address
])
def test_every_spelling_of_a_webhooks_address_is_judged_by_what_it_reaches(url: str, verdict: str | None) -> None:
    from jobtpu.tell.webhooks import address_of, refusal

    ip = address_of(urllib.parse.urlsplit(url).hostname or "")
    assert ip is not None, url
    assert refusal(ip) == verdict, url


@pytest.mark.parametrize("host", ["hooks.example.com", "256.1.1.1", "08.1.1.1", "1.2.3.4.5", "0x100000000"])
def test_a_name_is_not_taken_for_an_address(host: str) -> None:
    from jobtpu.tell.webhooks import address_of

    assert address_of(host) is None


def test_a_machines_json_webhook_at_a_private_address_is_skipped_unless_the_runner_allows_it(
        tmp_path: Path, hook: Hook) -> None:
    from jobtpu.passes.tell import publish

    dests = _dests({"webhook": hook.url, "events": ["failed"]},
                   {"webhook": hook.url.replace("127.0.0.1", "[::ffff:127.0.0.1]"), "events": ["failed"]})
    lines = publish(tmp_path, dests, [_failed(1)])
    assert hook.bodies == []
    assert any("notify: webhook 127.0.0.1: 127.0.0.1 resolves to a private address (127.0.0.1): skipped" in line
               for line in lines), lines
    assert any("notify: webhook ::ffff:127.0.0.1: " in line and "skipped" in line for line in lines), lines
    allow_private_webhooks(tmp_path)
    publish(tmp_path, dests, [_failed(2)])
    assert sorted(b["event"]["job"] for b in hook.bodies) == [2, 2]


def test_a_checked_webhook_is_checked_again_as_it_is_sent(tmp_path: Path, hook: Hook) -> None:
    """What the pass checked a moment before is judged again at sending, and nothing reaches the
    receiver: a destination checked public whose name now resolves to loopback is not posted."""
    dest = msgspec.structs.replace(_dests({"webhook": hook.url.replace("127.0.0.1", "localhost")})[0], pinned=True)
    lines = notify.deliver(tmp_path / "outbox", [dest], [_failed(3)], 3)
    assert hook.bodies == [] and len(lines) == 1, lines
    assert "skipped: localhost resolves to a private address (127.0.0.1" in lines[0], lines


def test_no_notify_list_is_no_destinations() -> None:
    assert destinations.parse_destinations(None) == []
    with pytest.raises(ConfigError, match="must be a list"):
        destinations.parse_destinations({"webhook": "http://x"})
    assert destinations.parse_destinations([{"command": "true"}])[0].events == frozenset(events.NOTIFICATIONS)



def test_a_public_webhook_is_kept_pinned_and_a_private_one_skipped(tmp_path: Path) -> None:
    """The pass's check of every webhook (docs/design.md §7): a public address goes on, pinned to the
    check at sending; a private one is skipped with one line."""
    from jobtpu.passes.tell import checked_webhooks

    public, private = _dests({"webhook": "https://93.184.216.34/hook"})[0], _dests({"webhook": "http://10.1.2.3/x"})[0]
    kept, lines = checked_webhooks(tmp_path, [public, private], [])
    assert [(dest.webhook, dest.pinned) for dest in kept] == [("https://93.184.216.34/hook", True)]
    assert len(lines) == 1 and "skipped" in lines[0] and public.pinned is False

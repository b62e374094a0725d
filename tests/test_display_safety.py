"""Untrusted text stays text: names, tags, reasons, log lines and remote messages reach the terminal
as the characters they are (never rich markup, never a control sequence), each job stays one row, and
what paramiko logs for itself never floods stderr."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtpu import timing
from tests.helpers import jobtpu, make_home, manage_until, submit, write_tree

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


# What a terminal would obey: C0/C1 controls (ESC, BEL, CR, newline), DEL, bidi overrides.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
OSC_TITLE = "\x1b]0;pwned\x07"
HYPERLINK_MARKUP = "[link=http://example.invalid/]click[/link]"


@pytest.fixture
def hostile_home(tmp_path: Path) -> tuple[Path, int]:
    """A home holding one ended job whose name, tags and last log line are all hostile."""
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"job.sh": "printf 'progress \\033]0;pwned\\007 [bold]x[/bold] \\033[2J\\n'\n"})
    job = submit(home, src, "bash job.sh", "--name", "[/oops]", "--tag", HYPERLINK_MARKUP, "--tag", OSC_TITLE)
    manage_until(home, [job], {"finished"})
    return home, job


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_markup_and_control_sequences_in_names_tags_and_log_lines_are_shown_as_text(
        hostile_home: tuple[Path, int], terminal: bool) -> None:
    home, job = hostile_home
    # FORCE_COLOR makes rich behave as on a terminal: styles and hyperlinks would be emitted.
    env = {"COLUMNS": "200", **({"FORCE_COLOR": "1"} if terminal else {"NO_COLOR": "1"})}
    done = jobtpu(home, "status", env=env)
    out = done.stdout
    assert "[/oops]" in out  # the name as typed: not a closing tag that crashed every status
    assert HYPERLINK_MARKUP in out and "\x1b]8;" not in out  # no live hyperlink
    assert "\\x1b]0;pwned\\x07" in out and "\x1b]" not in out and "\x07" not in out  # OSC shown, not obeyed
    assert "[bold]x[/bold]" in out and "\\x1b[2J" in out  # the log line as the job printed it
    if not terminal:
        assert RAW_CONTROL.search(out) is None, repr(out)
    else:  # only our own colour (SGR) sequences may be there
        assert RAW_CONTROL.search(re.sub(r"\x1b\[[0-9;]*m", "", out)) is None, repr(out)
    assert [line for line in out.splitlines() if line.strip()][1].split()[0] == str(job)


def test_a_name_with_newlines_is_one_row_at_80_columns(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"a": "x"})
    ids = [submit(home, src, "true", "--name", name) for name in ("two\nlines", "cr\rover", "tab\there", "\u202eevil")]
    out = jobtpu(home, "status", env={"COLUMNS": "80", "NO_COLOR": "1"}).stdout
    lines = out.splitlines()
    assert len(lines) == 1 + len(ids) + 1, out  # the header, one row per job, the count per status
    assert lines[-1].strip() == f"{len(ids)} queued"
    assert "two\\nlines" in out and "cr\\rover" in out and "tab\\there" in out and "\\u202eevil" in out
    assert RAW_CONTROL.search(out) is None
    assert all(len(line) <= 80 for line in lines), out


def test_error_lines_and_machine_details_never_carry_raw_control_characters(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    done = jobtpu(home, "submit", "--dir", str(tmp_path / "no\x1b]0;t\x07pe"), "--cmd", "true", check=False)
    assert done.returncode == 1 and RAW_CONTROL.search(done.stderr) is None, repr(done.stderr)
    assert len(done.stderr.splitlines()) <= 2
    # A hand-edited machine record (state.json is the user's to edit between passes).
    src = write_tree(tmp_path / "src", {"a": "x"})
    submit(home, src, "true")
    state = json.loads((home / "state.json").read_text())
    state["machines"] = {"local": {"state": "up", "detail": "[red]x[/red] \x1b]8;;http://e\x07link\nsecond"}}
    (home / "state.json").write_text(json.dumps(state))
    out = jobtpu(home, "machines", env={"COLUMNS": "200", "FORCE_COLOR": "1"}).stdout
    assert "[red]x[/red]" in out and "\\x1b]8;;http://e\\x07link\\nsecond" in out, repr(out)
    assert "\x1b]" not in out and "\x07" not in out


@pytest.fixture
def garbage_banner() -> Iterator[int]:
    """A TCP port that answers every connection with a line that is no SSH banner, then hangs up."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


def test_paramiko_log_records_never_reach_stderr(tmp_path: Path, garbage_banner: int) -> None:
    home = make_home(tmp_path, {"box": {"kind": "ssh", "hosts": [f"127.0.0.1:{garbage_banner}"], "user": "nobody",
                                        "resources": {"slot": 1}, "connect_timeout": 3}})
    src = write_tree(tmp_path / "src", {"a": "x"})
    submit(home, src, "true")
    for _ in range(2):
        done = jobtpu(home, "manage", env={"PYTHONWARNINGS": "ignore"})
        assert "Exception (client)" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        # The failure is told once, in jobtpu's own line about the machine, and only when it changes.
        assert all(line.startswith("box: ") for line in done.stderr.splitlines() if "banner" in line), done.stderr
    machines = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert machines[0]["state"] == "unreachable", machines


def test_run_says_so_when_another_pass_holds_the_lock(tmp_path: Path) -> None:
    import fcntl

    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"a": "x"})
    fd = os.open(home / "manage.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        done = jobtpu(home, "run", "--dir", str(src), "--cmd", "true", timeout=90,
                      env=timing.env(run_lock_wait=1))  # the wait for the held pass lock, shortened
    finally:
        os.close(fd)
    job = int(done.stdout.strip())
    assert "another manage pass" in done.stderr and f"job {job} stays queued" in done.stderr, done.stderr
    assert json.loads(jobtpu(home, "status", "--json").stdout)["jobs"][0]["status"] == "queued"

"""`jobtpu serve`'s security model with two real accounts in one shared home
(docs/reference/commands.md §2.29): the socket in a folder only its account enters, the secret 0600
in that account's own home, the link's secret swapped for a cookie, and every refusal changing
nothing: another origin's POST, a foreign Host, no cookie, the other account's own secret, and the
other account opening the socket."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.accounts import REPO, Team
from tests.serving import Served, cookie_name, csrf_of, form, record, shared_home, source

BOBS_TOKEN = "bobs-api-token-0123456789"


@pytest.fixture
def served(team: Team) -> Iterator[tuple[Team, Path, Served, int]]:
    """alice (the runner) serves the shared home on its private socket; bob has a queued job."""
    alice, bob = team.accounts
    home = shared_home(team)
    bob_job = int(team.run(bob, "--home", str(home), "submit", "--dir", str(source(team, bob, "sleep 600\n")),
                           "--cmd", "bash run.sh", "--hold", "--env", f"API_TOKEN={BOBS_TOKEN}", umask="0077").stdout)
    team.run(alice, "--home", str(home), "manage", umask="0077")  # takes bob's request in: the job is queued
    server = Served(team, alice, home)
    try:
        yield team, home, server, bob_job
    finally:
        server.stop()


def files_of(home: Path) -> dict[str, tuple[int, int]]:
    """Every file of the home but the spool's own folder entries, with its size and mtime."""
    out = {}
    for path in sorted(home.rglob("*")):
        if path.is_file() and not path.name.endswith(".lock"):
            st = path.stat()
            out[str(path.relative_to(home))] = (st.st_size, st.st_mtime_ns)
    return out


def test_the_socket_and_the_secret_are_the_accounts_own(served: tuple[Team, Path, Served, int]) -> None:
    team, home, server, _ = served
    alice, bob = team.accounts
    assert server.socket is not None
    folder = server.socket.parent
    st = folder.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (team.uid(alice), 0o700)
    secret_file = folder / "secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert secret_file.is_relative_to(Path(os.path.expanduser(f"~{alice}")))
    assert secret_file.read_text().strip() == server.secret
    assert not any(server.secret in p.read_text(errors="replace") for p in home.rglob("*") if p.is_file())
    assert f"ssh -N -L 8787:{server.socket} " in server.said

    # bob, in the same group, cannot even reach the socket: the folder is the guard.
    probe = (f"import socket; s = socket.socket(socket.AF_UNIX)\n"
             f"try:\n    s.connect({str(server.socket)!r})\nexcept PermissionError:\n    print('refused')\n"
             f"else:\n    print('connected')\n")
    done = subprocess.run(["runuser", "-u", bob, "--", "env", f"PYTHONPATH={REPO}", sys.executable, "-c", probe],
                          capture_output=True, text=True, cwd=team.base, timeout=60)
    assert done.stdout.strip() == "refused", done.stderr


def test_the_link_is_swapped_for_a_strict_http_only_cookie(served: tuple[Team, Path, Served, int]) -> None:
    _, home, server, bob_job = served
    code, headers, _ = server.request("GET", f"/login?k={server.secret}")
    assert code == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(home)}={server.secret};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    code, headers, page = server.request("GET", "/", server.cookie_header(cookie_name(home)))
    assert code == 200 and "acting as" in page
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    _, _, job_page = server.request("GET", f"/job/{bob_job}", server.cookie_header(cookie_name(home)))
    assert "API_TOKEN" in job_page and BOBS_TOKEN not in job_page  # a secret --env value is never shown


def test_every_refused_request_changes_nothing(served: tuple[Team, Path, Served, int]) -> None:
    team, home, server, bob_job = served
    alice, bob = team.accounts
    name = cookie_name(home)
    mine = server.cookie_header(name)
    _, _, page = server.request("GET", "/?all_users=1", mine)
    csrf = csrf_of(page)
    release = form([("csrf", csrf), ("verb", "release"), ("id", str(bob_job)), ("force", "1"), ("confirm", "1")])
    posting = {**mine, "Content-Type": "application/x-www-form-urlencoded"}
    before = files_of(home)

    # bob's own secret (bob's own server made it, in bob's own home) opens nothing of alice's.
    bobs = Served(team, bob, home)
    try:
        assert bobs.secret != server.secret
        assert server.request("GET", f"/login?k={bobs.secret}")[0] == 401
        assert server.request("GET", "/", {"Cookie": f"{name}={bobs.secret}"})[0] == 401
        assert server.request("POST", "/act", {"Cookie": f"{name}={bobs.secret}", "Origin": f"http://{server.host}",
                                              "Content-Type": "application/x-www-form-urlencoded"}, release)[0] == 401
    finally:
        bobs.stop()

    refusals = [
        ("no cookie", "GET", "/", {}, None, 401),
        ("no cookie, a post", "POST", "/act", {"Origin": f"http://{server.host}"}, release, 401),
        ("a wrong secret in the link", "GET", "/login?k=" + "A" * 43, {}, None, 401),
        ("a rebinding Host", "GET", "/", {**mine, "Host": "evil.example"}, None, 403),
        ("a rebinding Host, a post", "POST", "/act", {**posting, "Host": "evil.example:8787",
                                                      "Origin": "http://evil.example:8787"}, release, 403),
        ("another origin", "POST", "/act", {**posting, "Origin": "http://evil.example"}, release, 403),
        ("no Origin", "POST", "/act", posting, release, 403),
        ("a null Origin", "POST", "/act", {**posting, "Origin": "null"}, release, 403),
        ("no token", "POST", "/act", {**posting, "Origin": f"http://{server.host}"},
         form([("verb", "release"), ("id", str(bob_job)), ("force", "1"), ("confirm", "1")]), 403),
        ("a wrong token", "POST", "/act", {**posting, "Origin": f"http://{server.host}"},
         release.replace(csrf.encode(), b"0" * len(csrf)), 403),
        ("an act by GET", "GET", "/act?" + release.decode(), mine, None, 405),
        ("another method", "PUT", "/act", {**posting, "Origin": f"http://{server.host}"}, release, 405),
        ("a log by path", "GET", "/static/..%2F..%2Fguard.py", mine, None, 404),
    ]
    for what, method, path, headers, body, status in refusals:
        code, _, text = server.request(method, path, headers, body)
        assert code == status, (what, code, text[:300])
    assert record(team, alice, home, bob_job)["status"] == "queued"
    assert record(team, alice, home, bob_job)["held"] is True
    assert files_of(home) == before

    # The same form, from alice's own page: bob's job is released, and the act is recorded as forced.
    code, _, text = server.request("POST", "/act", {**posting, "Origin": f"http://{server.host}"}, release)
    assert code == 200, text
    job = record(team, alice, home, bob_job)
    assert not job.get("held")
    assert [(f["act"], f["account"]) for f in job["forced"]] == [("release", alice)]  # type: ignore[union-attr,index]


def test_an_act_waits_for_a_running_pass_and_says_so_while_other_pages_go_on(
        served: tuple[Team, Path, Served, int]) -> None:
    import fcntl
    import threading

    from tests.helpers import wait_for

    team, home, server, bob_job = served
    alice = team.accounts[0]
    mine = server.cookie_header(cookie_name(home))
    csrf = csrf_of(server.request("GET", "/", mine)[2])
    posting = {**mine, "Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://{server.host}"}
    body = form([("csrf", csrf), ("verb", "release"), ("id", str(bob_job)), ("force", "1"), ("confirm", "1")])
    answers: list[tuple[int, dict[str, str], str]] = []
    fd = os.open(home / "manage.lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a pass runs
    try:
        acting = threading.Thread(target=lambda: answers.append(server.request("POST", "/act", posting, body)))
        acting.start()
        server_pids = subprocess.run(["pgrep", "-u", alice, "-f", "serve"], capture_output=True, text=True).stdout.split()

        def waits_on_the_lock() -> bool:
            return any(os.path.realpath(f"/proc/{pid}/fd/{fd_name}") == str(home / "manage.lock")
                       for pid in server_pids for fd_name in os.listdir(f"/proc/{pid}/fd"))
        wait_for(waits_on_the_lock, timeout=30, what="the act to wait for the pass lock")
        code, _, page = server.request("GET", "/?all_users=1", mine)  # another page, meanwhile
        assert code == 200 and f'data-id="{bob_job}"' in page
        assert acting.is_alive() and record(team, alice, home, bob_job)["held"] is True
    finally:
        os.close(fd)  # the pass ends
    acting.join(timeout=60)
    code, _, page = answers[0]
    assert code == 200 and "a pass was running: this waited" in page, page
    assert not record(team, alice, home, bob_job).get("held")


def test_a_post_longer_than_a_form_or_of_unsaid_length_is_refused_before_its_body_is_read(
        served: tuple[Team, Path, Served, int]) -> None:
    """docs/reference/commands.md §2.29: a POST says its length, within the form's cap, or is refused
    (413) from its headers alone: a Content-Length of 1 GB is answered with no byte of it sent, and a
    chunked body (which says no length) is refused even when it holds a good form."""
    import http.client

    from tests.serving import UnixHTTP

    team, home, server, bob_job = served
    alice = team.accounts[0]
    mine = server.cookie_header(cookie_name(home))
    csrf = csrf_of(server.request("GET", "/?all_users=1", mine)[2])
    release = form([("csrf", csrf), ("verb", "release"), ("id", str(bob_job)), ("force", "1"), ("confirm", "1")])
    headers = {**mine, "Host": server.host, "Origin": f"http://{server.host}",
               "Content-Type": "application/x-www-form-urlencoded"}
    before = files_of(home)

    def send(extra: dict[str, str], body: bytes) -> tuple[int, str]:
        assert server.socket is not None
        conn: http.client.HTTPConnection = UnixHTTP(server.socket)
        try:
            conn.putrequest("POST", "/act", skip_host=True, skip_accept_encoding=True)
            for key, value in {**headers, **extra}.items():
                conn.putheader(key, value)
            conn.endheaders(body or None)
            got = conn.getresponse()
            return got.status, got.read().decode()
        finally:
            conn.close()

    code, text = send({"Content-Length": str(10**9)}, b"")  # the body never comes: the answer must
    assert code == 413 and "at most" in text, (code, text)
    chunked = f"{len(release):x}\r\n".encode() + release + b"\r\n0\r\n\r\n"
    code, text = send({"Transfer-Encoding": "chunked"}, chunked)
    assert code == 413, (code, text)
    assert record(team, alice, home, bob_job)["held"] is True and files_of(home) == before

"""`jobtpu serve` run as a real account of a Team (tests/accounts.py), and HTTP over its Unix socket.

`Served` starts the server as the account (its own HOME, so its own secret), reads the link it
prints and waits until it answers; `stop` ends that one process. `UnixHTTP` sends one request over
the socket with exactly the headers given (Host included), as a browser behind `ssh -L` would."""

from __future__ import annotations

import http.client
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

from tests.accounts import REPO, Team
from tests.helpers import wait_for


class Served:
    def __init__(self, team: Team, account: str, home: Path, *options: str, env: dict[str, str] | None = None) -> None:
        home_dir = pwd.getpwnam(account).pw_dir
        cmd = ["runuser", "-u", account, "--", "env", "-i", f"HOME={home_dir}", f"USER={account}",
               f"LOGNAME={account}", "PATH=/usr/local/bin:/usr/bin:/bin", f"PYTHONPATH={REPO}",
               *(f"{k}={v}" for k, v in (env or {}).items()),
               "bash", "-c", 'umask 0077; exec "$0" -m jobtpu.cli "$@"', sys.executable,
               "--home", str(home), "serve", *options]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=team.base)
        said = []
        while not any("login?k=" in line for line in said):
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if not line:
                raise AssertionError(f"serve as {account} ended: {''.join(said)}{self.proc.stderr.read() if self.proc.stderr else ''}")
            said.append(line)
        self.said = "".join(said)
        link = re.search(r"(http://\S+)/login\?k=(\S+)", self.said)
        assert link is not None, self.said
        self.origin, self.secret = link.group(1), link.group(2)
        on = re.search(r" on (/\S+\.sock)\n", self.said)
        self.socket = Path(on.group(1)) if on else None
        wait_for(self.answers, timeout=30, interval=0.05, what=f"serve as {account} to answer")

    def answers(self) -> bool:
        try:
            if self.socket is not None:
                probe = socket.socket(socket.AF_UNIX)
                probe.connect(str(self.socket))
            else:
                parsed = urllib.parse.urlsplit(self.origin)
                probe = socket.create_connection((parsed.hostname, parsed.port), timeout=5)
        except OSError:
            return False
        probe.close()
        return True

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.origin).netloc if self.socket is None else "localhost:8787"

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes | None = None) -> tuple[int, dict[str, str], str]:
        conn: http.client.HTTPConnection
        if self.socket is not None:
            conn = UnixHTTP(self.socket)
        else:
            parsed = urllib.parse.urlsplit(self.origin)
            conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers={"Host": self.host, **(headers or {})})
            got = conn.getresponse()
            return got.status, {k.lower(): v for k, v in got.getheaders()}, got.read().decode()
        finally:
            conn.close()

    def cookie_header(self, cookie_name: str) -> dict[str, str]:
        return {"Cookie": f"{cookie_name}={self.secret}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=30)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(str(self.unix_path))
        self.sock = sock


def shared_home(team: Team, slots: int = 4) -> Path:
    """A one-writer home of the team's first account (its runner, whose passes also run the second's
    local jobs), both accounts on its user list."""
    alice, bob = team.accounts[:2]
    home = team.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": slots}}}})
    (home / "runner.json").write_text(json.dumps({"runner": alice}))
    os.chown(home / "runner.json", team.uid(alice), team.gid)
    (home / "runner.json").chmod(0o640)
    for account in (alice, bob):
        team.run(alice, "--home", str(home), "user", "add", account, umask="0077")
    return home


def source(team: Team, account: str, script: str, name: str = "src") -> Path:
    src = team.private_folder(account, name)
    (src / "run.sh").write_text(script)
    os.chown(src / "run.sh", team.uid(account), team.uid(account))
    return src


def cookie_name(home: Path) -> str:
    from jobtpu.web import guard

    return guard.cookie_name(guard.home_key(home))


def form(fields: list[tuple[str, str]]) -> bytes:
    return urllib.parse.urlencode(fields).encode()


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page[:500]
    return found.group(1)


def record(team: Team, account: str, home: Path, job_id: int) -> dict[str, object]:
    done = team.run(account, "--home", str(home), "status", "--json", str(job_id))
    job: dict[str, object] = json.loads(done.stdout)["jobs"][0]
    return job

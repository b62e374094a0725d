"""`jobtpu serve --port` and Prometheus (docs/reference/commands.md §2.29, §2.30): a port something
else holds is one line and no link; the link is printed only once the server listens; /metrics is
scraped with the bearer token of --metrics-token-file, which opens nothing else."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import jobtpu, make_home

pytestmark = pytest.mark.fast


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def person() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="jtp-"))  # the serving person's own home directory
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def serve_cmd(home: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "jobtpu.cli", "--home", str(home), "serve", *options]


def env_of(person: Path) -> dict[str, str]:
    return {**os.environ, "JOBTPU_USER": "tester", "HOME": str(person)}


class Port:
    """A `jobtpu serve --port N` process, read up to its link."""

    def __init__(self, home: Path, person: Path, *options: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(serve_cmd(home, "--port", str(self.port), *options), env=env_of(person),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = ""
        while "login?k=" not in said:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            assert line, said + (self.proc.stderr.read() if self.proc.stderr else "")
            said += line
        self.said = said

    def get(self, path: str, headers: dict[str, str]) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Host": f"127.0.0.1:{self.port}", **headers})
            got = conn.getresponse()
            return got.status, got.read().decode()
        finally:
            conn.close()

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err


def test_a_held_port_is_one_line_and_no_link(tmp_path: Path, person: Path) -> None:
    home = make_home(tmp_path)
    with socket.socket() as holder:  # something else listens on the port
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        done = subprocess.run(serve_cmd(home, "--port", str(port)), env=env_of(person), capture_output=True,
                              text=True, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "login?k=" not in done.stdout and "login?k=" not in done.stderr
    assert done.stderr.splitlines() == [f"jobtpu: error: port {port} on 127.0.0.1 is in use by another program: "
                                        "give --port another number, or stop what holds it"], done.stderr


def test_the_link_is_printed_once_the_server_listens(tmp_path: Path, person: Path) -> None:
    home = make_home(tmp_path)
    server = Port(home, person)
    try:
        # No waiting: the moment the link is shown, opening it is answered.
        with socket.create_connection(("127.0.0.1", server.port), timeout=30):
            pass
        secret = re.search(r"login\?k=(\S+)", server.said).group(1)  # type: ignore[union-attr]
        assert server.get(f"/login?k={secret}", {})[0] == 303
    finally:
        assert "Traceback" not in server.stop()


def test_metrics_are_scraped_with_the_token_file_and_it_opens_nothing_else(tmp_path: Path, person: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    home = make_home(tmp_path)
    jobtpu(home, "submit", "--cmd", "true", "--dir", str(tmp_path), "--hold")
    token_file = person / "metrics-token"
    server = Port(home, person, "--metrics-token-file", str(token_file))
    try:
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600  # made on first use, this account's alone
        token = token_file.read_text().strip()
        secret = re.search(r"login\?k=(\S+)", server.said).group(1)  # type: ignore[union-attr]
        assert len(token) >= 40 and token != secret
        scrape = {"Authorization": f"Bearer {token}"}
        code, text = server.get("/metrics", scrape)
        assert code == 200, text
        names = {family.name for family in text_string_to_metric_families(text)}
        assert "jobtpu_jobs" in names
        for path, headers in [("/metrics", {}), ("/metrics", {"Authorization": "Bearer " + "x" * 43}),
                              ("/metrics", {"Authorization": f"Basic {token}"}),
                              ("/metrics", {"Authorization": f"Bearer {secret}"}),
                              ("/", scrape), ("/job/1", scrape), ("/fresh", scrape), ("/machines", scrape),
                              ("/events", scrape), ("/job/1/log?attempt=0", scrape)]:
            code, text = server.get(path, headers)
            assert code == 401, (path, headers, code, text[:200])
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        host = f"127.0.0.1:{server.port}"
        conn.request("POST", "/act", body="verb=kill&id=1&confirm=1", headers={
            **scrape, "Host": host, "Origin": f"http://{host}", "Content-Type": "application/x-www-form-urlencoded"})
        assert conn.getresponse().status == 401
        conn.close()
        assert jobtpu(home, "status", "--json", "1").stdout.count('"queued"') >= 1
    finally:
        assert "Traceback" not in server.stop()
    # A token file every account may read is refused, in one line, before anything listens.
    token_file.chmod(0o644)
    done = subprocess.run(serve_cmd(home, "--port", str(free_port()), "--metrics-token-file", str(token_file)),
                          env=env_of(person), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "login?k=" not in done.stdout, done.stdout
    assert done.stderr.splitlines() == [f"jobtpu: error: {token_file} may be read by every account or written by "
                                        f"others: `chmod 600 {token_file}` (or 640, for a scraper's group)"]


@pytest.mark.parametrize(("kind", "says"), [
    ("a link", "is a link, not a file of this account's own: remove it"),
    ("a token longer than a token may be", "does not hold a metrics token (one word of 20 to 200 characters)"),
])
def test_a_metrics_token_file_that_is_no_token_is_one_line_saying_what_to_do(tmp_path: Path, kind: str,
                                                                              says: str) -> None:
    """--metrics-token-file (docs/reference/commands.md §2.29): what is at the path is never followed
    nor cut: a link (another account's, to a file they read) or an over-long token, one line."""
    from jobtpu.errors import JobtpuError
    from jobtpu.web.guard import load_metrics_token

    path = tmp_path / "metrics-token"
    target = tmp_path / "theirs"
    target.write_text("t" * 43 + "\n")
    target.chmod(0o600)
    if kind == "a link":
        path.symlink_to(target)
    else:
        path.write_text("t" * 300 + "\n")
        path.chmod(0o600)
    with pytest.raises(JobtpuError) as refused:
        load_metrics_token(path)
    assert says in refused.value.message and "\n" not in refused.value.message, refused.value.message
    assert target.read_text() == "t" * 43 + "\n"

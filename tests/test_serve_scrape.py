"""`jobtpu serve --port` and Prometheus (docs/reference/commands.md §2.29, §2.30): a port something
else holds is one line and no link; the link is printed only once the server listens; /metrics is
scraped with the bearer token of --metrics-token-file, which opens nothing else."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import make_home

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

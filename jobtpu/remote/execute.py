"""`jobtpu exec`: one command on several workers of a machine at once, through fabric's ThreadingGroup,
each output line prefixed by its worker, and the worst exit code as the command's own.

The SSH connections are made by jobtpu's SshTransport (the home's known_hosts and host key policy,
the machine's user, key, port and connect_timeout, what a pass uses) and handed to fabric already
open, so fabric never reads ~/.ssh/known_hosts or ~/.ssh/config. fabric (and invoke with it) is
imported only here, and only by this command."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from jobtpu.errors import RemoteError
from jobtpu.render.text import printable
from jobtpu.schema.msgspec_lib import msgspec

UNREACHABLE = 255  # what ssh exits with when it cannot reach the host


class Worker(msgspec.Struct, frozen=True):
    index: int
    # Returns a connected paramiko SSHClient, or None for this computer (the local machine).
    connect: Callable[[], Any]


class _Lines:
    """A text stream that writes whole lines, each prefixed by its worker, to a shared output."""

    def __init__(self, prefix: str, out: TextIO, lock: threading.Lock) -> None:
        self.prefix, self.out, self.lock, self.partial = prefix, out, lock, ""

    def write(self, text: str) -> int:
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        if lines:
            with self.lock:
                self.out.write("".join(f"{self.prefix}{printable(line)}\n" for line in lines))
                self.out.flush()
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self.partial:
            self.write("\n")


def run_everywhere(workers: Sequence[Worker], command: str, out: TextIO) -> int:
    """Run `command` on every worker at once; print its output as it comes; return the worst exit code."""
    lock = threading.Lock()
    codes: dict[int, int] = {}
    remote = []
    for worker in workers:
        stream = _Lines(f"[{worker.index}] ", out, lock)
        try:
            client = worker.connect()
        except RemoteError as e:
            stream.write(f"jobtpu: {e.message}\n")
            codes[worker.index] = UNREACHABLE
            continue
        if client is None:
            codes[worker.index] = _run_here(command, stream)
        else:
            remote.append((worker, client, stream))
    if remote:
        codes.update(_run_remote(remote, command))
    return max(codes.values(), default=0)


def _run_here(command: str, stream: _Lines) -> int:
    done = subprocess.run(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    stream.write(done.stdout)
    stream.close()
    return done.returncode


def _run_remote(remote: list[tuple[Worker, Any, _Lines]], command: str) -> dict[int, int]:
    from fabric import Config, Connection, ThreadingGroup
    from fabric.exceptions import GroupException

    class _Open(Connection):
        """A fabric Connection over a client jobtpu already connected, writing to its worker's lines."""

        def __init__(self, client: Any, stream: _Lines, index: int) -> None:
            host, port = client.get_transport().getpeername()[:2]
            super().__init__(host, port=port, config=Config(overrides={"load_ssh_configs": False}))
            self.client, self.transport = client, client.get_transport()
            self.stream, self.index = stream, index

        def run(self, cmd: str, **kwargs: Any) -> Any:
            return super().run(cmd, out_stream=self.stream, err_stream=self.stream, **kwargs)

    connections = [_Open(client, stream, worker.index) for worker, client, stream in remote]
    try:
        results = ThreadingGroup.from_connections(connections).run(command, warn=True, hide=False, in_stream=False)
    except GroupException as e:  # a worker's connection broke mid-command
        results = e.result
    codes = {}
    for connection in connections:
        connection.stream.close()
        result = results.get(connection)
        if isinstance(result, BaseException):
            connection.stream.write(f"jobtpu: {printable(str(result))[:200]}\n")
            connection.stream.close()
            codes[connection.index] = UNREACHABLE
        else:
            codes[connection.index] = int(result.exited)
    return codes

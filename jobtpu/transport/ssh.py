"""Remote workers over SSH: scripts through plain paramiko (one connection, one exec session per run;
a connection kept between rounds runs them through one long-lived shell, keptshell.py, instead),
files through rsync over the OpenSSH client (rsync.py), host keys checked against the home's own
known_hosts when connecting (sshlogin.py).

With sshlogin.py, keptshell.py, hostkeys.py and _paramiko.py, the only code that imports paramiko;
connect.py imports it lazily, so status/tail/--help never do."""

from __future__ import annotations

import contextlib
import select
import time
from pathlib import Path

from jobtpu.errors import RemoteError, UnreachableError
from jobtpu.home.layout import Home
from jobtpu.remote.scripts import PRIVATE_PREAMBLE, RUN_SCRIPT
from jobtpu.schema.fleet import Machine
from jobtpu.transport._paramiko import paramiko
from jobtpu.transport.base import Endpoint, Result, whole
from jobtpu.transport.keptshell import KeptShell
from jobtpu.transport.rsync import Rsync
from jobtpu.transport.sshlogin import SshLogin


class SshTransport:
    """One worker reached over SSH. Connects lazily on the first run(); push/pull use rsync."""

    def __init__(self, endpoint: Endpoint, machine: Machine, home: Home) -> None:
        self.login = SshLogin(endpoint, machine, home)
        self.endpoint, self.machine, self.home = endpoint, machine, home
        self.shell = KeptShell(self.login)
        self.files = Rsync(self.login, self.run)
        self._kept = False  # kept between rounds: scripts go through one long-lived shell

    @property
    def label(self) -> str:
        return self.login.label

    @property
    def trusted_keys(self) -> set[str]:
        """Host keys ("type base64") the TPU API publishes for the node: trusted on first contact."""
        return self.login.trusted_keys

    @trusted_keys.setter
    def trusted_keys(self, keys: set[str]) -> None:
        self.login.trusted_keys = keys

    def connect(self) -> paramiko.SSHClient:
        """The worker's paramiko client, connected on first use (one-line RemoteError otherwise)."""
        return self.login.connect()

    def run(self, script: str, timeout: float | None = None) -> Result:
        script = whole(PRIVATE_PREAMBLE + script)
        # Until the script is sent, a failure means nothing ran there: say so (UnreachableError),
        # so a launch that never happened can go to another machine.
        try:
            client = self.login.connect()
        except RemoteError as e:
            raise UnreachableError(e.message, e.hint) from None
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            self.login.client = None
            self.shell.channel = None
            raise UnreachableError(f"{self.login.label}: the SSH connection dropped")
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._kept:
            return self.shell.run(transport, script, timeout, deadline)
        try:
            chan = transport.open_session(timeout=self.login.machine.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise UnreachableError(f"{self.login.label}: cannot open an SSH session: {e or type(e).__name__}") from None
        try:
            chan.exec_command(RUN_SCRIPT)
            with contextlib.suppress(OSError):  # a shell that died early: its output says why
                chan.sendall(script.encode())
                chan.shutdown_write()
            out, err = bytearray(), bytearray()
            while True:
                while chan.recv_ready():
                    out += chan.recv(1 << 16)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                if chan.eof_received or chan.closed:
                    if chan.recv_ready() or chan.recv_stderr_ready():
                        continue
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise self.login.fail(f"the script did not finish within {timeout:g}s")
                select.select([chan], [], [], 1.0 if left is None else min(left, 1.0))
                if not transport.is_active():
                    raise self.login.fail("the SSH connection dropped while the script ran")
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not chan.status_event.wait(left):
                raise self.login.fail(f"the script did not finish within {timeout:g}s")
            code = chan.recv_exit_status()
            if code == -1:
                raise self.login.fail("the script ended without an exit status (connection lost?)")
            return Result(code, out.decode(errors="replace"), err.decode(errors="replace"))
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise self.login.fail(f"the SSH session failed: {e or type(e).__name__}") from None
        finally:
            chan.close()

    def ssh_command(self) -> list[str]:
        return self.files.ssh_command()

    def login_command(self, command: list[str], tty: bool = False) -> list[str]:
        return self.files.login_command(command, tty)

    def push(self, local: Path, remote: str) -> None:
        self.files.push(local, remote)

    def pull(self, remote: str, local: Path, into: int | None = None) -> None:
        self.files.pull(remote, local, into)

    def keep_alive(self, seconds: float) -> None:
        """The connection is kept for later rounds: send SSH keepalives while it waits idle, and run
        later scripts through one long-lived shell (jobtpu_serve in sh/serve.sh), so a round costs a fork on the worker
        per script instead of an SSH session (keptshell.py)."""
        transport = self.login.client.get_transport() if self.login.client is not None else None
        if transport is not None:
            transport.set_keepalive(max(1, int(seconds)))
            self._kept = True

    def close(self) -> None:
        self.shell.drop()
        self.login.close()

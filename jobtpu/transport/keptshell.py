"""A kept connection's one long-lived shell (jobtpu_serve in sh/serve.sh): each script is sent as its
length and bytes, the shell acknowledges it (`+`), runs it, and answers `CODE N_OUT N_ERR` and then
those bytes of stdout and stderr. A round then costs a fork on the worker per script, not an SSH
session (sshd's fork, a login shell)."""

from __future__ import annotations

import contextlib
import shlex
import time

from jobtpu.errors import UnreachableError
from jobtpu.remote.scripts import serve_script
from jobtpu.schema import worker_protocol as protocol
from jobtpu.transport._paramiko import paramiko
from jobtpu.transport.base import Result
from jobtpu.transport.sshlogin import SshLogin


class KeptShell:
    """The serving shell of one kept connection, opened on first use and again after any failure."""

    def __init__(self, login: SshLogin) -> None:
        self.login = login
        self.channel: paramiko.Channel | None = None
        self.buffer = bytearray()

    def _open(self, transport: paramiko.Transport) -> paramiko.Channel:
        try:
            chan = transport.open_session(timeout=self.login.machine.connect_timeout)
            chan.exec_command("exec bash --noprofile --norc -c " + shlex.quote(serve_script()))
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise UnreachableError(f"{self.login.label}: cannot open an SSH session: {e or type(e).__name__}") from None
        self.channel, self.buffer = chan, bytearray()
        return chan

    def run(self, transport: paramiko.Transport, script: str, timeout: float | None,
                      deadline: float | None) -> Result:
        shell = self.channel
        if shell is None or shell.closed or shell.exit_status_ready():
            shell = self._open(transport)
        data = script.encode()
        try:
            shell.sendall(b"%d\n" % len(data) + data)
        except (paramiko.SSHException, OSError, EOFError) as e:  # nothing reached the shell
            self.drop()
            raise UnreachableError(f"{self.login.label}: the kept SSH session failed: {e or type(e).__name__}") from None
        late = f"the script did not finish within {timeout:g}s" if timeout is not None else ""
        try:
            self._receipt(shell, deadline, late)
            header = self._line(shell, deadline, late)
            if (ran := protocol.ran_header(header)) is None:
                raise self.login.fail(f"the kept shell answered {header[:80]!r}, not a result")
            out = self._bytes(shell, ran.stdout, deadline, late)
            err = self._bytes(shell, ran.stderr, deadline, late)
        except BaseException:
            self.drop()  # in an unknown state: the next script gets a new shell
            raise
        return Result(ran.code, out.decode(errors="replace"), err.decode(errors="replace"))

    def _receipt(self, shell: paramiko.Channel, deadline: float | None, late: str) -> None:
        """The kept shell says it has the script before running it (sh/serve.sh), within
        connect_timeout: a kept connection whose host froze or vanished without closing it fails as
        soon as a fresh connect would, not a script's whole timeout later. Not an UnreachableError:
        the script may have arrived and run, only the word back was lost."""
        limit = self.login.machine.connect_timeout
        soon = time.monotonic() + limit
        if deadline is not None and deadline <= soon:
            soon, silent = deadline, late
        else:
            silent = f"no answer within {limit:g}s on the kept connection (connect_timeout)"
        word = self._line(shell, soon, silent)
        if not protocol.is_receipt(word):
            raise self.login.fail(f"the kept shell answered {word[:40]!r}, not a receipt")

    def _fill(self, shell: paramiko.Channel, deadline: float | None, late: str) -> None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise self.login.fail(late)
        shell.settimeout(left)
        try:
            chunk = shell.recv(1 << 16)
        except TimeoutError:
            raise self.login.fail(late) from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise self.login.fail(f"the kept SSH session failed: {e or type(e).__name__}") from None
        if not chunk:
            raise self.login.fail("the kept shell ended while the script ran (connection lost?)")
        self.buffer += chunk

    def _line(self, shell: paramiko.Channel, deadline: float | None, late: str) -> bytes:
        while b"\n" not in self.buffer:
            self._fill(shell, deadline, late)
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return line

    def _bytes(self, shell: paramiko.Channel, n: int, deadline: float | None, late: str) -> bytes:
        while len(self.buffer) < n:
            self._fill(shell, deadline, late)
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def drop(self) -> None:
        if self.channel is not None:
            with contextlib.suppress(Exception):
                self.channel.close()
        self.channel = None

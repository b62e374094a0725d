"""Remote workers over SSH: scripts through plain paramiko (one connection, one exec session per run;
a connection kept between rounds runs them through one long-lived shell, jobtpu_serve, instead),
files through rsync over the OpenSSH client, host keys checked against the home's own known_hosts.

With hostkeys.py and _paramiko.py, the only code that imports paramiko; connect.py imports it lazily,
so status/tail/--help never do."""

from __future__ import annotations

import contextlib
import functools
import getpass
import math
import os
import re
import select
import shlex
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

from jobtpu.errors import RemoteError, UnreachableError
from jobtpu.home.layout import Home
from jobtpu.remote.scripts import PRIVATE_PREAMBLE, RUN_SCRIPT, make_dirs_script, serve_script
from jobtpu.schema.machines import Machine
from jobtpu.transport._paramiko import paramiko
from jobtpu.transport.base import Endpoint, Result
from jobtpu.transport.hostkeys import (
    HostKeyRefused,
    fingerprint,
    forget_command,
    forget_host,
    host_pattern,
    known_keys,
    remember_host_key,
)

__all__ = ["SshTransport", "forget_host", "remember_host_key", "known_keys", "forget_command"]

_keys_lock = threading.Lock()
_key_cache: dict[str, tuple[tuple[int, int], paramiko.PKey]] = {}


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called for a host with no recorded key of the type it offered (a recorded key of that type
    that differs never gets here: paramiko raises BadHostKeyException)."""

    def __init__(self, transport: SshTransport) -> None:
        self.t = transport

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        t = self.t
        policy = t.machine.host_key_policy
        if policy == "off":
            return
        if policy == "accept-new" or f"{key.get_name()} {key.get_base64()}" in t.trusted_keys:
            remember_host_key(t.home, t.addr, t.port, key)
            return
        raise HostKeyRefused("unknown")


# ---- the transport ---------------------------------------------------------------------------------

def _load_key(path: str) -> paramiko.PKey:
    st = os.stat(path)
    sig = (st.st_mtime_ns, st.st_size)
    with _keys_lock:
        hit = _key_cache.get(path)
        if hit is not None and hit[0] == sig:
            return hit[1]
    key = paramiko.PKey.from_path(path)
    with _keys_lock:
        _key_cache[path] = (sig, key)
    return key


class SshTransport:
    """One worker reached over SSH. Connects lazily on the first run(); push/pull use rsync."""

    def __init__(self, endpoint: Endpoint, machine: Machine, home: Home) -> None:
        if endpoint.addr is None:
            raise ValueError("an SSH endpoint needs an address")
        self.endpoint, self.machine, self.home = endpoint, machine, home
        self.addr, self.port = endpoint.addr, endpoint.port
        self.user = machine.user or getpass.getuser()
        self.identity = os.path.expanduser(machine.identity_file) if machine.identity_file else None
        # Hook for TPU machines: "type base64" host keys the node publishes through the TPU API
        # (guest attributes). Under `strict` such a key is trusted and recorded on first contact.
        self.trusted_keys: set[str] = set()
        self._client: paramiko.SSHClient | None = None
        self._kept = False  # kept between rounds: scripts go through one long-lived shell
        self._shell: paramiko.Channel | None = None
        self._shell_buffer = bytearray()

    @property
    def label(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"{self.endpoint.machine}[{self.endpoint.index}] {host}:{self.port}"

    def _fail(self, what: str) -> RemoteError:
        return RemoteError(f"{self.label}: {what}")

    # ---- connecting ------------------------------------------------------------------------------
    def connect(self) -> paramiko.SSHClient:
        """TCP connect, banner, key exchange, host key check and authentication, all within
        connect_timeout; every failure is a one-line RemoteError naming the worker."""
        if self._client is not None:
            return self._client
        limit = self.machine.connect_timeout
        deadline = time.monotonic() + limit
        try:
            sock = socket.create_connection((self.addr, self.port), timeout=limit)
        except TimeoutError:
            raise self._fail(f"no answer within {limit:g}s (connect_timeout)") from None
        except ConnectionRefusedError:
            raise self._fail("connection refused") from None
        except OSError as e:
            raise self._fail((e.strerror or str(e)).lower()) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_Policy(self))
        if self.machine.host_key_policy != "off":
            for ktype, key in known_keys(self.home, self.addr, self.port).items():
                client.get_host_keys().add(host_pattern(self.addr, self.port), ktype, key)
        # paramiko's timeouts are per stage; the watchdog makes them one budget for the whole handshake.
        expired, settled = threading.Event(), threading.Lock()

        def expire() -> None:
            with settled:
                if not done:
                    expired.set()
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

        done = ok = False
        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
        watchdog.daemon = True
        watchdog.start()
        left = max(0.1, deadline - time.monotonic())
        auth: dict[str, object] = {"look_for_keys": True, "allow_agent": True}
        try:
            if self.identity is not None:
                try:
                    auth = {"pkey": _load_key(self.identity), "look_for_keys": False, "allow_agent": False}
                except paramiko.PasswordRequiredException:
                    auth = {"key_filename": self.identity, "look_for_keys": False, "allow_agent": True}
                except (OSError, paramiko.SSHException) as e:
                    raise self._fail(f"cannot use identity_file {self.identity}: {e}") from None
            client.connect(self.addr, self.port, self.user, sock=sock, timeout=left, banner_timeout=left,
                           auth_timeout=left, channel_timeout=left, **auth)
            ok = True
        except HostKeyRefused as e:
            raise self._host_key_error(str(e)) from None
        except paramiko.BadHostKeyException as e:
            raise self._fail(f"host key changed: it offers {fingerprint(e.key)}, known_hosts has "
                             f"{fingerprint(e.expected_key)}; refusing (possible impostor). If the host was "
                             f"rebuilt, forget the old key: {forget_command(self.home, self.addr, self.port)}"
                             ) from None
        except paramiko.AuthenticationException:
            how = f"key {self.identity}" if self.identity else "ssh-agent and ~/.ssh keys"
            raise self._fail(f"authentication failed as {self.user} ({how}); check 'user' and "
                             "'identity_file' in machines.json") from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            if expired.is_set():
                raise self._fail(f"SSH handshake did not finish within {limit:g}s (connect_timeout)") from None
            raise self._fail(f"SSH handshake failed: {e or type(e).__name__}") from None
        finally:
            with settled:  # a handshake that made it in time is never cut by a late watchdog
                done = True
            watchdog.cancel()
            if not ok:
                client.close()
                sock.close()
        self._client = client
        return client

    def _host_key_error(self, kind: str) -> RemoteError:
        if kind == "changed":  # another thread recorded a different key meanwhile
            return self._fail("host key changed while connecting; refusing. If the host was rebuilt, "
                              f"forget the old key: {forget_command(self.home, self.addr, self.port)}")
        scan = f"ssh-keyscan -p {self.port} {self.addr}"
        return self._fail(f"unknown host key and host_key_policy is strict; after checking it, add it "
                          f"with `{scan} >> {shlex.quote(str(self.home.known_hosts))}`, or use accept-new")

    # ---- running scripts -------------------------------------------------------------------------
    def run(self, script: str, timeout: float | None = None) -> Result:
        script = PRIVATE_PREAMBLE + script
        # Until the script is sent, a failure means nothing ran there: say so (UnreachableError),
        # so a launch that never happened can go to another machine.
        try:
            client = self.connect()
        except RemoteError as e:
            raise UnreachableError(e.message, e.hint) from None
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            self._client = None
            self._shell = None
            raise UnreachableError(f"{self.label}: the SSH connection dropped")
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._kept:
            return self._run_in_shell(transport, script, timeout, deadline)
        try:
            chan = transport.open_session(timeout=self.machine.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise UnreachableError(f"{self.label}: cannot open an SSH session: {e or type(e).__name__}") from None
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
                    raise self._fail(f"the script did not finish within {timeout:g}s")
                select.select([chan], [], [], 1.0 if left is None else min(left, 1.0))
                if not transport.is_active():
                    raise self._fail("the SSH connection dropped while the script ran")
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not chan.status_event.wait(left):
                raise self._fail(f"the script did not finish within {timeout:g}s")
            code = chan.recv_exit_status()
            if code == -1:
                raise self._fail("the script ended without an exit status (connection lost?)")
            return Result(code, out.decode(errors="replace"), err.decode(errors="replace"))
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise self._fail(f"the SSH session failed: {e or type(e).__name__}") from None
        finally:
            chan.close()

    # ---- files: rsync over the OpenSSH client, with the same key, port and known_hosts ---------------
    def ssh_command(self) -> list[str]:
        def opt(name: str, path: str) -> str:  # a config value: quoted (spaces split lists), % is a token
            return f'{name}="' + path.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"') + '"'

        args = ["ssh", "-F", "/dev/null", "-p", str(self.port), "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={max(1, math.ceil(self.machine.connect_timeout))}",
                "-o", "ConnectionAttempts=1", "-o", "LogLevel=ERROR", "-o", "UpdateHostKeys=no",
                "-o", "GlobalKnownHostsFile=/dev/null",
                # Never lend the agent or a tunnel to the worker (docs/design.md §7); paramiko never forwards either.
                "-o", "ForwardAgent=no", "-o", "ClearAllForwardings=yes", "-o", "ForwardX11=no"]
        if self.identity is not None:
            args += ["-i", self.identity.replace("%", "%%"), "-o", "IdentitiesOnly=yes"]
        if self.machine.host_key_policy == "off":
            args += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        else:  # accept-new is settled by paramiko first (_ensure_known), so ssh never writes the file
            args += ["-o", "StrictHostKeyChecking=yes", "-o", opt("UserKnownHostsFile", str(self.home.known_hosts))]
        return args

    def login_command(self, command: list[str]) -> list[str]:
        """The OpenSSH client's arguments for a shell on this worker (`command` empty) or for `command`
        there: the same user, key, port and known_hosts as rsync uses. The host key is checked (and
        under accept-new recorded) first, as for rsync. A shell may ask for a key's passphrase."""
        self._ensure_known()
        args = self.ssh_command()
        if not command:
            at = args.index("BatchMode=yes")
            del args[at - 1:at + 1]
        return [*args, "-l", self.user, "--", self.addr, *command]

    def _ensure_known(self) -> None:
        if self.machine.host_key_policy != "off" and not known_keys(self.home, self.addr, self.port):
            self.connect()  # checks (and under accept-new records) the host key, under our lock

    def _remote(self, path: str, source: bool) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        # Relative paths are relative to the login folder; rsync with -s does not expand "~".
        if path == "~":
            path = "."
        elif path.startswith("~/"):
            path = path[2:]
        if source:  # a sending rsync expands wildcards in its names (even with -s): a name is itself
            path = re.sub(r"([][*?\\])", r"\\\1", path)
        return f"{self.user}@{host}:{path}"

    def _rsync(self, args: list[str], what: str, fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
        self._ensure_known()
        timeout = int(max(60, 6 * self.machine.connect_timeout))
        cmd = ["rsync", "-s", f"--timeout={timeout}", "-e", shlex.join(self.ssh_command()), *args]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, pass_fds=fds)
        except FileNotFoundError:
            raise self._fail(f"rsync is not installed here; it is needed to {what}") from None

    def _rsync_error(self, what: str, done: subprocess.CompletedProcess[str]) -> RemoteError:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        # rsync ends with generic lines ("rsync error: ... (code N)", a broken pipe, "connection
        # unexpectedly closed"); the cause is the last line before them.
        generic = ("rsync error:", "Broken pipe", "connection unexpectedly closed")
        cause = [ln for ln in lines if not any(g in ln for g in generic)] or lines
        return self._fail(f"rsync {what} failed ({done.returncode}): {cause[-1] if cause else 'no message'}")

    def push(self, local: Path, remote: str) -> None:
        """rsync writes a temporary file of its own (mkstemp) next to the target and renames it: atomic
        on the worker, and concurrent copies never share one. --ignore-times: we push only when the
        worker asked for it, so a damaged copy with the right size and time is replaced, not skipped.
        The copy, and any folder --mkpath makes, is the remote user's alone whatever its login umask."""
        mkpath = _rsync_has_mkpath()
        args = ["-t", "--ignore-times", "--chmod=D700,F600", "--rsync-path=umask 077 && rsync",
                *(["--mkpath"] if mkpath else []),
                str(local), self._remote(remote, source=False)]
        if not mkpath:
            self._mkdirs(remote)
        done = self._rsync(args, "push")
        if done.returncode != 0 and mkpath and "mkpath" in done.stderr:  # an rsync older than 3.2.3 there
            self._mkdirs(remote)
            done = self._rsync([a for a in args if a != "--mkpath"], "push")
        if done.returncode != 0:
            raise self._rsync_error(f"push of {local.name}", done)

    def _mkdirs(self, remote: str) -> None:
        parent = os.path.dirname(remote.rstrip("/"))
        if parent:
            result = self.run(make_dirs_script([parent]), timeout=60)
            if not result.ok:
                raise self._fail(f"cannot create {parent}: {result.stderr.strip()[-200:]}")

    def pull(self, remote: str, local: Path, into: int | None = None) -> None:
        """A folder's contents, or a single file, into `local` (no owners: results belong to us). With
        `into`, rsync is handed that folder's descriptor as its destination (/proc/self/fd/N), so a
        link swapped in at `local` or above it is never followed (docs/design.md §2)."""
        if into is None:
            local.mkdir(parents=True, exist_ok=True)
        dest, fds = (f"/proc/self/fd/{into}/", (into,)) if into is not None else (f"{local}/", ())
        base = ["-rlpt", _pull_modes(os.fstat(into).st_mode if into is not None else local.stat().st_mode)]
        done = self._rsync([*base, self._remote(remote.rstrip("/") + "/", source=True), dest], "pull", fds)
        if done.returncode == 23:  # not a folder (or missing): try it as one file; its error is the one to show
            done = self._rsync([*base, self._remote(remote.rstrip("/"), source=True), dest], "pull", fds)
        if done.returncode != 0:
            raise self._rsync_error(f"pull of {remote}", done)

    # ---- a kept connection: one shell serves every script ----------------------------------------
    def keep_alive(self, seconds: float) -> None:
        """The connection is kept for later rounds: send SSH keepalives while it waits idle, and run
        later scripts through one long-lived shell (jobtpu_serve in sh/serve.sh), so a round costs a fork on the worker
        per script instead of an SSH session (sshd's fork, a login shell): scripts.serve_script."""
        transport = self._client.get_transport() if self._client is not None else None
        if transport is not None:
            transport.set_keepalive(max(1, int(seconds)))
            self._kept = True

    def _open_shell(self, transport: paramiko.Transport) -> paramiko.Channel:
        try:
            chan = transport.open_session(timeout=self.machine.connect_timeout)
            chan.exec_command("exec bash --noprofile --norc -c " + shlex.quote(serve_script()))
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise UnreachableError(f"{self.label}: cannot open an SSH session: {e or type(e).__name__}") from None
        self._shell, self._shell_buffer = chan, bytearray()
        return chan

    def _run_in_shell(self, transport: paramiko.Transport, script: str, timeout: float | None,
                      deadline: float | None) -> Result:
        shell = self._shell
        if shell is None or shell.closed or shell.exit_status_ready():
            shell = self._open_shell(transport)
        data = script.encode()
        try:
            shell.sendall(b"%d\n" % len(data) + data)
        except (paramiko.SSHException, OSError, EOFError) as e:  # nothing reached the shell
            self._drop_shell()
            raise UnreachableError(f"{self.label}: the kept SSH session failed: {e or type(e).__name__}") from None
        late = f"the script did not finish within {timeout:g}s" if timeout is not None else ""
        try:
            self._receipt(shell, deadline, late)
            header = self._shell_line(shell, deadline, late).split()
            if len(header) != 3 or not all(w.lstrip(b"-").isdigit() for w in header):
                raise self._fail(f"the kept shell answered {b' '.join(header[:3])!r}, not a result")
            code, n_out, n_err = (int(w) for w in header)
            out = self._shell_bytes(shell, n_out, deadline, late)
            err = self._shell_bytes(shell, n_err, deadline, late)
        except BaseException:
            self._drop_shell()  # in an unknown state: the next script gets a new shell
            raise
        return Result(code, out.decode(errors="replace"), err.decode(errors="replace"))

    def _receipt(self, shell: paramiko.Channel, deadline: float | None, late: str) -> None:
        """The kept shell says it has the script before running it (sh/serve.sh), within
        connect_timeout: a kept connection whose host froze or vanished without closing it fails as
        soon as a fresh connect would, not a script's whole timeout later. Not an UnreachableError:
        the script may have arrived and run, only the word back was lost."""
        limit = self.machine.connect_timeout
        soon = time.monotonic() + limit
        if deadline is not None and deadline <= soon:
            soon, silent = deadline, late
        else:
            silent = f"no answer within {limit:g}s on the kept connection (connect_timeout)"
        word = self._shell_line(shell, soon, silent)
        if word != b"+":
            raise self._fail(f"the kept shell answered {word[:40]!r}, not a receipt")

    def _shell_fill(self, shell: paramiko.Channel, deadline: float | None, late: str) -> None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise self._fail(late)
        shell.settimeout(left)
        try:
            chunk = shell.recv(1 << 16)
        except TimeoutError:
            raise self._fail(late) from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise self._fail(f"the kept SSH session failed: {e or type(e).__name__}") from None
        if not chunk:
            raise self._fail("the kept shell ended while the script ran (connection lost?)")
        self._shell_buffer += chunk

    def _shell_line(self, shell: paramiko.Channel, deadline: float | None, late: str) -> bytes:
        while b"\n" not in self._shell_buffer:
            self._shell_fill(shell, deadline, late)
        line, _, rest = bytes(self._shell_buffer).partition(b"\n")
        self._shell_buffer = bytearray(rest)
        return line

    def _shell_bytes(self, shell: paramiko.Channel, n: int, deadline: float | None, late: str) -> bytes:
        while len(self._shell_buffer) < n:
            self._shell_fill(shell, deadline, late)
        data = bytes(self._shell_buffer[:n])
        del self._shell_buffer[:n]
        return data

    def _drop_shell(self) -> None:
        if self._shell is not None:
            with contextlib.suppress(Exception):
                self._shell.close()
        self._shell = None

    def close(self) -> None:
        self._drop_shell()
        if self._client is not None:
            self._client.close()
            self._client = None


def _pull_modes(folder_mode: int) -> str:
    """What a pull gives what it creates, by the folder it lands in: in one its group may write (a
    shared home's results/ID) the group's as the home's own files are (setgid folders, never
    world-readable); elsewhere the worker's modes, made ours to write."""
    if folder_mode & stat.S_IWGRP:
        return "--chmod=Dug+rwx,Dg+s,Do-rwx,Fug+rwX,Fo-rwx"
    return "--chmod=u+rwX"


@functools.cache  # asked once a process: the installed rsync does not change under it
def _rsync_has_mkpath() -> bool:
    try:
        out = subprocess.run(["rsync", "--version"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        out = ""
    m = re.search(r"version\s+(\d+)\.(\d+)\.(\d+)", out)
    return m is not None and tuple(int(x) for x in m.groups()) >= (3, 2, 3)

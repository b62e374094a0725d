"""Files to and from an SSH worker: rsync over the OpenSSH client, with the same user, key, port and
known_hosts as the scripts' connection (the host key settled by it first), and the OpenSSH client's
arguments for `jobtpu ssh`."""

from __future__ import annotations

import functools
import math
import os
import re
import shlex
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from jobtpu.errors import JobtpuError, RemoteError
from jobtpu.remote.scripts import make_dirs_script
from jobtpu.render.text import refuse_control
from jobtpu.transport.base import Result
from jobtpu.transport.sshlogin import SshLogin


class Rsync:
    """One worker's file copies. `run` runs a script there (to make folders for an old rsync)."""

    def __init__(self, login: SshLogin, run: Callable[..., Result]) -> None:
        self.login, self.run = login, run

    def ssh_command(self) -> list[str]:
        def opt(name: str, path: str) -> str:  # a config value: quoted (spaces split lists), % is a token
            # ssh parses -o as a line of its config: a control character could end or bend it
            try:
                refuse_control(path, f"the path of {name}", "an OpenSSH option", "")
            except JobtpuError as e:  # a worker's failure, as every other of a copy's
                raise self.login.fail(f"{e.message}; move the home to a path of printable characters") from None
            return f'{name}="' + path.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"') + '"'

        args = ["ssh", "-F", "/dev/null", "-p", str(self.login.port), "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={max(1, math.ceil(self.login.machine.connect_timeout))}",
                "-o", "ConnectionAttempts=1", "-o", "LogLevel=ERROR", "-o", "UpdateHostKeys=no",
                "-o", "GlobalKnownHostsFile=/dev/null",
                # Never lend the agent or a tunnel to the worker (docs/design.md §7); paramiko never forwards either.
                "-o", "ForwardAgent=no", "-o", "ClearAllForwardings=yes", "-o", "ForwardX11=no"]
        if self.login.identity is not None:
            args += ["-i", self.login.identity.replace("%", "%%"), "-o", "IdentitiesOnly=yes"]
        if self.login.machine.host_key_policy == "off":
            args += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        else:  # accept-new is settled by paramiko first (SshLogin.ensure_known), so ssh never writes the file
            args += ["-o", "StrictHostKeyChecking=yes", "-o", opt("UserKnownHostsFile", str(self.login.home.known_hosts))]
        return args

    def login_command(self, command: list[str], tty: bool = False) -> list[str]:
        """The OpenSSH client's arguments for a shell on this worker (`command` empty) or for `command`
        there (`tty`: an interactive one, on a terminal): the same user, key, port and known_hosts as
        rsync uses. The host key is checked (and under accept-new recorded) first, as for rsync. A
        shell may ask for a key's passphrase."""
        self.login.ensure_known()
        args = self.ssh_command()
        if not command or tty:
            at = args.index("BatchMode=yes")
            del args[at - 1:at + 1]
        return [*args, *(["-t"] if tty else []), "-l", self.login.user, "--", self.login.addr, *command]

    def _remote(self, path: str, source: bool) -> str:
        host = f"[{self.login.addr}]" if ":" in self.login.addr else self.login.addr
        # Relative paths are relative to the login folder; rsync with -s does not expand "~".
        if path == "~":
            path = "."
        elif path.startswith("~/"):
            path = path[2:]
        if source:  # a sending rsync expands wildcards in its names (even with -s): a name is itself
            path = re.sub(r"([][*?\\])", r"\\\1", path)
        return f"{self.login.user}@{host}:{path}"

    def _rsync(self, args: list[str], what: str, fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
        self.login.ensure_known()
        timeout = int(max(60, 6 * self.login.machine.connect_timeout))
        cmd = ["rsync", "-s", f"--timeout={timeout}", "-e", shlex.join(self.ssh_command()), *args]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, pass_fds=fds)
        except FileNotFoundError:
            raise self.login.fail(f"rsync is not installed here; it is needed to {what}") from None

    def _rsync_error(self, what: str, done: subprocess.CompletedProcess[str]) -> RemoteError:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        # rsync ends with generic lines ("rsync error: ... (code N)", a broken pipe, "connection
        # unexpectedly closed"); the cause is the last line before them.
        generic = ("rsync error:", "Broken pipe", "connection unexpectedly closed")
        cause = [ln for ln in lines if not any(g in ln for g in generic)] or lines
        return self.login.fail(f"rsync {what} failed ({done.returncode}): {cause[-1] if cause else 'no message'}")

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
                raise self.login.fail(f"cannot create {parent}: {result.stderr.strip()[-200:]}")

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

def _pull_modes(folder_mode: int) -> str:
    """What a pull gives what it creates, by the folder it lands in: in one its group may write (a
    shared home's results/ID) the group's as the home's own files are (setgid folders, never
    world-readable); elsewhere the worker's modes, made ours to write."""
    if folder_mode & stat.S_IWGRP and not folder_mode & stat.S_ISVTX:  # a home of the old shared layout
        return "--chmod=Dug+rwx,Dg+s,Do-rwx,Fug+rwX,Fo-rwx"
    if folder_mode & stat.S_IRGRP and folder_mode & stat.S_ISGID:  # one writer: the group reads, never writes
        return "--chmod=Du+rwx,Dg+rxs,Dg-w,Do-rwx,Fu+rwX,Fg+rX,Fg-w,Fo-rwx"
    return "--chmod=u+rwX"


@functools.cache  # asked once a process: the installed rsync does not change under it
def _rsync_has_mkpath() -> bool:
    try:
        out = subprocess.run(["rsync", "--version"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        out = ""
    m = re.search(r"version\s+(\d+)\.(\d+)\.(\d+)", out)
    return m is not None and tuple(int(x) for x in m.groups()) >= (3, 2, 3)

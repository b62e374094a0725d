"""Connecting to an SSH worker: TCP, banner, key exchange, the host key checked against the home's own
known_hosts under the machine's host_key_policy, and authentication, all within connect_timeout."""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import socket
import threading
import time

from jobtpu.errors import RemoteError
from jobtpu.home.layout import Home
from jobtpu.schema.fleet import Machine
from jobtpu.transport._paramiko import paramiko
from jobtpu.transport.base import Endpoint
from jobtpu.transport.hostkeys import (
    HostKeyRefused,
    fingerprint,
    forget_command,
    host_pattern,
    known_keys,
    remember_host_key,
)

_keys_lock = threading.Lock()
_key_cache: dict[str, tuple[tuple[int, int], paramiko.PKey]] = {}


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called for a host with no recorded key of the type it offered (a recorded key of that type
    that differs never gets here: paramiko raises BadHostKeyException)."""

    def __init__(self, login: SshLogin) -> None:
        self.t = login

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        t = self.t
        policy = t.machine.host_key_policy
        if policy == "off":
            return
        if policy == "accept-new" or f"{key.get_name()} {key.get_base64()}" in t.trusted_keys:
            remember_host_key(t.home, t.addr, t.port, key)
            return
        raise HostKeyRefused("unknown")


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



class SshLogin:
    """Who and where one SSH worker is, and its one paramiko client once connected."""

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
        self.client: paramiko.SSHClient | None = None

    @property
    def label(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"{self.endpoint.machine}[{self.endpoint.index}] {host}:{self.port}"

    def fail(self, what: str) -> RemoteError:
        return RemoteError(f"{self.label}: {what}")

    def connect(self) -> paramiko.SSHClient:
        """TCP connect, banner, key exchange, host key check and authentication, all within
        connect_timeout; every failure is a one-line RemoteError naming the worker."""
        if self.client is not None:
            return self.client
        limit = self.machine.connect_timeout
        deadline = time.monotonic() + limit
        try:
            sock = socket.create_connection((self.addr, self.port), timeout=limit)
        except TimeoutError:
            raise self.fail(f"no answer within {limit:g}s (connect_timeout)") from None
        except ConnectionRefusedError:
            raise self.fail("connection refused") from None
        except OSError as e:
            raise self.fail((e.strerror or str(e)).lower()) from None
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
                    raise self.fail(f"cannot use identity_file {self.identity}: {e}") from None
            client.connect(self.addr, self.port, self.user, sock=sock, timeout=left, banner_timeout=left,
                           auth_timeout=left, channel_timeout=left, **auth)
            ok = True
        except HostKeyRefused as e:
            raise self.host_key_error(str(e)) from None
        except paramiko.BadHostKeyException as e:
            raise self.fail(f"host key changed: it offers {fingerprint(e.key)}, known_hosts has "
                             f"{fingerprint(e.expected_key)}; refusing (possible impostor). If the host was "
                             f"rebuilt, forget the old key: {forget_command(self.home, self.addr, self.port)}"
                             ) from None
        except paramiko.AuthenticationException:
            how = f"key {self.identity}" if self.identity else "ssh-agent and ~/.ssh keys"
            raise self.fail(f"authentication failed as {self.user} ({how}); check 'user' and "
                             "'identity_file' in machines.json") from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            # paramiko's own banner and auth timers run out at the deadline too, a moment before the
            # watchdog's: either way the handshake took the whole connect_timeout.
            if expired.is_set() or time.monotonic() >= deadline - 0.25:
                raise self.fail(f"SSH handshake did not finish within {limit:g}s (connect_timeout)") from None
            raise self.fail(f"SSH handshake failed: {e or type(e).__name__}") from None
        finally:
            with settled:  # a handshake that made it in time is never cut by a late watchdog
                done = True
            watchdog.cancel()
            if not ok:
                client.close()
                sock.close()
        self.client = client
        return client

    def host_key_error(self, kind: str) -> RemoteError:
        if kind == "changed":  # another thread recorded a different key meanwhile
            return self.fail("host key changed while connecting; refusing. If the host was rebuilt, "
                              f"forget the old key: {forget_command(self.home, self.addr, self.port)}")
        scan = f"ssh-keyscan -p {self.port} {self.addr}"
        return self.fail(f"unknown host key and host_key_policy is strict; after checking it, add it "
                          f"with `{scan} >> {shlex.quote(str(self.home.known_hosts))}`, or use accept-new")

    def ensure_known(self) -> None:
        """The host key checked (and under accept-new recorded) before the OpenSSH client is run."""
        if self.machine.host_key_policy != "off" and not known_keys(self.home, self.addr, self.port):
            self.connect()  # checks (and under accept-new records) the host key, under our lock

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

"""The home's own known_hosts (never ~/.ssh/known_hosts): lookups, trust on first contact under a lock
with atomic rewrites, forgetting a rebuilt host's keys, and the command a user runs to forget one."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import shlex
import threading
from collections.abc import Iterator

from jobtpu.errors import RemoteError
from jobtpu.home.layout import Home, open_lock, write_atomic
from jobtpu.home.safefs import CAP_CONFIG, UnsafePath, read_regular
from jobtpu.transport._paramiko import paramiko

_known_lock = threading.Lock()  # threads of one process; the flock below covers other processes
_cache_lock = threading.Lock()
_hosts_cache: dict[str, tuple[tuple[int, int, int], list[tuple[list[str], paramiko.PKey]]]] = {}


class HostKeyRefused(Exception):
    """Raised from inside the handshake: "unknown" (strict, key not recorded) or "changed"."""


def host_pattern(addr: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts: `addr` on port 22, else `[addr]:port`."""
    return addr if port == 22 else f"[{addr}]:{port}"


def forget_command(home: Home, addr: str, port: int) -> str:
    return f"ssh-keygen -R {shlex.quote(host_pattern(addr, port))} -f {shlex.quote(str(home.known_hosts))}"


def fingerprint(key: paramiko.PKey) -> str:
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def _parse(lines: list[str]) -> list[tuple[list[str], paramiko.PKey]]:
    """(host names, key) of every usable line; comments, markers and lines we cannot read are skipped."""
    out = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith(("#", "@")):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(text)
        except (paramiko.SSHException, paramiko.UnknownKeyType, paramiko.hostkeys.InvalidHostKey, ValueError):
            continue
        if entry is not None and entry.key is not None:
            out.append((entry.hostnames, entry.key))
    return out


def _entries(home: Home) -> list[tuple[list[str], paramiko.PKey]]:
    """The parsed file, cached while it does not change (a pass connects to many hosts at once)."""
    path = home.known_hosts
    try:
        st = path.stat()
    except FileNotFoundError:
        return []
    sig = (st.st_mtime_ns, st.st_size, st.st_ino)
    with _cache_lock:
        hit = _hosts_cache.get(str(path))
        if hit is not None and hit[0] == sig:
            return hit[1]
    entries = _parse(_read(home).decode(errors="replace").splitlines())
    with _cache_lock:
        _hosts_cache[str(path)] = (sig, entries)
    return entries


def _read(home: Home) -> bytes:
    """known_hosts through safefs: a link, a FIFO or a file past its cap there is a RemoteError, so the
    machine being reached is unreachable with that line and the pass goes on."""
    try:
        return read_regular(home.root, home.known_hosts, CAP_CONFIG)
    except UnsafePath as e:
        raise RemoteError(e.message, hint=e.hint) from None


def _keys_for(entries: list[tuple[list[str], paramiko.PKey]], pattern: str) -> dict[str, paramiko.PKey]:
    return {key.get_name(): key for names, key in entries if _matches(names, pattern)}


def known_keys(home: Home, addr: str, port: int) -> dict[str, paramiko.PKey]:
    """key type → key recorded for that host (hashed entries included)."""
    return _keys_for(_entries(home), host_pattern(addr, port))


@contextlib.contextmanager
def _locked_known_hosts(home: Home) -> Iterator[list[str]]:
    """Hold the known_hosts lock; yield its lines; write them back atomically if the list changed."""
    home.ensure()
    with _known_lock:
        fd = open_lock(home.root / "known_hosts.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                lines = _read(home).decode().splitlines()
            except FileNotFoundError:
                lines = []
            before = list(lines)
            yield lines
            if lines != before:
                write_atomic(home.known_hosts, "".join(line + "\n" for line in lines).encode())
        finally:
            os.close(fd)


def remember_host_key(home: Home, addr: str, port: int, key: paramiko.PKey) -> None:
    """Trust `key` for the host (accept-new's first contact, or a TPU's published key).
    Raises HostKeyRefused when another key is already recorded for it (checked under the lock)."""
    pattern = host_pattern(addr, port)
    with _locked_known_hosts(home) as lines:
        found = _keys_for(_parse(lines), pattern)
        if found:
            if found.get(key.get_name()) == key:
                return
            raise HostKeyRefused("changed")
        lines.append(f"{pattern} {key.get_name()} {key.get_base64()}")


def forget_host(home: Home, addr: str, port: int) -> int:
    """Drop every key recorded for the host (a TPU jobtpu recreated); how many lines went."""
    pattern = host_pattern(addr, port)
    with _locked_known_hosts(home) as lines:
        keep = [line for line in lines if not any(_matches(names, pattern) for names, _ in _parse([line]))]
        gone = len(lines) - len(keep)
        lines[:] = keep
    return gone


def _matches(names: list[str], pattern: str) -> bool:
    for name in names:
        if name.startswith("|1|"):
            salt = name.split("|")[2]
            if paramiko.HostKeys.hash_host(pattern, salt) == name:
                return True
        elif name == pattern:
            return True
    return False

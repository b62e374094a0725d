"""How a transport to one worker is made, on this computer or over SSH; a machine's driver
(fleet/drivers.py) picks which."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from jobtpu.home.layout import Home, is_shared
from jobtpu.schema.fleet import Machine
from jobtpu.transport.base import Endpoint, Transport


def local_transport(machine: Machine, endpoint: Endpoint, passed: tuple[str, ...] = ()) -> Transport:
    """The way to this computer's worker: its processes, under the machine's run root; its scripts
    keep the pass's `passed` variables besides a login's environment."""
    from jobtpu.transport.local import LocalTransport

    root = Path(machine.root).expanduser()
    # The folder the run root is made in decides, not the run root itself: a launch of this pass
    # in another thread may have just made it (mkdir under the umask, its modes set a moment later).
    return LocalTransport(endpoint, shared=_in_shared_folder(root.parent), root=root,
                          members_write=_group_writes(root.parent), passed=passed)


def ssh_transport(machine: Machine, endpoint: Endpoint, home: Home, trusted: Iterable[str] = ()) -> Transport:
    """`trusted`: "type base64" host keys the worker's provider published for it (strict policy)."""
    # Imported here so that commands which never touch a remote machine never load paramiko.
    from jobtpu.transport.ssh import SshTransport
    t = SshTransport(endpoint, machine, home)
    t.trusted_keys = set(trusted)
    return t


def _in_shared_folder(path: Path) -> bool:
    """Whether `path`, or the nearest folder above it that exists, is one its group reads: a shared
    home's (old layout: group-writable; one-writer layout: setgid, the group reads)."""
    import stat

    path = _existing(path)
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return is_shared(path) or bool(mode & stat.S_ISGID and mode & stat.S_IRGRP)


def _group_writes(path: Path) -> bool:
    """Whether members add entries there themselves (a shared home of the old layout)."""
    return is_shared(_existing(path))


def _existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


"""Which workers a machine has and how to reach each: the only module that picks a transport."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from jobtpu.home.layout import Home, is_shared
from jobtpu.remote.drivers import driver_for
from jobtpu.schema.fleet import Machine
from jobtpu.schema.records import MachineRecord
from jobtpu.transport.base import Endpoint, Transport


def endpoints(machine: Machine, tpu_addresses: list[str] | None = None) -> list[Endpoint]:
    """One endpoint per worker, in worker order. A TPU's addresses come from the TPU API."""
    return driver_for(machine).endpoints(machine, tpu_addresses)


def transport(machine: Machine, endpoint: Endpoint, home: Home, trusted: Iterable[str] = ()) -> Transport:
    """`trusted`: "type base64" host keys the TPU API publishes for this worker (strict policy)."""
    if endpoint.addr is None:
        from jobtpu.transport.local import LocalTransport
        root = Path(machine.root).expanduser()
        # The folder the run root is made in decides, not the run root itself: a launch of this pass
        # in another thread may have just made it (mkdir under the umask, its modes set a moment later).
        return LocalTransport(endpoint, shared=_in_shared_folder(root.parent), root=root,
                              members_write=_group_writes(root.parent))
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


def published_keys(record: MachineRecord | None, worker: int) -> list[str]:
    """The host keys a TPU node published for one worker, as the last pass recorded them."""
    keys = (record.host_keys if record is not None else None) or []
    return list(keys[worker]) if worker < len(keys) else []

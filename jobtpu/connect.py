"""Which workers a machine has and how to reach each: the only module that picks a transport."""

from __future__ import annotations

from .fleet import Machine, split_host
from .home import Home
from .transport.base import Endpoint, Transport


def endpoints(machine: Machine, tpu_addresses: list[str] | None = None) -> list[Endpoint]:
    """One endpoint per worker, in worker order. A TPU's addresses come from the TPU API."""
    if machine.kind == "local":
        return [Endpoint(machine.name, 0, None)]
    if machine.kind == "tpu":
        return [Endpoint(machine.name, i, addr, machine.port) for i, addr in enumerate(tpu_addresses or [])]
    out = []
    for i, host in enumerate(machine.hosts):
        addr, port = split_host(host, machine.port)
        out.append(Endpoint(machine.name, i, addr, port))
    return out


def transport(machine: Machine, endpoint: Endpoint, home: Home) -> Transport:
    if endpoint.addr is None:
        from .transport.local import LocalTransport
        return LocalTransport(endpoint)
    # Imported here so that commands which never touch a remote machine never load paramiko.
    from .transport.ssh import SshTransport
    return SshTransport(endpoint, machine, home)

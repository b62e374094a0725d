"""The TPU driver's own part of a session (docs/design.md §5.1): what one pass or command learns of
the TPU machines while it runs, kept out of the connection layer. Its TPU API client (made on first
use: google-cloud is loaded only when a TPU machine is in play), each machine's node as the API
described it, and its workers' addresses, which say where its workers are until the API is asked again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from jobtpu.schema.fleet import MachineKind
from jobtpu.schema.state import State

if TYPE_CHECKING:
    from jobtpu.schema.tpu_answers import NodeInfo
    from jobtpu.tpu.api import TpuApi
    from jobtpu.transport.base import WorkerAccess


class TpuRuntime:
    """One session's TPU state: made by the TPU driver (fleet/drivers.py) when the session starts."""

    def __init__(self, gcp: dict[str, Any], state: State) -> None:
        self._gcp = gcp
        self._api: TpuApi | None = None
        self.nodes: dict[str, NodeInfo | None] = {}  # machine → its node this session (None: no such node)
        # Until a pass asks the TPU API again, the TPU workers are where the last pass saw them.
        self.addresses: dict[str, list[str]] = {
            name: list(record.addresses) for name, record in state.machines.items() if record.addresses is not None}

    def api(self) -> TpuApi:
        if self._api is None:
            from jobtpu.tpu.api import TpuApi

            self._api = TpuApi(self._gcp)
        return self._api

    def saw(self, name: str, node: NodeInfo | None, addresses: list[str] | None = None) -> None:
        """What the API said of a machine's node; its workers' addresses when they are known."""
        self.nodes[name] = node
        if addresses is not None:
            self.addresses[name] = addresses


def tpu_runtime(p: WorkerAccess) -> TpuRuntime:
    """The session's TPU state, as the TPU driver keeps it."""
    return cast(TpuRuntime, p.runtime(MachineKind.TPU))

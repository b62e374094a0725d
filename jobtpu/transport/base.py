"""The one small interface every way of reaching a worker implements, and its result value."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.home.layout import Home
    from jobtpu.schema.fleet import Fleet, Machine, MachineKind
    from jobtpu.schema.state import State


def whole(script: str) -> str:
    """`script` as one brace group, the form every transport sends: bash parses a group whole before
    it runs any of it, so a script cut short on its way (the pass that wrote it killed mid-write, a
    connection dropped) runs nothing, instead of its first commands and a last one whose words were
    cut (a job id 12 read as 1)."""
    return "{\n" + script + "\n}\n"


class Result(msgspec.Struct, frozen=True):
    """What a script did on a worker: its exit code and its output, as values (like invoke's Result)."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Endpoint(msgspec.Struct, frozen=True):
    """One worker's address: the host it is on and how to log in there."""

    machine: str
    index: int
    addr: str | None  # None for the local machine
    port: int = 22


class Transport(Protocol):
    endpoint: Endpoint

    def run(self, script: str, timeout: float | None = None) -> Result:
        """Run a bash script (read whole before it runs). Raises RemoteError when the host cannot be
        reached or refuses us; a script that runs and fails is a Result, not an exception."""
        ...

    def push(self, local: Path, remote: str) -> None:
        """Copy one local file to a path on the worker (relative to its login folder unless absolute),
        atomically, through a temporary file no other copy uses (copies may run at once), replacing
        whatever is there even when its size and time match."""
        ...

    def pull(self, remote: str, local: Path, into: int | None = None) -> None:
        """Copy a remote file or folder (its contents) into a local folder, recursively: into the open
        folder `into` when given (`local` then only names it), never through a link planted there."""
        ...

    def close(self) -> None: ...


class WorkerAccess(Protocol):
    """What a kind's own code (tpu/) asks of the session that reaches workers (fleet/reach.py's Reach),
    as an interface below both: the driver that holds that code sits above it, and the session above
    the driver, so the three form no knot."""

    home: Home
    fleet: Fleet
    state: State
    dry_run: bool
    notes: list[str]

    def runtime(self, kind: MachineKind) -> Any: ...

    def parallel(self, fn: Callable[[Any], Any], items: list[Any] | tuple[Any, ...]) -> list[Any]: ...

    def endpoints(self, machine: Machine) -> list[Endpoint]: ...

    def connected(self, machine: Machine, endpoint: Endpoint,
                  reuse: bool = True) -> AbstractContextManager[Transport]: ...

    def run_on(self, machine: Machine, endpoint: Endpoint, script: str, timeout: float | None = None) -> str: ...

"""A manage pass's context: the session it runs in, with what belongs to that one pass (the TPU steps
it planned, the snapshots it checked and copied), and the report it hands back. Passed along from
step to step (passes/manage.py); nothing of a pass outlives it but what it saved."""

from __future__ import annotations

import threading
from collections.abc import Callable

from jobtpu.decide.tpu_plan import MachineWork
from jobtpu.home.layout import Home
from jobtpu.home.store import State, StateVersion
from jobtpu.passes.session import KeptConnections, Session
from jobtpu.remote.scripts import archive_path
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.snapshot.archive import home_problem
from jobtpu.transport.base import Endpoint


class PassReport(msgspec.Struct):
    notes: list[str] = msgspec.field(default_factory=list)
    skipped: bool = False  # another pass was running
    on_note: Callable[[str], None] | None = None  # shows a line as the pass goes (a cron pass's stderr)
    state_left: bytes | None = None  # state.json's stamp as the pass left it (store.stamp_of); b"": look again

    def say(self, line: str) -> None:
        """A line for the report, shown now too: for what a pass learns after its notes were shown."""
        self.notes.append(line)
        if self.on_note:
            self.on_note(line)


class Pass(Session):
    """A session for one manage pass: it also checks and copies the home's snapshots to workers."""

    def __init__(self, home: Home, fleet: Fleet, state: State, snapshot: StateVersion | None = None,
                 kept: KeptConnections | None = None) -> None:
        super().__init__(home, fleet, state, snapshot, kept)
        # Per pass: the home's snapshots already checked, and the (worker, snapshot) copies made, so
        # jobs that share a new snapshot and launch together check and copy it once, one at a time.
        self._locks_lock = threading.Lock()
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._archive_problems: dict[str, str | None] = {}
        self._pushed: set[tuple[str, ...]] = set()
        self.copy_notes: list[tuple[int, int, str]] = []  # (job, worker, line): how launches got their snapshot
        self.machine_work: dict[str, MachineWork] = {}  # machines' steps (a TPU's), planned while observing

    def _lock(self, key: tuple[str, ...]) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(key, threading.Lock())

    def home_archive_problem(self, name: str) -> str | None:
        """Why the home's copy of a snapshot cannot be sent (missing, damaged), or None; checked once a pass."""
        with self._lock(("check", name)):
            if name not in self._archive_problems:
                self._archive_problems[name] = home_problem(self.home.root, name)
            return self._archive_problems[name]

    def push_archive(self, machine: Machine, endpoint: Endpoint, name: str) -> None:
        """Copy the home's snapshot to the worker, once a pass however many launches ask for it."""
        key = ("push", machine.name, str(endpoint.index), machine.root, name)
        with self._lock(key):
            if key in self._pushed:
                return
            with self.connected(machine, endpoint) as t:
                t.push(self.home.archive(name), archive_path(machine.root, name))
            self._pushed.add(key)



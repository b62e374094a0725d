"""The way to each worker of the fleet, outside the pass that uses it: a bounded thread pool, the
home's id, the connections and threads a loop keeps between its rounds, and the Reach object that
knows the fleet, the state it read and how to reach each worker (docs/design.md §5.1). What a kind of
machine keeps while a session runs (a TPU's nodes, addresses and API client) is its driver's own
part, held here by kind and read only by that driver (`Reach.runtime`).

remote/ and tpu/ work through a Reach; passes/session.py's Session is one that also saves state.json.
Commands that only reach workers (doctor, tail -f, fetch) build a Reach of their own."""

from __future__ import annotations

import contextlib
import os
import re
import secrets as random_ids
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jobtpu import timing
from jobtpu.decide.reach import Contacts
from jobtpu.errors import JobtpuError, RemoteError, UnreachableError
from jobtpu.fleet.drivers import DRIVERS, driver_for
from jobtpu.home import safefs
from jobtpu.home.layout import Home, create_temp
from jobtpu.schema.fleet import Fleet, Machine, MachineKind
from jobtpu.schema.state import State
from jobtpu.transport.base import Endpoint, Transport

MAX_PARALLEL = 32


def parallel(fn: Callable[[Any], Any], items: list[Any] | tuple[Any, ...],
             kept: KeptConnections | None = None) -> list[Any]:
    """Run fn over items on a bounded thread pool; results in item order. With a loop's `kept`
    connections the pool's threads are kept between rounds too (starting 32 threads costs a warm
    round more than its work); a call from one of them (a nested parallel) gets a pool of its own,
    so a full pool never waits on itself."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    if kept is not None and not in_pool_thread():
        return list(kept.threads.map(fn, items))
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(items)), initializer=_mark_pool_thread) as pool:
        return list(pool.map(fn, items))


_IN_POOL = threading.local()  # set in the threads of every pool parallel runs on, kept or not


def _mark_pool_thread() -> None:
    _IN_POOL.yes = True


def in_pool_thread() -> bool:
    return getattr(_IN_POOL, "yes", False)


HOME_ID = re.compile(r"^[0-9a-f]{16}$")


def home_id(home: Home) -> str:
    """The home's stable random id, made once (file `home_id`): part of the marker in every job
    process's environment, so that a worker tells this home's jobs from another home's."""
    path = home.root / "home_id"
    try:
        text = _read_home_id(home)
    except FileNotFoundError:
        home.ensure()
        made = random_ids.token_hex(8)
        fd, tmp = create_temp(path)  # a random name, never through a planted symlink
        with os.fdopen(fd, "w") as f:
            f.write(made + "\n")
        try:
            os.link(tmp, path)  # all or nothing, and the first of two racing makers wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        text = _read_home_id(home)
    if not HOME_ID.match(text):  # never echoed: a member may have linked it to a file of secrets
        raise JobtpuError(f"{path} does not hold a home id (16 hex digits)",
                          hint="restore it; deleting it gives the home a new id, and its running jobs "
                               "are then no longer recognised on their machines")
    return text


def _read_home_id(home: Home) -> str:
    return safefs.read_regular(home.root, "home_id", safefs.CAP_ID).decode("utf-8", "replace").strip()


class Reach:
    """The home, the fleet, the state read from state.json, and the way to each worker. Work outside a
    pass that only reaches workers (doctor, tail -f, fetch) uses one; a pass's Session is one."""

    def __init__(self, home: Home, fleet: Fleet, state: State, kept: KeptConnections | None = None) -> None:
        self.home, self.fleet, self.state = home, fleet, state
        self.kept = kept  # the loop's connections and threads kept between its rounds, if a loop runs this
        self._last = threading.local()  # whether this thread's last block got a kept connection
        self.dry_run = False  # observe only: machine steps (TPU deletes, creates, setup) become notes
        self.notes: list[str] = []
        self._home_id: str | None = None
        self.contacts = Contacts()  # every worker contacted and how it went: a pass's reach.reachability
        # Each kind's own state for this session, made by its driver now (no thread races to make it).
        self._runtimes = {kind: driver.new_runtime(fleet, state) for kind, driver in DRIVERS.items()}

    def runtime(self, kind: MachineKind) -> Any:
        """What the driver of `kind` keeps while this session runs (None for a kind that keeps nothing);
        for that driver's own code only (tests/test_layers.py)."""
        return self._runtimes[kind]

    @property
    def home_id(self) -> str:
        if self._home_id is None:
            self._home_id = home_id(self.home)
        return self._home_id

    def parallel(self, fn: Callable[[Any], Any], items: list[Any] | tuple[Any, ...]) -> list[Any]:
        """`parallel` on the threads of the loop running this session, when one does."""
        return parallel(fn, items, self.kept)

    def endpoints(self, machine: Machine) -> list[Endpoint]:
        driver = driver_for(machine)
        return driver.endpoints(machine, self._runtimes[driver.kind])

    def internal_addresses(self, machine: Machine) -> tuple[str, ...]:
        driver = driver_for(machine)
        return driver.internal_addresses(machine, self._runtimes[driver.kind])

    @contextlib.contextmanager
    def connected(self, machine: Machine, endpoint: Endpoint, reuse: bool = True) -> Iterator[Transport]:
        """A transport to one worker, closed when the block ends however it ends. Under `strict`, a
        TPU worker is trusted through the host keys its node published (recorded by a pass).
        With a loop's `kept` connections, an SSH connection that served a block without failing is
        kept for the next block to the same worker (the next round of the loop) instead."""
        driver = driver_for(machine)
        trusted = driver.trusted_keys(self.state.machines.get(machine.name), endpoint.index)
        pool = self.kept if endpoint.addr is not None else None
        key = _pool_key(machine, endpoint, trusted)
        t = pool.take(key) if pool is not None and reuse else None
        self._last.reused = t is not None
        if t is None:
            t = driver.transport(machine, endpoint, self.home, trusted)
        served = False
        try:
            yield t
            served = True
        except RemoteError as e:
            self.contacts.add(machine.name, endpoint.index, e.message)
            raise
        finally:
            if pool is not None and served:
                pool.give(key, t)
            else:
                t.close()  # a failed connection is never reused: the next block reconnects
        self.contacts.add(machine.name, endpoint.index)

    def run_on(self, machine: Machine, endpoint: Endpoint, script: str, timeout: float | None = None) -> str:
        """Run a script on one worker; its stdout. Raises RemoteError when the worker cannot be reached."""
        timeout = timing.current().script_timeout if timeout is None else timeout
        try:
            with self.connected(machine, endpoint) as t:
                result = t.run(script, timeout=timeout)
        except UnreachableError:
            if not self._last.reused:
                raise
            # A kept connection the worker (or a NAT) dropped while idle: nothing was sent on it
            # (that is what UnreachableError means), so one fresh connection may run the script.
            with self.connected(machine, endpoint, reuse=False) as t:
                result = t.run(script, timeout=timeout)
        if result.exit_code != 0 and not result.stdout:
            error = RemoteError(f"{machine.name}[{endpoint.index}]: script failed ({result.exit_code}): "
                                f"{result.stderr.strip()[-300:]}")
            self.contacts.add(machine.name, endpoint.index, error.message)  # it answered, but cannot work
            raise error
        return result.stdout


# ---- connections kept between rounds (manage --loop, watch) ------------------------------------------

# Kept connections get SSH keepalives (timing's keepalive): NATs and sshd forget idle ones.


class KeptConnections:
    """Idle SSH connections by worker, and a pool of threads, kept between the rounds of a loop
    (manage --loop, watch): the loop owns one and hands it to each round's session. A block takes a
    connection for itself (never shared by two threads at once) and gives it back when it ends
    without failing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[Any, ...], list[Transport]] = {}
        self.threads = ThreadPoolExecutor(max_workers=MAX_PARALLEL, initializer=_mark_pool_thread)

    def take(self, key: tuple[Any, ...]) -> Transport | None:
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def give(self, key: tuple[Any, ...], t: Transport) -> None:
        keep_alive = getattr(t, "keep_alive", None)
        if keep_alive is not None:
            keep_alive(timing.current().keepalive)
        with self._lock:
            self._idle.setdefault(key, []).append(t)

    def close(self) -> None:
        """Stop the threads and close every idle connection: the loop ends."""
        self.threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            idle, self._idle = self._idle, {}
        for ts in idle.values():
            for t in ts:
                with contextlib.suppress(Exception):
                    t.close()


def _pool_key(machine: Machine, endpoint: Endpoint, trusted: list[str]) -> tuple[Any, ...]:
    """Everything that decides how a connection is made: a change in machines.json (user, key,
    policy) or a recreated node (new published keys) makes a new connection, never reuses one."""
    return (machine.name, endpoint.index, endpoint.addr, endpoint.port, machine.user, machine.identity_file,
            machine.host_key_policy, machine.connect_timeout, tuple(trusted))


@contextlib.contextmanager
def kept_connections(enabled: bool = True) -> Iterator[KeptConnections | None]:
    """Connections and threads for a loop's sessions to keep between blocks (its rounds then cost no
    handshake per host), closed when it ends; None when not enabled."""
    if not enabled:
        yield None
        return
    kept = KeptConnections()
    try:
        yield kept
    finally:
        kept.close()

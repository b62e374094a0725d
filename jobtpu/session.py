"""What commands share with the manage pass: the pass lock, the home's id, a bounded thread pool, and
the session object that knows the fleet, the state it read and how to reach each worker.

Below manage.py, tpuflow.py, operations.py, doctor.py and the commands: none of them imports another
to borrow these."""

from __future__ import annotations

import contextlib
import os
import re
import secrets as random_ids
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .connect import endpoints, published_keys, transport
from .errors import BusyError, JobtpuError, RemoteError
from .fleet import Fleet, Machine, load_fleet
from .home import Home, create_temp, open_lock
from .model import Job
from .store import Snapshot, State, Store, encode, encode_jobs, try_lock
from .transport.base import Endpoint, Transport

MAX_PARALLEL = 32


def parallel(fn: Callable[[Any], Any], items: list[Any] | tuple[Any, ...]) -> list[Any]:
    """Run fn over items on a bounded thread pool; results in item order."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(items))) as pool:
        return list(pool.map(fn, items))


HOME_ID = re.compile(r"^[0-9a-f]{16}$")


def home_id(home: Home) -> str:
    """The home's stable random id, made once (file `home_id`): part of the marker in every job
    process's environment, so that a worker tells this home's jobs from another home's."""
    path = home.root / "home_id"
    try:
        text = path.read_text().strip()
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
        text = path.read_text().strip()
    if not HOME_ID.match(text):
        raise JobtpuError(f"{path} does not hold a home id (16 hex digits): {text[:40]!r}",
                          hint="restore it; deleting it gives the home a new id, and its running jobs "
                               "are then no longer recognised on their machines")
    return text


@contextlib.contextmanager
def pass_lock(home: Home, wait: float) -> Iterator[bool]:
    """Hold the home's pass lock (waiting up to `wait` seconds); yields whether it was taken."""
    home.ensure()
    fd = open_lock(home.pass_lock)
    try:
        yield try_lock(fd, wait)
    finally:
        os.close(fd)


class Session:
    """The home, the fleet, the state read from state.json, and the way to each worker. Commands that
    act on the fleet outside a pass (kill, clean, tpu, tail -f, fetch) use one; a pass builds on it."""

    def __init__(self, home: Home, fleet: Fleet, state: State, snapshot: Snapshot | None = None) -> None:
        self.home, self.fleet, self.state = home, fleet, state
        self.store = Store(home)
        # What state.json held when read (or last saved): a commit merges against it, and reads the
        # file again only if someone else wrote it meanwhile.
        self.snapshot = snapshot or Snapshot(None, None)
        self.base = encode(state)
        self.dry_run = False  # observe only: machine steps (TPU deletes, creates, setup) become notes
        self.notes: list[str] = []
        self.addresses: dict[str, list[str]] = {}  # worker addresses of TPU machines, from the API
        self.nodes: dict[str, Any] = {}  # TPU machine → its NodeInfo (None: no such node) this session
        self._tpu: Any = None
        self._home_id: str | None = None
        # Until a pass asks the TPU API again, the TPU workers are where the last pass saw them.
        for name, record in state.machines.items():
            if record.addresses is not None:
                self.addresses[name] = list(record.addresses)

    def tpu_api(self) -> Any:
        if self._tpu is None:
            from .tpu import TpuApi  # google-cloud is loaded only when a TPU machine is in play
            self._tpu = TpuApi(self.fleet.gcp)
        return self._tpu

    @property
    def home_id(self) -> str:
        if self._home_id is None:
            self._home_id = home_id(self.home)
        return self._home_id

    def endpoints(self, machine: Machine) -> list[Endpoint]:
        return endpoints(machine, self.addresses.get(machine.name))

    @contextlib.contextmanager
    def connected(self, machine: Machine, endpoint: Endpoint) -> Iterator[Transport]:
        """A transport to one worker, closed when the block ends however it ends. Under `strict`, a
        TPU worker is trusted through the host keys its node published (recorded by a pass)."""
        t = transport(machine, endpoint, self.home,
                      published_keys(self.state.machines.get(machine.name), endpoint.index))
        try:
            yield t
        finally:
            t.close()

    def run_on(self, machine: Machine, endpoint: Endpoint, script: str, timeout: float = 120) -> str:
        """Run a script on one worker; its stdout. Raises RemoteError when the worker cannot be reached."""
        with self.connected(machine, endpoint) as t:
            result = t.run(script, timeout=timeout)
        if result.exit_code != 0 and not result.stdout:
            raise RemoteError(f"{machine.name}[{endpoint.index}]: script failed ({result.exit_code}): "
                              f"{result.stderr.strip()[-300:]}")
        return result.stdout

    def commit(self) -> None:
        """Merge this session's view of the jobs into state.json: jobs it changed are written, jobs it
        removed (clean) are removed, jobs submitted or hand-edited meanwhile are kept, jobs deleted
        by hand stay deleted. Saves only what changed; reads the file again only if another command
        wrote it since this session read (or saved) it."""
        with self.store.lock():
            if self.store.unchanged(self.snapshot):
                self.snapshot = self.store.save_if_changed(self.state, self.base, self.snapshot)
            else:
                disk, snapshot = self.store.read()
                original = encode(disk)
                disk.jobs = self._merged(disk.jobs)
                disk.machines = self.state.machines
                self.state.next_id = disk.next_id
                self.store.save_if_changed(disk, original, snapshot)
                # The file now holds jobs this session does not (submitted meanwhile): the next
                # commit must merge with it again, never save the session's own list over it.
                self.snapshot = Snapshot(None, None)
        # What is on disk now is the base of the next commit.
        self.base = encode(self.state)

    def _merged(self, on_disk: list[Job]) -> list[Job]:
        mine = {job.id: (job, line) for job, line in zip(self.state.jobs, encode_jobs(self.state.jobs), strict=True)}
        base = dict(zip(self.base.ids, self.base.jobs, strict=True))
        merged: list[Job] = []
        for job in on_disk:
            ours = mine.get(job.id)
            if ours is None:
                if job.id not in base:
                    merged.append(job)  # submitted while we worked
                continue  # else: this session removed it
            merged.append(ours[0] if ours[1] != base.get(job.id) else job)
        return merged


def load_session(home: Home) -> Session:
    """A session over the home as it is now, without the pass lock (for commands that only read or
    that act on one job's workers, like `tail -f` and `fetch`)."""
    return Session(home, load_fleet(home), *Store(home).read())


@contextlib.contextmanager
def locked_session(home: Home, wait: float = 60.0) -> Iterator[Session]:
    """For kill/resume/rerun/clean/tpu: hold the pass lock (no pass runs meanwhile), commit at the end."""
    with pass_lock(home, wait) as got:
        if not got:
            raise BusyError(f"a manage pass has held {home.pass_lock} for over {wait:.0f}s",
                            hint="wait for it to finish, or look for a stuck `jobtpu manage`")
        session = load_session(home)
        yield session
        session.commit()

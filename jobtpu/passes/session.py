"""What commands share with the manage pass: the pass lock, and the session object that is a Reach
(fleet/reach.py: the fleet, the state it read, how to reach each worker, a loop's kept
connections) that also merges what it changed into state.json.

Below manage.py and the commands: none of them imports another to borrow these. remote/ and tpu/
sit below it and work through a Reach (docs/design.md §5.1)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from jobtpu import timing
from jobtpu.errors import BusyError
from jobtpu.fleet.reach import KeptConnections as KeptConnections
from jobtpu.fleet.reach import Reach
from jobtpu.fleet.reach import home_id as home_id
from jobtpu.fleet.reach import kept_connections as kept_connections
from jobtpu.fleet.reach import parallel as parallel
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet
from jobtpu.home.store import StateVersion, Store, pass_lock
from jobtpu.schema.events import Event
from jobtpu.schema.fleet import Fleet
from jobtpu.schema.state import Job, LastPass, State
from jobtpu.schema.state_file import Encoded, encode, encode_head, encode_jobs


class Session(Reach):
    """A Reach that also saves: commands that act on the fleet outside a pass (kill, clean, tpu) use
    one under the pass lock; a pass builds on it."""

    def __init__(self, home: Home, fleet: Fleet, state: State, snapshot: StateVersion | None = None,
                 kept: KeptConnections | None = None) -> None:
        super().__init__(home, fleet, state, kept)
        self.store = Store(home)
        # What state.json held when read (or last saved): a commit merges against it, and reads the
        # file again only if someone else wrote it meanwhile.
        self.snapshot = snapshot or StateVersion(None, None)
        self.base = encode(state)
        self.base_untold = list(state.untold)  # the untold events as on disk (a merge drops what we told)

    def commit(self, amend: Callable[[Encoded], None] | None = None) -> None:
        """Merge this session's view of the jobs into state.json: jobs it changed are written, jobs it
        removed (clean) are removed, jobs submitted or hand-edited meanwhile are kept, jobs deleted
        by hand stay deleted. Saves only what changed; reads the file again only if another command
        wrote it since this session read (or saved) it. `amend`: called under the lock with the
        session's state as encoded, to add to the head what that encoding shows (a pass's untold
        events) in the same save."""
        with self.store.lock():
            now = encode(self.state)
            if amend is not None:
                amend(now)
                now = now._replace(head=encode_head(self.state))
            if self.store.unchanged(self.snapshot):
                self.snapshot = self.store.save_encoded(now, self.base, self.snapshot)
                self.base = now  # what is on disk now is the base of the next commit
                self.base_untold = list(self.state.untold)
                return
            else:
                disk, snapshot = self.store.read()
                original = encode(disk)
                disk.jobs = self._merged(disk.jobs)
                disk.machines = self.state.machines
                disk.last_pass = newest_pass(disk.last_pass, self.state.last_pass)
                disk.untold = merged_untold(self.base_untold, self.state.untold, disk.untold)
                self.state.untold = list(disk.untold)
                self.state.next_id = disk.next_id
                self.store.save_if_changed(disk, original, snapshot)
                # The file now holds jobs this session does not (submitted meanwhile): the next
                # commit must merge with it again, never save the session's own list over it.
                self.snapshot = StateVersion(None, None)
        # What is on disk now is the base of the next commit.
        self.base = encode(self.state)
        self.base_untold = list(self.state.untold)

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


def merged_untold(base: list[Event], mine: list[Event], disk: list[Event]) -> list[Event]:
    """The untold events after a session's commit over a file another command wrote meanwhile: what
    the session dropped (told) goes, what it added comes, what the other added stays."""
    def ids(events: list[Event]) -> set[str | None]:
        return {e.id for e in events}

    dropped = ids(base) - ids(mine)
    kept = [e for e in disk if e.id not in dropped]
    known = ids(kept) | ids(base)
    return kept + [e for e in mine if e.id not in known]


def newest_pass(a: LastPass | None, b: LastPass | None) -> LastPass | None:
    """The later of two records of the last pass: a command that read state.json before a pass
    saved must not put back an older one when it merges."""
    if a is None or b is None:
        return a or b
    return a if a.ended >= b.ended else b


def load_session(home: Home) -> Session:
    """A session over the home as it is now, without the pass lock (for commands that only read or
    that act on one job's workers, like `tail -f` and `fetch`)."""
    return Session(home, load_fleet(home), *Store(home).read())


@contextlib.contextmanager
def locked_session(home: Home, wait: float | None = None) -> Iterator[Session]:
    """For kill/resume/rerun/clean/tpu: hold the pass lock (no pass runs meanwhile), commit at the end."""
    wait = timing.current().act_lock_wait if wait is None else wait
    with pass_lock(home, wait) as got:
        if not got:
            raise BusyError(f"a manage pass has held {home.pass_lock} for over {wait:.0f}s",
                            hint="wait for it to finish, or look for a stuck `jobtpu manage`")
        session = load_session(home)
        yield session
        session.commit()

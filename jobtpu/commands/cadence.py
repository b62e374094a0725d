"""How a loop (`manage --loop`, `watch`) waits between its rounds (docs/reference/commands.md §2.3): the
full interval for a quiet fleet; a short one while work is in flight (a TPU operation, a recreation,
a setup, a launch or a stop); no wait at all once a member's request arrives, another command writes
state.json (a submit in a private home, the runner's own), or a local job ends; and
meanwhile the running jobs' new log lines come home through the loop's kept connections, which also
notice a remote worker that ended or vanished (the next round then starts at once)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobtpu import timing
from jobtpu.commands.common import note
from jobtpu.errors import JobtpuError, message_of
from jobtpu.home.layout import Home

if TYPE_CHECKING:
    from jobtpu.schema.records import MachineRecord
    from jobtpu.schema.state import State


def between_rounds(home: Home, seconds: float, woken: set[tuple[int, int]], kept: Any = None,
                   pause: Callable[[float], bool] | None = None, spool_seen: int | None = None,
                   state_seen: bytes | None = None) -> bool:
    """Wait for the next round (see the module's docstring). `pause(s)`: how to spend s seconds (a
    dashboard's waits for its quit key); True from it ends the wait and is returned (quit).
    `spool_seen`: the spool's stamp when this round took its requests in (`spool_stamp`), so a
    request that came during the pass starts the next round at once. `state_seen`: state.json's stamp
    as the pass left it (store.stamp_of; b"" when it merged another's write): a submit saved since
    then starts the next round at once, as a local job's end does."""
    from jobtpu.fleet.operations import stream_logs
    from jobtpu.home.folder_watch import FolderWatch
    from jobtpu.home.spool import stamps
    from jobtpu.home.store import stamp_of

    def written() -> bool:  # by another command since the pass: a submit, a hold, a kill
        return state_seen is not None and stamp_of(home.state_file) != state_seen

    folders, ended, busy, remote = _look(home, woken)
    if ended:  # an end the pass did not see yet: the next round now
        return False
    if busy:  # the next step of work in flight is possible soon: follow it closely
        seconds = min(seconds, timing.current().busy_interval)
    # Watched before the stamps are taken: a change after them wakes the wait, whenever it comes (a
    # dashboard's wait is its quit key's, polled as before).
    watched = [] if pause is not None else [*folders, home.root] if state_seen is not None else folders
    watch = FolderWatch(watched)
    try:
        start = time.monotonic()
        every, poll = timing.current().log_stream, timing.current().spool_poll
        seen, streamed = stamps(folders), start
        if spool_seen is not None and seen[0] != spool_seen:  # folders[0] is the spool: a request came meanwhile
            return False
        if written():
            return False
        while (left := start + seconds - time.monotonic()) > 0:
            step = min(left, poll)  # a folder the watch could not see (made since) is looked at this often
            if pause is not None:
                if pause(step):
                    return True
            else:
                watch.wait(step)
            if stamps(folders) != seen or written():  # a request, a submit, or a local job's exit record
                return False
            if remote and time.monotonic() - streamed >= every and left > every:  # a quiet fleet: nothing to bring
                streamed = time.monotonic()
                try:
                    if stream_logs(home, kept):  # a worker ended or vanished: the pass now, not at the interval
                        return False
                except Exception as e:  # noqa: BLE001 - the pass pulls what this could not
                    note(f"jobtpu: bringing logs home between passes: {type(e).__name__}: {message_of(e)}")
    finally:
        watch.close()
    return False


def spool_stamp(home: Home) -> int:
    """The spool's stamp now (take it before a round takes requests in)."""
    from jobtpu.home.roles import SPOOL
    from jobtpu.home.spool import stamps

    return stamps([home.root / SPOOL])[0]


def _look(home: Home, woken: set[tuple[int, int]]) -> tuple[list[Path], bool, bool, bool]:
    """What to watch until the next round: the spool (members' requests) and the folder where each
    active local job's workers write their exit records; whether one has ended since the pass looked
    (once per attempt, in `woken`: a pass that could not settle it waits as ever); whether work is
    in flight; and whether a job runs on a remote machine (whose log lines to bring home meanwhile).
    A home that cannot be read now is watched through its spool alone."""
    from jobtpu.fleet.drivers import driver_for
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.roles import SPOOL
    from jobtpu.home.store import Store

    folders = [home.root / SPOOL]
    try:
        fleet, state = load_fleet(home), Store(home).load()
    except JobtpuError:
        return folders, False, False, False
    ended = remote = False
    for job in state.jobs:
        machine = fleet.machines.get(job.machine) if job.active and job.machine else None
        if machine is not None and driver_for(machine).remote:
            remote = True
        elif machine is not None:
            folder = Path(machine.root) / "meta" / str(job.id)
            folders.append(folder)
            if (job.id, job.attempt) not in woken and (folder / f"{job.attempt}.0.exit").exists():
                woken.add((job.id, job.attempt))
                ended = True
    return folders, ended, in_flight(state, time.time(), timing.current().busy_interval), remote


def _moving_states() -> frozenset[Any]:
    """A machine in one of these states moves on at the next pass (a step to carry out or to follow)."""
    from jobtpu.schema.records import MachineState as S

    return frozenset({S.SETTING_UP, S.RECREATING, S.DELETING, S.DELETED, S.TRANSIENT, S.WAITING_FOR_HOST_KEYS})


def in_flight(state: State, now: float, soon: float) -> bool:
    """Pure: whether a pass within `soon` seconds could take work in flight a step further: a job
    launching or stopping, or a machine with an operation to follow, a recreation asked, saved steps,
    a setup running, or a node between states. A machine waiting out its back-off past `soon`, or a
    queued resource waiting for capacity, is not: Google decides when those move."""
    from jobtpu.schema.state import Status

    if any(job.status in (Status.LAUNCHING, Status.KILLING) for job in state.jobs):
        return True
    moving = _moving_states()
    return any(_moving(record, now, soon, moving) for record in state.machines.values())


def _moving(record: MachineRecord, now: float, soon: float, moving: frozenset[Any]) -> bool:
    from jobtpu.schema.records import SetupStatus

    if record.next_try is not None and float(record.next_try) > now + soon:
        return False
    if record.operation is not None or record.want_recreate or record.steps:
        return True
    if record.setup is not None and record.setup.status is SetupStatus.RUNNING:
        return True
    return record.state is not None and record.state in moving

"""Following the event log like `tail -F`: what is there, then each new event as it is appended,
across rotations, none missed or shown twice."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from jobtpu import timing
from jobtpu.decide.events import Event
from jobtpu.tell.eventlog import Filter, events_path, log_files, open_read, parse_lines, read_file


def follow(home_root: Path, job: int | None = None, machine: str | None = None, since: float | None = None,
           poll: float | None = None) -> Iterator[Event]:
    """What `read` returns, then each new matching event as it is appended, for ever (the caller
    stops iterating). Survives rotation: the file it was reading is finished before the newer ones,
    so no event is missed or shown twice, even when several rotations happen between two polls."""
    wanted = Filter(job, machine, since)
    current = _Tail(events_path(home_root))
    done: set[tuple[int, int]] = set()  # the files read to their end (they only ever get renamed)
    for path in log_files(home_root)[:-1]:
        if not current.same_file(path):
            yield from parse_lines(_read_whole(path, done), wanted)
    while True:
        yield from parse_lines(current.new_lines(), wanted)
        if not current.replaced():
            time.sleep(timing.current().events_poll if poll is None else poll)
            continue
        yield from parse_lines(current.new_lines(), wanted)  # what was written before the rotation
        if current.identity:
            done.add(current.identity)
        current.close()
        current = _Tail(events_path(home_root))
        for path in _unread(home_root, done, current):
            yield from parse_lines(_read_whole(path, done), wanted)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _read_whole(path: Path, done: set[tuple[int, int]]) -> list[bytes]:
    identity = _identity(path)
    if identity is not None:
        done.add(identity)
    return read_file(path).splitlines()


def _unread(home_root: Path, done: set[tuple[int, int]], current: _Tail) -> list[Path]:
    """The rotated files written after the last one read (several rotations may have happened
    between two polls), oldest first."""
    newer = []
    for path in log_files(home_root)[:-1][::-1]:  # .1, .2, …: newest first
        identity = _identity(path)
        if identity in done:
            break
        if identity is not None and identity != current.identity:
            newer.append(path)
    return newer[::-1]


class _Tail:
    """An open events file read as it grows; knows when its name now points at another file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.buffer = b""
        try:
            self.fd: int | None = open_read(path)
            st = os.fstat(self.fd)
            self.identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            self.fd, self.identity = None, None

    def same_file(self, path: Path) -> bool:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return False
        return self.identity == (st.st_dev, st.st_ino)

    def replaced(self) -> bool:
        """The name now leads to another file (or to one where there was none)."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return self.identity != (st.st_dev, st.st_ino)

    def new_lines(self) -> list[bytes]:
        """The complete lines written since the last call; a partial last line waits for its end."""
        if self.fd is None:
            return []
        chunks = []
        while chunk := os.read(self.fd, 1 << 20):
            chunks.append(chunk)
        data = self.buffer + b"".join(chunks)
        done, _, self.buffer = data.rpartition(b"\n")
        return done.split(b"\n") if done else []

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


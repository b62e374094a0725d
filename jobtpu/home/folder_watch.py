"""A wait that ends early when an entry is added to, replaced in or removed from one of some folders
(Linux inotify, through libc): a loop between its rounds (commands/cadence.py) wakes within
milliseconds of a request in the spool, a submit's state.json or a local job's exit record, where
looking every half second cost each round of a queue of short jobs a quarter of a second on average.
A wake is only a hint to look again: the caller still compares what it watches, so an entry that
does not matter (another file of the home replaced) costs one look. Where inotify is missing (not
Linux, no libc, the watches used up) `wait` is a plain sleep, as before."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import select
import time
from pathlib import Path

# <sys/inotify.h>: an entry created, moved in or out, deleted; a file written and closed (an exit
# record written in place); IN_ONLYDIR: a path that is not a folder is not watched.
_EVENTS = 0x100 | 0x80 | 0x40 | 0x200 | 0x8
_ONLYDIR = 0x01000000
_NONBLOCK, _CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC


@functools.cache  # once a process: find_library runs `ldconfig -p`, a process of its own, every call
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


class FolderWatch:
    """Watches on `folders` (those that exist now) until `close`."""

    def __init__(self, folders: list[Path]) -> None:
        self.fd = -1
        libc = _libc() if folders else None
        if libc is None:
            return
        fd = libc.inotify_init1(_NONBLOCK | _CLOEXEC)
        if fd < 0:
            return
        added = [libc.inotify_add_watch(fd, os.fsencode(folder), _EVENTS | _ONLYDIR) for folder in folders]
        if not any(w >= 0 for w in added):  # nothing to watch: a plain sleep
            os.close(fd)
            return
        self.fd = fd

    def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less once a watched folder changed."""
        if self.fd < 0:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self.fd], [], [], seconds)
        if ready:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while os.read(self.fd, 65536):  # drain: the next wait waits for the next change
                    pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

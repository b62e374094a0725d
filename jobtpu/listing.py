"""Per-user listings of state.json, written with every save, so that `jobtpu status` (run from
watch, cron and scripts) prints one user's jobs without parsing every job of every user.

A listing is a cache: it is used only while state.json is exactly the file it was made from (same
inode, size and modification time; every save is a rename of a new file). A hand edit, a crash
between the two writes, or a missing listing all fall back to reading state.json."""

from __future__ import annotations

import os
from pathlib import Path

from .home import Home, make_dirs, write_atomic
from .schema import USER_NAME

_STAMP = "_stamp"


def folder(home: Home) -> Path:
    return home.root / "cache" / "status"


def stamp_of(st: os.stat_result) -> bytes:
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns}".encode()


def write(home: Home, users: list[str], lines: list[bytes], stamp: bytes) -> None:
    """Before state.json is renamed into place: one `{"jobs": [...]}` file per user, each headed by
    the stamp of the state.json it lists, then the stamp file itself."""
    where = folder(home)
    make_dirs(where)
    by_user: dict[str, list[bytes]] = {}
    for user, line in zip(users, lines, strict=True):
        by_user.setdefault(user, []).append(line)
    # A user whose jobs are all gone gets an empty listing, not a deleted file: until state.json is
    # renamed into place, a missing file would read as "no jobs" against the old stamp.
    for old in where.glob("*.json"):
        by_user.setdefault(old.stem, [])
    for user, user_lines in by_user.items():
        if USER_NAME.match(user):  # a hand-edited odd name gets no file (and so no path outside the folder)
            _replace(where / f"{user}.json", stamp + b"\n" + b'{"jobs":[' + b",".join(user_lines) + b"]}\n")
    _replace(where / _STAMP, stamp)


def made_from(home: Home, stamp: bytes) -> bool:
    """Whether the listings were last written for the state.json with this stamp."""
    try:
        return (folder(home) / _STAMP).read_bytes() == stamp
    except OSError:
        return False


def read(home: Home, user: str) -> bytes | None:
    """The user's `{"jobs": [...]}` document as status --json prints it, or None to read state.json."""
    try:
        current = stamp_of(os.stat(home.state_file))
    except FileNotFoundError:
        return None
    if not made_from(home, current):
        return None
    try:
        data = (folder(home) / f"{user}.json").read_bytes()
    except FileNotFoundError:
        return b'{"jobs":[]}\n'  # the listing is current and this user has no job
    head, _, body = data.partition(b"\n")
    return body if head == current else None


def _replace(path: Path, data: bytes) -> None:
    # Not synced: a listing lost in a crash only means the next listing reads state.json.
    write_atomic(path, data, sync=False)

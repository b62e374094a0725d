"""jobtpu's memory of the sheet (`<home>/sheet.json`): the user and note cells it last wrote, the
machines taken off the sheet, the hand claims and digest of the last read and write. Read, changed
and saved under one lock (`memo_lock`)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from jobtpu.decide.sheet_layout import SheetMachine
from jobtpu.errors import BusyError
from jobtpu.home import safefs
from jobtpu.home.layout import open_lock, write_atomic
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.sheet_config import CALL_GRACE, SheetConfig
from jobtpu.schema.sheet_memo import Memo


def load_memo(path: Path) -> Memo:
    """An unreadable or damaged memo counts as empty: at worst a user cell jobtpu wrote looks like a
    claim until `release` (cells matching the users it runs now never do)."""
    try:  # at the top of the home: no link, no FIFO, no more than a settings file may hold
        data = safefs.read_regular(path.parent, path.name, safefs.CAP_SMALL)
    except (OSError, safefs.UnsafePath):
        return Memo()
    return Memo.from_bytes(data)


def save_memo(path: Path, memo: Memo) -> None:
    write_atomic(path, memo.to_bytes())



def rows_digest(config: SheetConfig, rows: Iterable[SheetMachine]) -> str:
    """What a pass would bring the sheet to, in a few bytes: the rows, and where and which columns."""
    doc = [config.spreadsheet, config.worksheet, config.layout, list(config.columns), [msgspec.structs.astuple(row) for row in rows]]
    return hashlib.sha256(json.dumps(doc, default=str).encode()).hexdigest()[:32]


@contextlib.contextmanager
def memo_lock(config: SheetConfig, memo_path: Path) -> Iterator[None]:
    """The memo is read, a write made, and the memo saved as one step: a pass and `sheet register`
    at once would otherwise lose one's memory. Held at most one write's time, so waited on for two."""
    fd = open_lock(memo_path.with_name(memo_path.name + ".lock"))
    try:
        deadline = time.monotonic() + 2 * (config.timeout + CALL_GRACE)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BusyError(f"{memo_path.name} is held by another jobtpu command",
                                    hint="try again in a moment") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


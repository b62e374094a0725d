"""A job's log files in the home (`logs/<id>/<attempt>.<worker>.log`), read and appended through
safefs (docs/design.md §2): never through a link, never blocking on a FIFO, a teammate's lock on a
log costing at most LOCK_WAIT seconds. What is wrong with one job's log is that job's alone: the
caller turns `UnsafePath` into that job's failure (reason `home_file`, docs/reference/state-json.md §4.3)."""

from __future__ import annotations

import os
from pathlib import Path, PurePath

from jobtpu.errors import BusyError, ConfigError
from jobtpu.home import safefs

TAIL_READ = 64 << 10  # at most this many bytes from a log's end for `tail`


def log_rel(job: int, attempt: int, worker: int) -> PurePath:
    return PurePath("logs", str(job), f"{attempt}.{worker}.log")


def size(root: Path, rel: PurePath) -> int:
    """The log's length in bytes: 0 when it is not there yet."""
    try:
        fd = safefs.open_file(root, rel)
    except FileNotFoundError:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def append(root: Path, rel: PurePath, offset: int, data: bytes) -> None:
    """Append bytes pulled from `offset` of a worker's log, unless someone else already did."""
    fd = safefs.open_file(root, rel, os.O_WRONLY | os.O_APPEND, create=True)
    try:
        wait = safefs.lock_wait()
        if not safefs.lock(fd, wait):
            raise BusyError(f"{rel} is locked by another process for over {wait:g}s; its new bytes wait for "
                            "the next pass", hint="see who holds it: fuser -v on that file")
        if data and os.fstat(fd).st_size == offset:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def read_end(root: Path, rel: PurePath, limit: int) -> tuple[bytes, int]:
    """At most `limit` bytes from the log's end, and the log's length: never the whole file."""
    try:
        fd = safefs.open_file(root, rel)
    except FileNotFoundError:
        return b"", 0
    try:
        end = os.fstat(fd).st_size
        start = max(0, end - limit)
        return os.pread(fd, end - start, start) if end > start else b"", end
    finally:
        os.close(fd)


def read_from(root: Path, rel: PurePath, offset: int, limit: int = 4 << 20) -> bytes:
    """At most `limit` bytes of the log from `offset` (b"" when it is not there)."""
    try:
        fd = safefs.open_file(root, rel)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def last_lines(root: Path, rel: PurePath, n: int) -> tuple[str, int]:
    """The log's last `n` lines, read from its end (at most TAIL_READ bytes a line, never the whole
    file), as they are (not escaped), and the offset the log ended at."""
    limit = TAIL_READ
    while True:
        data, end = read_end(root, rel, limit)
        if data.count(b"\n") > n or len(data) >= end or limit >= TAIL_READ * max(1, n):
            break
        limit *= 4
    lines = data.splitlines(keepends=True)
    if len(data) < end and lines:
        lines = lines[1:]  # a line cut by where the read began
    return (b"".join(lines[-n:]).decode(errors="replace") if n > 0 else ""), end


# ---- a job's result (jobtpu/result.py): worker 0's saved value, brought home with its attempt's log --

def result_rel(job: int, attempt: int) -> PurePath:
    return PurePath("logs", str(job), f"{attempt}.result.json")


def keep_result(root: Path, job: int, attempt: int, size: int, data: bytes | None) -> str | None:
    """Keep an attempt's result as `{"value": V}`, or `{"refused": WHY}` when it is too large or not
    JSON (a file the job wrote by hand): WHY is returned, for the pass to say; None when kept."""
    from jobtpu.result import MAX_RESULT_BYTES
    from jobtpu.schema.msgspec_lib import msgspec

    why = None
    doc = b""
    if data is None or max(size, len(data)) > MAX_RESULT_BYTES:
        why = f"its result is {max(size, len(data or b''))} bytes, more than {MAX_RESULT_BYTES}; it was not brought home"
    else:
        try:
            msgspec.json.decode(data)
            # The bytes checked as JSON go into the envelope as they are: nothing is decoded and written again.
            doc = b'{"value":' + data.strip() + b"}"
        except (msgspec.DecodeError, RecursionError) as e:
            why = f"its result is not JSON ({str(e)[:100]}); it was not brought home"
    if why is not None:
        doc = msgspec.json.encode({"refused": why})
    rel = result_rel(job, attempt)
    dir_fd = safefs.open_dir(root, rel.parent, create=True)
    try:
        safefs.write_in(dir_fd, rel.name, doc, safefs.file_mode_of(dir_fd))
    finally:
        os.close(dir_fd)
    return why


def read_result(root: Path, job: int, attempt: int) -> dict[str, object] | None:
    """What keep_result kept of an attempt's result; None when nothing came home."""
    from jobtpu.result import MAX_RESULT_BYTES
    from jobtpu.schema.msgspec_lib import msgspec

    rel = result_rel(job, attempt)
    try:
        data = safefs.read_regular(root, rel, MAX_RESULT_BYTES + 4096)
    except FileNotFoundError:
        return None
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not ({"value", "refused"} & set(doc)):  # changed by hand, or cut short
        raise ConfigError(f"{rel}: not a result jobtpu kept", hint="move it away; `jobtpu fetch` brings the job's files")
    return doc

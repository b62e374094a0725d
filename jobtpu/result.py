"""A job hands a value back (docs/reference/python.md §11.5): `jobtpu.save_result(value)` in the job
writes it as JSON where its wrapper said ($JOBTPU_RESULT, beside the attempt's log on the worker),
and the pass brings worker 0's home with the log, where `Job.result()` reads it.

Imported inside a job, so it loads only the standard library's json: no command line, no parser."""

from __future__ import annotations

import os

from jobtpu.errors import JobtpuError

RESULT_ENV = "JOBTPU_RESULT"  # set by the wrapper (jobtpu/remote/sh/wrapper.sh) for every worker
MAX_RESULT_BYTES = 1 << 20  # a value, not a file: a bigger result is a file the job writes and `fetch` brings


def save_result(value: object) -> None:
    """Save `value` (anything json.dumps writes: numbers, strings, lists, dicts, None) as this attempt's
    result; a later call replaces it. Only worker 0's result comes home; on the others it is kept."""
    import json

    path = os.environ.get(RESULT_ENV)
    if not path:
        raise JobtpuError(f"save_result: not inside a jobtpu job (${RESULT_ENV} is not set)",
                          hint="call it from the command a job runs; submit it with jobtpu")
    try:
        data = json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        raise JobtpuError(f"save_result: the value is not JSON ({e})",
                          hint="give numbers, strings, lists, dicts, True/False or None") from None
    if len(data) > MAX_RESULT_BYTES:
        raise JobtpuError(f"save_result: the value is {len(data)} bytes as JSON, more than {MAX_RESULT_BYTES}",
                          hint="write it to a file in the job's folder and bring it home with `jobtpu fetch`")
    # Whole or not at all: the probe that brings it home never reads half a value.
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise JobtpuError(f"save_result: cannot write {path} ({e.strerror or e})") from None

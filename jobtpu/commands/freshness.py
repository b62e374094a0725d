"""How fresh state.json is: the line `status`, `machines` and `watch` show of the last pass (STALE
when the passes stopped), and the event a failed pass leaves."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from jobtpu.commands.common import error_text
from jobtpu.commands.cron import INSTALL
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home

if TYPE_CHECKING:
    from jobtpu.schema.state import LastPass


STALE_WORD = "STALE"  # what a script greps for in `status`, `machines` and the dashboard


def ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    if seconds < 172800:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"


def freshness(last: LastPass | None, now: float | None = None) -> tuple[str, bool]:
    """The line that says how fresh state.json is, and whether it is stale: older than
    timing's stale_intervals intervals of the loop that ran the last pass (60 s for cron or by hand)."""
    from jobtpu import timing

    # One missed pass is noise, three in a row mean the loop or the cron entry is gone; passes from
    # cron or by hand record no interval: cron's own is assumed.
    stale_intervals, default_interval = timing.current().stale_intervals, timing.current().default_interval

    now = time.time() if now is None else now
    if last is None:
        return (f"{STALE_WORD}: no manage pass has run yet: jobs start only in passes (`{INSTALL}` runs "
                "one every minute; or `jobtpu manage --loop 60`, `jobtpu watch`)"), True
    every = expected_every(last, now, stale_intervals, default_interval)
    age = now - float(last.ended)
    line = f"last pass {ago(age)} ago (took {float(last.took):.1f} s)"
    if age <= stale_intervals * every:
        return line, False
    return (f"{STALE_WORD}: {line}; passes should run every {every:g} s: is their cron entry or loop gone? "
            f"(`{INSTALL}` runs them from cron)"), True


def expected_every(last: LastPass, now: float, stale_intervals: float, default_interval: float) -> float:
    """Pure: how often passes should come: the last pass's source's interval, or a slower source's
    that still passes (a `manage --loop 60` beside a `watch` that stopped; schema.state.recorded)."""
    every = float(last.every or default_interval)
    if last.slowest is not None and last.slowest_at is not None and float(last.slowest) > every \
            and now - float(last.slowest_at) <= stale_intervals * float(last.slowest):
        return float(last.slowest)
    return every


def freshness_text(last: LastPass | None, one_line: bool = False) -> Any:
    """The freshness line, red when stale; `one_line`: cut to the screen's width (the dashboard)."""
    from rich.text import Text

    line, stale = freshness(last)
    return Text(line, style="bold red" if stale else "dim", no_wrap=one_line, overflow="ellipsis" if one_line else "fold")


def say_freshness(last: LastPass | None) -> None:
    """Under `status` and `machines`, on stderr (stdout stays the table scripts read): the stale
    warning always, the plain `last pass N s ago` only to a person at a terminal."""
    import sys

    from rich.console import Console

    _, stale = freshness(last)
    if stale or sys.stderr.isatty():
        Console(stderr=True).print(freshness_text(last))


def last_pass_json(last: LastPass | None) -> dict[str, Any] | None:
    """What `machines --json` says of the last pass."""
    if last is None:
        return {"ended": None, "took": None, "every": None, "age": None, "stale": True}
    _, stale = freshness(last)
    return {"ended": last.ended, "took": last.took, "every": last.every,
            "age": round(time.time() - float(last.ended), 3), "stale": stale}


def record_pass_failure(home: Home, error: BaseException) -> None:
    """A pass raised: an event in the log (best effort: the error itself is what the user sees)."""
    from jobtpu.passes.tell import pass_failed

    text = error_text(error) if isinstance(error, JobtpuError) else f"{type(error).__name__}: {error}"
    text = text.removeprefix("jobtpu: error: ").splitlines()[0] if text else ""
    with contextlib.suppress(Exception):  # never hide the pass's own error behind the log's
        pass_failed(home.root, [], text)


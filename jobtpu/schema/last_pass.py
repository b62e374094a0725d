"""When the last manage pass ended, as state.json records it (`last_pass`), and how the next pass's
record is worked out from it: what `status` reads to say how fresh what it shows is."""

from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import Seconds, Time


class LastPass(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """When the last manage pass ended, how long it took, and how often its loop runs passes
    (None: a single pass, from cron or by hand): `status` says how fresh what it shows is."""

    ended: Time
    took: Seconds
    every: Seconds | None = None
    # The longest interval of the passes' sources (loops, cron) seen lately, and when that source
    # last passed, when slower than this pass's: a quick loop (watch) that stops while a slower one
    # (manage --loop 60) goes on must not make its 60 s gaps read as late (`recorded`).
    slowest: Seconds | None = None
    slowest_at: Time | None = None


def recorded(prev: LastPass | None, ended: float, took: float, every: float | None,
             window: float, default_every: float) -> LastPass:
    """Pure: the `last_pass` a pass that ended at `ended` records after `prev`. Of the sources `prev`
    knew (its own pass and the slower one it kept), the slowest that may still pass (its last pass
    within `window` of its intervals) and is slower than this pass's source is kept; else none."""
    mine = every or default_every
    known: list[tuple[float, float]] = []
    if prev is not None:
        known.append((float(prev.every or default_every), float(prev.ended)))
        if prev.slowest is not None and prev.slowest_at is not None:
            known.append((float(prev.slowest), float(prev.slowest_at)))
    alive = [(theirs, seen) for theirs, seen in known if theirs > mine and ended - seen <= window * theirs]
    slowest, slowest_at = max(alive) if alive else (None, None)
    return LastPass(ended=round(ended, 3), took=round(took, 3), every=every, slowest=slowest,
                    slowest_at=None if slowest_at is None else round(slowest_at, 3))

"""The runner lease's decisions, pure (docs/reference/home-files.md §1.7): given the lease as read, who
this runner is, what it holds and what it has watched, what it does now. home/lease.py does the I/O.

Time here is this box's monotonic clock only: a standby judges a lease expired when it has watched
the same renewal stay unchanged for a whole lease, never by comparing wall clocks of two boxes, so a
clock that jumps (or two boxes that disagree) can neither make a standby take over early nor keep a
dead runner's lease alive. The wall times in a lease are for people to read."""

from typing import NamedTuple

# A holder stops trusting its lease this share of a lease before a standby could judge it expired:
# two boxes' monotonic clocks run at the same rate to far better than this.
MARGIN = 0.1


class Lease(NamedTuple):
    """One lease file, lease/<token> (the highest token is the lease in force)."""

    token: int
    runner: str  # the account
    box: str
    pid: int
    seconds: float  # how long a renewal holds
    renewed: float  # wall time of the last renewal (for people)
    beat: int  # counts renewals: a standby watches it change
    released: bool = False  # handed over on purpose: a standby may take it at once

    @property
    def holder(self) -> str:
        return f"{self.runner}@{self.box}"


class Seen(NamedTuple):
    """What a standby watched: the lease (token, beat) and since when, on which boot's monotonic clock."""

    token: int
    beat: int
    since: float
    boot: str


class Me(NamedTuple):
    runner: str
    box: str
    pid: int

    @property
    def name(self) -> str:
        return f"{self.runner}@{self.box}"


class Held(NamedTuple):
    """The lease this process holds: its token and when (monotonic) its last renewal began."""

    token: int
    renewed: float
    seconds: float

    def lapsed(self, now: float) -> bool:
        return now - self.renewed >= self.seconds * (1 - MARGIN)


class LeaseStep(NamedTuple):
    """What to do: `renew` the held token, `take` a new one (`token`), `wait` as a standby, or stop
    (`fenced`: this runner must write nothing more). `line`: what to say (empty: nothing)."""

    kind: str  # "renew" | "take" | "wait" | "fenced"
    token: int
    line: str = ""


def judge(top: int, lease: Lease | None, me: Me, held: Held | None, standby: bool, seen: Seen | None,
          now: float, boot: str, seconds: float) -> LeaseStep:
    """The next step. `top`: the highest token in lease/ (0: none); `lease`: that file, None if it is
    damaged or missing; `now`: monotonic. A standby's takeover needs `seen` to have watched the same
    lease for `seconds`."""
    if held is not None:
        if top > held.token:
            who = lease.holder if lease is not None else "another runner"
            return LeaseStep("fenced", held.token, f"this runner lost the lease to {who} (token {top} > {held.token}); "
                        "it writes and starts nothing more and stops")
        if held.lapsed(now):
            return LeaseStep("fenced", held.token, f"this runner was stopped or frozen past its lease "
                        f"({seconds:g}s without renewal, token {held.token}); a standby may have taken over, "
                        "so it writes and starts nothing more and stops")
        return LeaseStep("renew", held.token)
    if top == 0:
        if standby:
            return _after_watching(top, 0, seen, now, boot, seconds, "no runner holds the lease")
        return LeaseStep("take", 1, "this runner takes the lease (token 1)")
    if lease is None:  # damaged: its token is its name; watched like any other lease
        if standby:
            return _after_watching(top, -1, seen, now, boot, seconds, f"lease/{top} is damaged")
        return LeaseStep("wait", 0, f"lease/{top} is damaged and its runner unknown; this pass did nothing "
                    "(a standby takes it over after one lease; see `jobtpu runner`)")
    if lease.holder == me.name and not lease.released:
        # This runner (an account on a box) in a later process: cron's next pass, a restarted loop. A
        # process of it that was paused finds its own renewal lapsed and stops (held.lapsed).
        return LeaseStep("renew", top)
    if lease.released and lease.holder != me.name and standby:
        return LeaseStep("take", top + 1, f"{lease.holder} handed the lease over; this runner takes it (token {top + 1})")
    if not standby:
        return LeaseStep("wait", 0, f"{lease.holder} holds the runner lease (token {top}); this pass did nothing "
                    "(run with --standby to take over when it stops renewing)")
    return _after_watching(top, lease.beat, seen, now, boot, seconds,
                           f"{lease.holder}'s lease expired (token {top}, no renewal for {seconds:g}s)")


def _after_watching(top: int, beat: int, seen: Seen | None, now: float, boot: str, seconds: float,
                    why: str) -> LeaseStep:
    if seen_expired(seen, top, beat, now, boot, seconds):
        return LeaseStep("take", top + 1, f"{why}; this runner takes over (token {top + 1})")
    return LeaseStep("wait", 0)


def seen_expired(seen: Seen | None, top: int, beat: int, now: float, boot: str, seconds: float) -> bool:
    """Whether this box has watched lease `top` at renewal `beat` stay unchanged for a whole lease."""
    return (seen is not None and seen.boot == boot and (seen.token, seen.beat) == (top, beat)
            and now - seen.since >= seconds)


def watched(seen: Seen | None, top: int, beat: int, now: float, boot: str) -> Seen:
    """What a standby has watched after looking now: the same lease keeps its start, a change restarts it."""
    if seen is not None and seen.boot == boot and (seen.token, seen.beat) == (top, beat):
        return seen
    return Seen(top, beat, now, boot)

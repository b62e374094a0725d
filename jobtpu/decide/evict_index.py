"""What one dispatch knows of the jobs an eviction may stop (docs/reference/requests-and-rules.md §8),
gathered in one scan of the jobs the first time a higher-class job finds no room, and kept up to
date as that dispatch evicts: a sweep of thousands of urgent jobs then costs one scan per pass, not
one per job. Pure values; decide/evict.py asks and updates it."""

from __future__ import annotations

from collections.abc import Iterable

from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job


class Evictable(msgspec.Struct, frozen=True):
    """A running job as the choice sees it: its class's rank, where it runs, what it holds there, and
    whether it has run its class's min_runtime (a job in its first min_runtime is never evicted)."""

    job: int
    rank: int
    machines: tuple[str, ...]  # a gang holds several: evicting it frees its room on each
    alloc: dict[str, list[int]]
    settled: bool  # it has run at least its class's min_runtime
    started: float = 0.0  # its attempt's start: of two alike, the one started last loses least work


def by_machine(holders: Iterable[Evictable]) -> dict[str, list[Evictable]]:
    """Machine -> the settled holders there, in the order the choice prefers them: the lowest class
    first, then the one started last, then the lower id (a gang is listed on each of its machines)."""
    index: dict[str, list[Evictable]] = {}
    for holder in sorted((h for h in holders if h.settled), key=lambda h: (h.rank, -h.started, h.job)):
        for name in holder.machines:
            index.setdefault(name, []).append(holder)
    return index


class EvictIndex(msgspec.Struct):
    """One dispatch's view: who may be evicted where, who is evicting whom already, and the requests
    that found nothing to evict (within a dispatch the candidates only go, so none finds more later)."""

    on: dict[str, list[Evictable]]  # by_machine's
    evicting: dict[int, list[Job]]  # evictor -> its victims still stopping (from earlier passes)
    records: dict[int, Job]  # id -> the running job's record as this dispatch began
    dead_ends: set[tuple[object, ...]] = msgspec.field(default_factory=set)
    # (request, pin) -> the machines (name, capacity) that could run it now: the same all dispatch long.
    fits: dict[tuple[object, ...], list[tuple[str, dict[str, int]]]] = msgspec.field(default_factory=dict)

    def drop(self, victims: Iterable[int]) -> None:
        """Victims this dispatch stops are no one's candidates any more (looked up on their machines)."""
        for victim in victims:
            for name in self.records[victim].holds:
                self.on[name] = [h for h in self.on.get(name, ()) if h.job != victim]

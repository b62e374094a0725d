"""How tables name machines and keep their rows apart (docs/reference/commands.md §2.4, §2.10):
a machine's short name, the same names inside a pending reason, and cuts of a narrowed column that
leave two different cells different. Pure.

Imported TPUs are named as their nodes (`kmh-tpuvm-v3-32-preemptible-1`): cut at the end to fit a
column, every one reads `kmh-tpuvm…`. A table names a machine by its first alias (`v3-32-p1`, the
name people type), and a column of names too long even so is cut in the middle, where the cut leaves
each name different from the others."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

ELLIPSIS = "…"


def short_names(machines: Iterable[tuple[str, Sequence[str]]]) -> dict[str, str]:
    """Each (name, aliases) with an alias → its first alias: the name a table shows. machines.json
    gives no two machines the same name or alias, so short names never collide."""
    return {name: aliases[0] for name, aliases in machines if aliases}


def with_short_names(text: str, short: Mapping[str, str]) -> str:
    """`text` (a pending reason the pass wrote with machines.json's names) with each machine's name
    written as its short name; a longer name is replaced before a name it starts with."""
    if not short or not text:
        return text
    names = sorted(short, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.-])(?:" + "|".join(map(re.escape, names)) + r")(?![\w-]|\.[\w-])")  # a dot ends a sentence, not a name
    return pattern.sub(lambda m: short[m.group()], text)


def cut_apart(values: Sequence[str], width: int) -> list[str]:
    """`values` cut to `width` characters each, those longer cut in the middle (`kmh-t…ble-3`) where
    the cut leaves different values different (the most even split that does); when no split of
    this width does, cut at the end. Values that fit stay whole."""
    split = _split_apart(set(values), width)
    if split is None:
        return [v if len(v) <= width else v[:max(width - 1, 0)] + ELLIPSIS for v in values]
    return [_middle(v, width, split) for v in values]


def apart_width(values: Iterable[str], least: int) -> int:
    """The narrowest width, at least `least`, at which cut_apart keeps different values different."""
    distinct = set(values)
    widest = max(map(len, distinct), default=0)
    return next((w for w in range(least, widest) if _split_apart(distinct, w) is not None), max(widest, least))


def _split_apart(distinct: set[str], width: int) -> int | None:
    """How many leading characters a cut to `width` keeps (the rest of the width, less the ellipsis,
    from the end) so that different values stay different; None when no split does."""
    if all(len(v) <= width for v in distinct):
        return width
    if width < 2:
        return None
    room = width - 1
    even = (room + 1) // 2
    for head in sorted(range(room + 1), key=lambda h: (abs(h - even), -h)):
        if len({_middle(v, width, head) for v in distinct}) == len(distinct):
            return head
    return None


def _middle(value: str, width: int, head: int) -> str:
    if len(value) <= width:
        return value
    tail = width - 1 - head
    return value[:head] + ELLIPSIS + (value[-tail:] if tail else "")

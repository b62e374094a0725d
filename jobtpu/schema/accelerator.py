"""A TPU accelerator type as Google names it (`v3-32`, `v4-8`, `v5litepod-16`, `v5p-8`, `v6e-8`), taken
apart in one place: its generation, its version, its count and what that count means. Pure."""

from __future__ import annotations

import functools
import re

import msgspec

_TYPE = re.compile(r"^v(\d+)([a-z_]*)(?:-(\d+))?$")
# The generations whose type counts TensorCores while JAX sees one device per chip of two (megacore).
_MEGACORE = frozenset({"v4", "v5p"})
# Generations whose TPU VMs Google cannot stop (docs/reference/commands.md §2.11).
_NO_STOP = frozenset({"v2", "v3"})


class Accelerator(msgspec.Struct, frozen=True):
    """`v4-32`: generation "v4", version 4, count 32. A family alone (`v3`, as a request names one)
    has no count."""

    text: str
    generation: str  # what comes before the count: v3, v5p, v5litepod, v6e
    version: int  # the generation's number: 5 for v5p and v5litepod
    count: int | None  # TensorCores for v2, v3, v4 and v5p; chips for v5e and v6e

    @property
    def devices(self) -> int | None:
        """The devices JAX sees on the whole node: v3-16 → 16 (a core each), v4-32 → 16 (a chip each),
        v5litepod-16 / v6e-16 → 16."""
        if self.count is None:
            return None
        return self.count // 2 if self.generation in _MEGACORE else self.count

    @property
    def can_stop(self) -> bool:
        """Whether Google stops a TPU VM of this generation (v4 and newer)."""
        return self.generation not in _NO_STOP

    def matches(self, pattern: str) -> bool:
        """Whether a request's pattern takes this type: `v3-32` exactly, `v3` its family, `v3+` that
        version or a newer one (docs/reference/requests-and-rules.md §6)."""
        if pattern.endswith("+"):
            wanted = accelerator(pattern[:-1])
            return wanted is not None and self.version >= wanted.version
        if "-" in pattern:
            return self.text == pattern
        return self.generation == pattern


@functools.lru_cache(maxsize=256)
def accelerator(text: str | None) -> Accelerator | None:
    """The type `text` names, or None for one that is no TPU type's shape."""
    found = _TYPE.match(text or "")
    if found is None:
        return None
    return Accelerator(text=str(text), generation=f"v{found[1]}{found[2]}", version=int(found[1]),
                       count=int(found[3]) if found[3] is not None else None)

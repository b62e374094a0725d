"""A TPU accelerator type as Google names it (`v3-32`, `v4-8`, `v5litepod-16`, `v5p-8`, `v6e-8`), and a
request's pattern of them (`v3`, `v3+`), taken apart in one place: its generation, its version, its
count and what that count means. Pure."""

import functools
import itertools
import re

from jobtpu.schema.msgspec_lib import msgspec

# A count or a `+` (this version or newer), never both; `_` only as gcloud's configs spell a generation.
# ASCII digits and the whole text (fullmatch): no `v٣`, no `v3-32` with a newline after it.
_TYPE = re.compile(r"v([0-9]+)([a-z_]*)(?:-([0-9]+)|(\+))?")
# The generations whose type counts TensorCores while JAX sees one device per chip of two (megacore).
_MEGACORE = frozenset({"v4", "v5p"})
# The generations whose type counts TensorCores, two a chip (a report's chip-hours, docs/reference/commands.md §2.26).
TWO_CORES_A_CHIP = frozenset({"v2", "v3", "v4", "v5p"})
# The generations a TPU's name may hold its type of (the old TPU manager's names, importer.py).
KNOWN = frozenset({"v2", "v3", "v4", "v5p", "v5e", "v5litepod", "v6e"})
# Generations whose TPU VMs Google cannot stop (docs/reference/commands.md §2.11).
_NO_STOP = frozenset({"v2", "v3"})


class Accelerator(msgspec.Struct, frozen=True):
    """`v4-32`: generation "v4", version 4, count 32. A family alone (`v3`, as a request names one)
    has no count; `v3+` (a request's floor) has none either and is no machine's type."""

    text: str
    generation: str  # what comes before the count: v3, v5p, v5litepod, v6e
    version: int  # the generation's number: 5 for v5p and v5litepod
    count: int | None  # TensorCores for v2, v3, v4 and v5p; chips for v5e and v6e
    or_newer: bool = False  # `v3+`: this version or a newer one

    @property
    def config_spelling(self) -> bool:
        """`v5lite_pod`: a generation as an acceleratorConfig's type spells it (V5LITE_POD), which no
        type's name and no request's pattern does."""
        return "_" in self.generation

    @property
    def devices(self) -> int | None:
        """The devices JAX sees on the whole node: v3-16 → 16 (a core each), v4-32 → 16 (a chip each),
        v5litepod-16 / v6e-16 → 16."""
        if self.count is None:
            return None
        return self.count // 2 if self.generation in _MEGACORE else self.count

    @property
    def chips(self) -> int | None:
        """The chips of the whole node: v3-32 → 16, v4-8 → 4 (two TensorCores a chip), v5litepod-16 → 16."""
        if self.count is None:
            return None
        return self.count // 2 if self.generation in TWO_CORES_A_CHIP else self.count

    @property
    def can_stop(self) -> bool:
        """Whether Google stops a TPU VM of this generation (v4 and newer)."""
        return self.generation not in _NO_STOP

    def matches(self, pattern: str) -> bool:
        """Whether a request's pattern takes this type: `v3-32` exactly, `v3` its family, `v3+` that
        version or a newer one (docs/reference/requests-and-rules.md §6)."""
        wanted = accelerator(pattern)
        if wanted is None or self.or_newer:
            return False
        if wanted.or_newer:
            return self.version >= wanted.version
        if wanted.count is not None:
            return self.text == wanted.text
        return self.generation == wanted.generation


@functools.lru_cache(maxsize=256)
def accelerator(text: str | None) -> Accelerator | None:
    """The type or pattern `text` names, or None for one that is no TPU type's shape."""
    found = _TYPE.fullmatch(text or "")
    if found is None:
        return None
    return Accelerator(text=str(text), generation=f"v{found[1]}{found[2]}", version=int(found[1]),
                       count=int(found[3]) if found[3] is not None else None, or_newer=found[4] is not None)


def in_name(name: str) -> Accelerator | None:
    """The type a TPU's name holds as two of its `-` parts: kmh-tpuvm-v3-32-1 → v3-32,
    …-v5litepod-16-… → v5litepod-16; None when no two parts make a type of a known generation."""
    for first, second in itertools.pairwise(name.split("-")):
        found = accelerator(f"{first}-{second}")
        if found is not None and found.generation in KNOWN:
            return found
    return None

"""What a job asks for (`--req` tokens, docs/reference/requests-and-rules.md §6) and whether a machine could ever give it. Pure."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError
from jobtpu.schema.accelerator import accelerator
from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:  # for annotations only: the fleet's checks use this module's bound
    from jobtpu.schema.fleet import Machine

# A machine's resources are handed out by index, one list per job and pass: a count in the billions
# would make every pass spin. (The same bound as a job's stored allocation; see model.MAX_COUNT.)
MAX_RESOURCE_COUNT = 1024

_COUNT = re.compile(r"([a-z][a-z0-9_]{0,31})=([0-9]+)")  # whole (fullmatch), in ASCII digits


class Request(msgspec.Struct, frozen=True):
    """What a job asks for. parse_request shares one Request between every job that asks the same, so
    nothing in it can be changed: the counts are a read-only mapping."""

    resources: Mapping[str, int] = msgspec.field(default_factory=lambda: MappingProxyType({}))
    accelerators: tuple[tuple[str, ...], ...] = ()  # every token must match; a token is alternatives
    preemptible: bool | None = None

    def needs(self) -> dict[str, int]:
        """The counts to allocate: what was asked, or one slot when nothing was."""
        asked = {k: v for k, v in self.resources.items() if v > 0}
        return asked or {"slot": 1}


def parse_request(tokens: Sequence[str]) -> Request:
    """The request `--req` tokens make, parsed once per distinct list: a pass over 10,000 queued jobs
    (and every read of state.json, which checks each job's) parses each request it meets once. The
    Request is shared, and read-only."""
    return _parsed(tuple(tokens))


@functools.lru_cache(maxsize=4096)
def _parsed(tokens: tuple[str, ...]) -> Request:
    resources: dict[str, int] = {}
    accelerators: list[tuple[str, ...]] = []
    preemptible: bool | None = None
    for token in tokens:
        token = token.strip()
        if token in ("preemptible", "on-demand"):
            preemptible = token == "preemptible"
            continue
        if "=" in token:
            match = _COUNT.fullmatch(token)
            if not match:
                raise JobtpuError(f"--req {token!r}: a resource request is NAME=COUNT, like gpu=2")
            if len(match[2]) > 9 or int(match[2]) > MAX_RESOURCE_COUNT:  # no machine offers more
                raise JobtpuError(f"--req {token[:60]!r}: at most {MAX_RESOURCE_COUNT} of a resource")
            resources[match[1]] = resources.get(match[1], 0) + int(match[2])
            continue
        alternatives = tuple(a.strip() for a in token.split(","))
        for alt in alternatives:
            found = accelerator(alt)
            if found is None or found.config_spelling:
                raise JobtpuError(
                    f"--req {token!r}: not a resource (gpu=2) nor an accelerator pattern",
                    hint="accelerator patterns: v3-32 (exact), v3 (family), v2-32,v3-32 (either), v3+ (v3 or newer),"
                         " preemptible, on-demand")
        accelerators.append(alternatives)
    return Request(resources=MappingProxyType(resources), accelerators=tuple(accelerators), preemptible=preemptible)


def accelerator_matches(pattern: str, name: str | None) -> bool:
    """Whether a machine's accelerator type takes a request's pattern (schema/accelerator.py)."""
    found = accelerator(name)
    return found is not None and found.matches(pattern)


def why_not(machine: Machine, request: Request, pin: str | None = None) -> str | None:
    """None when the machine could run the request on an empty day, else a short reason."""
    if pin is not None and machine.name != pin:
        return f"the job is pinned to {pin}"
    for alternatives in request.accelerators:
        if not any(accelerator_matches(p, machine.accelerator) for p in alternatives):
            have = machine.accelerator or "no accelerator"
            return f"has {have}, the job asks {','.join(alternatives)}"
    if request.preemptible is not None and (machine.cloud_node and machine.preemptible) != request.preemptible:
        return "is on-demand" if request.preemptible else "is preemptible"
    capacity = machine.capacity
    for resource, count in request.needs().items():
        if capacity.get(resource, 0) < count:
            return f"offers {resource}={capacity.get(resource, 0)}, the job asks {count}"
    return None


def allocate(capacity: dict[str, int], used: dict[str, set[int]], needs: dict[str, int]) -> dict[str, list[int]] | None:
    """Lowest free indices of each resource, or None when something is short right now."""
    alloc: dict[str, list[int]] = {}
    for resource, count in needs.items():
        free = [i for i in range(capacity.get(resource, 0)) if i not in used.get(resource, set())]
        if len(free) < count:
            return None
        alloc[resource] = free[:count]
    return alloc

"""Whether a machine could ever give what a job asks for (`--req` tokens, docs/reference/requests-and-rules.md §6,
parsed by schema/request.py), and which of its resources a job gets. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobtpu.schema.accelerator import accelerator

# The request's parse lives with the types it checks (schema/request.py): state.json's checks read it
# without reaching up into the decisions. Named here too, beside the matching that takes its Request.
from jobtpu.schema.request import MAX_RESOURCE_COUNT as MAX_RESOURCE_COUNT
from jobtpu.schema.request import Request as Request
from jobtpu.schema.request import parse_request as parse_request

if TYPE_CHECKING:  # for annotations only
    from jobtpu.schema.fleet import Machine


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

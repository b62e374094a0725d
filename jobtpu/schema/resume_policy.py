"""machines.json's `resume` policy (docs/reference/machines-json.md §3.12) as the fleet holds it: where
a job that lost its machine (preempted, lost, hung) looks for another at once, nearest first, and
whether it waits for its own TPU instead. decide/locality.py orders the machines by it. Pure."""

from collections.abc import Iterable

from jobtpu.schema.decode import FileRefused
from jobtpu.schema.machines_file import ResumeEntry, ResumeWord
from jobtpu.schema.msgspec_lib import msgspec


def region_of(zone: str | None) -> str:
    """us-central2-b → us-central2: the zone minus its last part ("" for no zone)."""
    if not zone:
        return ""
    return zone.rsplit("-", 1)[0] if "-" in zone else zone


class ResumePolicy(msgspec.Struct, frozen=True):
    """The tiers a resuming job tries, in order (a machine goes in the first that takes it):
    `zone`, its last attempt's zone; `region`, any zone of that region; `allowed`, the `regions`
    listed, in their order. `wait_for_own`: a job whose rule recreates its TPU waits for that one."""

    order: tuple[ResumeWord, ...] = ("zone", "region")
    regions: tuple[str, ...] = ()
    wait_for_own: bool = True


# No `resume` in machines.json: the job's own TPU when its rule recreates it (what jobtpu always did),
# else the nearest fitting machine of its own region. Never another region unasked: its data and its
# checkpoints are where it ran, and a cold start across regions costs more than a short wait.
DEFAULT = ResumePolicy()


def resume_policy(entry: ResumeEntry, zones: Iterable[str]) -> ResumePolicy:
    """The policy a `resume` object says, or FileRefused naming what is wrong in it. `zones`: every
    zone a machine of the fleet may be in (a region the list names must be one of theirs)."""
    seen: set[str] = set()
    for word in entry.order:
        if word in seen:
            raise FileRefused(f"resume.order names {word!r} twice: name each of zone, region, allowed once")
        seen.add(word)
    if not entry.order:
        raise FileRefused('resume.order is empty: list where a resuming job looks, like ["zone", "region"]')
    if entry.regions and "allowed" not in entry.order:
        raise FileRefused('resume.regions is unused: add "allowed" to resume.order, or drop the regions')
    known = {region_of(zone) for zone in zones if zone}
    for region in entry.regions:
        if region not in known:
            have = ", ".join(sorted(known)) or "none"
            raise FileRefused(f"resume.regions names {region!r}, the region of no machine's zone "
                              f"(the machines' regions: {have})")
    if len(set(entry.regions)) != len(entry.regions):
        raise FileRefused("resume.regions names a region twice: list each once, nearest first")
    return ResumePolicy(order=tuple(entry.order), regions=tuple(entry.regions), wait_for_own=entry.wait_for_own)

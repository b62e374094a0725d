"""Where a job that lost its machine resumes, by locality (machines.json's `resume`,
docs/reference/machines-json.md §3.12): the machines it may go to at once, nearest first (its last
attempt's zone, then its region, then the regions the policy allows), and never another region when
its data cannot follow it there. Pure: dispatch.py asks, in the order it offers machines."""

from __future__ import annotations

from collections.abc import Iterable

from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.resume_policy import ResumePolicy, region_of
from jobtpu.schema.state import Job


def may_cross_regions(job: Job) -> bool:
    """Whether the job's data can follow it to another region: only when it says where its
    checkpoints live (submit --checkpoints, whose copy at launch brings the newest one along)."""
    return job.saving is not None and job.saving.checkpoints is not None


def origin_zone(job: Job, fleet: Fleet) -> str | None:
    """The zone the job's last attempt ran in, as machines.json names it (a machine of several
    zones: its first); None when it ran on none with a zone, or that machine left machines.json."""
    if not job.attempts:
        return None
    machine = fleet.get(job.attempts[-1].machine)
    return None if machine is None else machine.zone or (machine.zones[0] if machine.zones else None)


def ranked(origin: str | None, policy: ResumePolicy, machines: Iterable[Machine], cross: bool) -> list[Machine]:
    """The machines a job last run in zone `origin` may resume on at once, nearest first: each goes in
    the first tier of `policy.order` that takes it (zone: the same zone; region: a zone of the same
    region; allowed: the listed regions, in the list's order), machines.json's order within a tier.
    Another region's only when `cross` (its data follows). No origin: every machine, as given."""
    given = list(machines)
    if origin is None:
        return given
    home = region_of(origin)

    def tier(machine: Machine) -> tuple[int, int] | None:
        zone = machine.zone or (machine.zones[0] if machine.zones else None)
        region = region_of(zone)
        for rank, word in enumerate(policy.order):
            if word == "zone" and zone == origin:
                return rank, 0
            if word == "region" and zone and region == home:
                return rank, 0
            if word == "allowed" and region in policy.regions and (region == home or cross):
                return rank, policy.regions.index(region)
        return None

    tiers = [(t, i, m) for i, m in enumerate(given) if (t := tier(m)) is not None]
    return [m for _, _, m in sorted(tiers, key=lambda tim: (tim[0], tim[1]))]


def resume_candidates(job: Job, fleet: Fleet) -> list[Machine] | None:
    """The machines a recovering one-slice job may resume on at once, nearest first (its own kept
    TPU first, should it be ready); None when locality says nothing of it: it is not recovering, its
    last attempt ran where machines.json names no zone, or it waits for its own TPU (`keeps`, when
    the policy's wait_for_own says so)."""
    if job.reason != model.RECOVERING or job.slices > 1:
        return None
    origin = origin_zone(job, fleet)
    if origin is None or (job.keeps and fleet.resume.wait_for_own):
        return None
    order = ranked(origin, fleet.resume, fleet.machines.values(), may_cross_regions(job))
    own = [m for m in order if m.name in job.keeps]
    return own + [m for m in order if m.name not in job.keeps]


def where_text(job: Job, fleet: Fleet) -> str:
    """Where a resuming job may go, for its pending reason: `it resumes in zone us-central2-b, then
    region us-central2 only`."""
    origin = origin_zone(job, fleet)
    home = region_of(origin)
    allowed = [r for r in fleet.resume.regions if r == home or may_cross_regions(job)]
    words = {"zone": f"zone {origin}", "region": f"region {home}",
             "allowed": f"region{'s' if len(allowed) > 1 else ''} {' or '.join(allowed)}" if allowed else ""}
    where = ", then ".join(w for word in fleet.resume.order if (w := words[word]))
    return f"it resumes in {where} only" if where else "it may resume in no region its data can follow"

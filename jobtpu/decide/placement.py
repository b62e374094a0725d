"""Where an attempt runs, as its job sees it: the JOBTPU_ZONE … JOBTPU_COORDINATOR variables and the
`submit --on-resume` arguments with their placeholders filled (docs/reference/job-environment.md §8.2). Pure."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from jobtpu.errors import JobtpuError
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.resume_policy import region_of

# What --on-resume may name; `${NAME}` is the shell's and left alone.
PLACEHOLDERS = ("attempt", "zone", "region", "job")
_PLACEHOLDER = re.compile(r"(?<!\$)\{([^{}]*)\}")
# Coordinator ports: below Linux's ephemeral range (32768-60999), where outgoing connections take
# their ports, and above the usual services. The same job and attempt always get the same port.
PORT_BASE, PORT_SPAN = 20000, 12000


class Place(msgspec.Struct, frozen=True):
    """The machine an attempt runs on, in the words of its environment."""

    zone: str  # "" when machines.json names none (ssh, local)
    node: str  # the TPU node's name, else the worker's host
    accelerator: str  # machines.json's `accelerator`, "" when it has none
    hosts: tuple[str, ...]  # every worker's address as jobtpu reaches it, in worker order
    peers: tuple[str, ...]  # every worker's address as the others reach it (peer_hosts), in worker order

    @property
    def region(self) -> str:
        """us-central2-b → us-central2: the zone minus its last part."""
        return region_of(self.zone)


def peer_hosts(reached: Sequence[str], internal: Sequence[str], peer_addresses: Sequence[str]) -> tuple[str, ...]:
    """Where the machine's workers reach each other, in worker order: machines.json's peer_addresses
    when they name one per worker, else a worker's internal address (a TPU's from the API), else the
    address jobtpu reaches it at (`reached`, an ssh worker's host). Never the external address that
    jobtpu's own SSH may use (`use_external_ip`): the workers' traffic stays on their network."""
    named = tuple(peer_addresses) if len(peer_addresses) == len(reached) else ()
    return tuple(named[i] if named else internal[i] if i < len(internal) else addr for i, addr in enumerate(reached))


def coordinator_port(job_id: int, attempt: int) -> int:
    """Worked out alike on every worker, with no round trip: each attempt gets another port, so one
    still in TIME_WAIT from the attempt before never blocks the next."""
    return PORT_BASE + (job_id * 7919 + attempt) % PORT_SPAN


def place_env(place: Place, worker_host: str, job_id: int, attempt: int) -> dict[str, str]:
    """The variables of one worker; JOBTPU_HOSTS and JOBTPU_COORDINATOR only when it has peers."""
    env = {"JOBTPU_ZONE": place.zone, "JOBTPU_REGION": place.region,
           "JOBTPU_NODE": place.node or worker_host, "JOBTPU_ACCELERATOR": place.accelerator}
    if len(place.peers) > 1:  # the workers meet over their own network (docs/reference/job-environment.md §8.2)
        env["JOBTPU_HOSTS"] = ",".join(place.peers)
        env["JOBTPU_COORDINATOR"] = f"{place.peers[0]}:{coordinator_port(job_id, attempt)}"
    return env


# Megascale's own default port (Levanter's and Ray's multislice launchers use it too): every slice's
# workers reach slice 0's worker 0 there. One port per gang, unlike the coordinator's per attempt.
MEGASCALE_PORT = 8081


def gang_env(slice_id: int, slices: int, coordinator: str) -> dict[str, str]:
    """The variables that join a gang's slices (docs/reference/job-environment.md §8.2): which slice
    a worker is on, how many there are, and slice 0's worker 0 (its internal address) as the
    Megascale coordinator. None for a one-slice job."""
    if slices <= 1:
        return {}
    return {"JOBTPU_SLICE": str(slice_id), "JOBTPU_SLICES": str(slices),
            "MEGASCALE_COORDINATOR_ADDRESS": f"{coordinator}:{MEGASCALE_PORT}",
            "MEGASCALE_NUM_SLICES": str(slices), "MEGASCALE_SLICE_ID": str(slice_id),
            "MEGASCALE_PORT": str(MEGASCALE_PORT)}


def check_on_resume(args: str) -> None:
    """Refuse --on-resume words that name a placeholder jobtpu does not fill, or do not parse."""
    unknown = sorted({m for m in _PLACEHOLDER.findall(args) if m not in PLACEHOLDERS})
    if unknown:
        known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
        raise JobtpuError(f"--on-resume names unknown placeholder {{{unknown[0]}}}",
                          hint=f"use {known}, or write ${{NAME}} for a shell variable")
    try:
        shlex.split(args)
    except ValueError as e:
        raise JobtpuError(f"--on-resume does not parse as shell words ({e})",
                          hint="close every quote, like --on-resume '--config.x=\"a b\"'") from None


def on_resume_words(args: str, place: Place, job_id: int, attempt: int) -> str:
    """The --on-resume arguments with their placeholders filled, each value shell-quoted."""
    values = {"attempt": str(attempt), "zone": place.zone, "region": place.region, "job": str(job_id)}

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        return shlex.quote(values[name]) if name in values else m.group(0)

    return _PLACEHOLDER.sub(fill, args)

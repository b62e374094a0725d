"""`jobtpu doctor NAME` on a Slurm cluster, its driver's part: at the login host, the Slurm commands
jobtpu runs, whether Slurm's controller answers, and whether the machine's partition is one of its."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobtpu.errors import RemoteError
from jobtpu.schema import worker_protocol as protocol
from jobtpu.schema.fleet import Machine
from jobtpu.slurm.scripts import doctor_script
from jobtpu.transport.base import Endpoint

Line = tuple[str, bool]  # the text, and whether it is a problem


def slurm_checks(session: Any, machine: Machine, eps: list[Endpoint],
                 label_of: Callable[[Machine, Endpoint], str]) -> list[Line]:
    out: list[Line] = []
    for ep in eps:
        label = label_of(machine, ep)
        try:
            with session.connected(machine, ep) as t:
                result = t.run(doctor_script(), timeout=machine.connect_timeout + 30)
        except RemoteError as e:
            out.append((f"{label}: problem: the Slurm checks could not run: {e.message}", True))
            continue
        out.extend(judge(machine, label, protocol.reports(result.stdout)))
    return out


def judge(machine: Machine, label: str, found: list[protocol.Report]) -> list[Line]:
    """The lines the login host's answers make. Pure."""
    out: list[Line] = [(f"{label}: problem: {tool.name} is not on the login host's PATH; jobtpu runs it there "
                        "(load Slurm's module in the login shell's profile, or install Slurm's clients)", True)
                       for tool in protocol.of_kind(found, protocol.Tool) if not tool.path]
    for answer in protocol.of_kind(found, protocol.SlurmAnswer):
        if not answer.answers:
            out.append((f"{label}: problem: Slurm's controller does not answer: {answer.said}", True))
        elif machine.partition is not None and machine.partition not in answer.partitions:
            out.append((f"{label}: problem: partition {machine.partition} is not one of the cluster's "
                        f"({', '.join(answer.partitions) or 'none'}); fix 'partition' in machines.json", True))
        else:
            out.append((f"{label}: ok: Slurm answers; partitions {', '.join(answer.partitions) or 'none'}", False))
    if not out:
        out.append((f"{label}: problem: the Slurm check said nothing", True))
    return out

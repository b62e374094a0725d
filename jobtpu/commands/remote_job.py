"""`jobtpu exec JOB` and `jobtpu ssh JOB`: where a running job is reached. On an ssh machine or a TPU,
the workers its attempt holds, the command run in the job's folder; on a Slurm cluster, the job's
node, through a step in the job's own allocation started at the login host (jobtpu/slurm/step.py)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError
from jobtpu.schema.state import Job, Status

if TYPE_CHECKING:
    from jobtpu.passes.session import Session
    from jobtpu.schema.fleet import Machine
    from jobtpu.transport.base import Endpoint


# The job's machine, the endpoints that reach it, and what each runs (by its login shell): in the
# job's folder, on Slurm a step of the job.
Target = tuple["Machine", list["Endpoint"], str]


def job_named(session: Session, word: str) -> Job | None:
    """The job `word` names: a job id that is no machine's name or alias (a machine by that name
    wins); None when it names a machine."""
    fleet = session.fleet
    if not word.isdigit() or word in fleet.machines or any(word in m.aliases for m in fleet.machines.values()):
        return None
    return session.state.require_job(int(word))


def job_target(session: Session, job: Job, worker: int | None, words: list[str]) -> Target:
    """Where the running job `job` is reached and what runs there: `words` (by the login shell, joined
    by spaces as ssh joins them), or with none a shell, in the job's folder; `worker` one of the
    workers its attempt holds (None: all). One line for a job that runs nowhere."""
    attempt = job.current
    if job.ended or attempt is None or not job.machine:
        raise JobtpuError(f"job {job.id} has ended ({job.status}): nothing runs to reach",
                          hint=f"`jobtpu tail {job.id}` shows its log, `jobtpu fetch {job.id}` its folder")
    if job.status is not Status.RUNNING:
        raise JobtpuError(f"job {job.id} is {job.status}: it runs on no worker yet",
                          hint=f"`jobtpu status {job.id}` says when it starts")
    if attempt.gang:
        raise JobtpuError(f"job {job.id} runs on several machines ({', '.join(attempt.gang)})",
                          hint=f"name one: `jobtpu exec {attempt.gang[0]} -- CMD`")
    machine = session.fleet.get(job.machine)
    if machine is None:
        raise JobtpuError(f"job {job.id} runs on {job.machine}, which machines.json no longer has",
                          hint="put its entry back to reach it")
    held = session.endpoints(machine)[: attempt.workers]
    if not held:
        raise JobtpuError(f"{machine.name}: no worker address is known yet", hint="run `jobtpu manage` first")
    if worker is not None and worker >= len(held):
        raise JobtpuError(f"job {job.id} has no worker {worker}", hint=f"its workers are 0 to {len(held) - 1}")
    endpoints = held if worker is None else [held[worker]]
    folder = f"{machine.root}/jobs/{job.id}"
    if machine.scheduled:
        return machine, endpoints, _slurm_step(session, machine, endpoints[0], job, folder, words)
    run = " ".join(words) if words else 'exec "${SHELL:-bash}" -l'
    return machine, endpoints, f"cd -- {shlex.quote(folder)} && {run}"


def _slurm_step(session: Session, machine: Machine, endpoint: Endpoint, job: Job, folder: str,
                words: list[str]) -> str:
    """The login host's command that starts the step, once Slurm said the job runs."""
    from jobtpu.errors import RemoteError
    from jobtpu.slurm.step import state_query, step_command, step_id

    slurm_job = job.current.slurm_job if job.current is not None else None
    if slurm_job is None:
        raise JobtpuError(f"job {job.id} is not handed to Slurm yet", hint="a pass hands it over; try again after it")
    try:
        with session.connected(machine, endpoint) as t:
            said = t.run(state_query(slurm_job), timeout=machine.connect_timeout + 30)
    except RemoteError as e:
        raise JobtpuError(f"{machine.name}: {e.message}", hint=f"`jobtpu doctor {machine.name}` checks it") from None
    return step_command(job.id, folder, step_id(job.id, slurm_job, said.exit_code, said.stdout, said.stderr), words)

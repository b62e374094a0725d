"""`jobtpu exec JOB` and `jobtpu ssh JOB` of a job on a Slurm cluster: a step in the job's own
allocation, started at the login host with `srun --jobid=<id> --overlap` (Slurm ≥ 20.11), so it
runs on the job's node, inside its cgroup and limits, where compute nodes refuse a login from
outside an allocation. Pure: the words sent and the reading of Slurm's answer
(docs/reference/commands.md §2.19, §2.20)."""

from __future__ import annotations

import shlex

from jobtpu.errors import JobtpuError

# Slurm's states of a job that runs (a step can join it) and of one that waits for a node.
RUNNING = ("RUNNING",)
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED")


def state_query(slurm_job: int | str) -> str:
    """What the login host runs to learn the job's state, its pending reason and its own id (an array
    member's `<array id>_<index>` is not one srun takes): one line `STATE|REASON|ID`."""
    return shlex.join(["squeue", "--noheader", "--states=all", "--array", f"--jobs={slurm_job}",
                       "--format=%T|%r|%A"])


def step_id(job: int, slurm_job: int | str, code: int, out: str, err: str) -> str:
    """The Slurm job id a step joins, from state_query's answer; a job that waits or ended, or a
    Slurm that does not answer, is one JobtpuError line."""
    where = f"job {job} (Slurm job {slurm_job})"
    line = out.strip().splitlines()[0] if out.strip() else ""
    if code != 0 or not line:
        said = " ".join((err or out).split())[:300]
        if not line and (code == 0 or "Invalid job id" in said):  # past Slurm's MinJobAge
            raise JobtpuError(f"{where} has ended: Slurm no longer knows it; nothing runs to reach",
                              hint=f"`jobtpu tail {job}` shows its log, `jobtpu fetch {job}` its folder")
        raise JobtpuError(f"{where}: Slurm does not answer at the login host: {said or f'squeue exited {code}'}",
                          hint="try again when Slurm's controller answers")
    state, _, rest = line.partition("|")
    reason, _, real = rest.partition("|")
    if state in RUNNING and real.strip().isdigit():
        return real.strip()
    if state in WAITING:
        reason = reason if reason not in ("", "None") else "queued"  # Slurm's word before it looked at the job
        raise JobtpuError(f"{where} is {state.lower()} in Slurm ({reason}): it runs on no node yet",
                          hint=f"`jobtpu status {job}` says when it starts")
    raise JobtpuError(f"{where} has ended in Slurm ({state or '?'}): nothing runs to reach",
                      hint=f"`jobtpu tail {job}` shows its log")


def step_command(job: int, folder: str, real_id: str, words: list[str]) -> str:
    """The login host's command: in the job's folder (on the shared filesystem, so the same path on
    its node), a step of the job running `words` by bash as ssh runs a command (joined by spaces), or,
    with none, an interactive shell on a pseudo-terminal (`--pty`). The step's environment is what
    srun gives a step of the job (SLURM_JOB_ID, the login's own) and the job's JOBTPU_JOB_ID."""
    step = ["srun", f"--jobid={real_id}", "--overlap", "--nodes=1", "--ntasks=1", "--quiet",
            f"--export=ALL,JOBTPU_JOB_ID={job}"]
    run = ["bash", "-c", " ".join(words)] if words else ["--pty", "bash", "-i"]
    return f"cd -- {shlex.quote(folder)} && exec {shlex.join([*step, *run])}"

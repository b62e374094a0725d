"""The sbatch options of one attempt, in Slurm's words, from the machine's entry and the job's fields.
Pure: the same job on the same machine always asks Slurm for the same thing (tests/golden/)."""

from __future__ import annotations

import math

from jobtpu.schema.fleet import Machine
from jobtpu.schema.request import parse_request
from jobtpu.schema.state import Job

# Seconds Slurm's own --time gives past the job's --timeout and grace. The wrapper keeps the exact
# --timeout on the node (the attempt ends `timeout`, as on every machine); Slurm's limit, in whole
# minutes, is the backstop for a wrapper that could not.
TIME_MARGIN = 30.0


def sbatch_options(machine: Machine, job: Job, grace: float) -> tuple[str, ...]:
    """What sbatch is asked for besides the batch script: the cluster's partition, account, QOS and
    constraint, the job's resources (`--req gpu=N` is `--gres=gpu:N`, `cpu=N` is `--cpus-per-task=N`,
    any other resource a generic one), its --timeout as Slurm's --time, and the Slurm jobs its --after
    and --after-any wait for, when they run on the same cluster (--dependency)."""
    options = [f"--{key}={value}" for key in ("partition", "account", "qos", "constraint")
               if (value := getattr(machine, key)) is not None]
    options += ["--nodes=1", "--ntasks=1"]
    for resource, count in sorted(parse_request(job.req).resources.items()):
        if count <= 0 or resource == "slot":
            continue
        options.append(f"--cpus-per-task={count}" if resource == "cpu" else f"--gres={resource}:{count}")
    if job.timeout is not None:
        options.append(f"--time={slurm_minutes(job.timeout + grace + TIME_MARGIN)}")
    if job.current is not None and job.current.slurm_after:  # its --after jobs run there (decide/slurm_after.py)
        options.append(f"--dependency={job.current.slurm_after}")
    return tuple(options)


def slurm_minutes(seconds: float) -> int:
    """Whole minutes, at least one, never shorter than `seconds`."""
    return max(1, math.ceil(seconds / 60))

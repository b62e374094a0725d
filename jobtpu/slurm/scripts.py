"""The scripts a pass runs at a Slurm cluster's login host (jobtpu/remote/sh/slurm.sh): the probe of
every worker of the home's jobs there with one squeue, and the stop of workers with scancel. Their
reports are those of the other machines' probe and kill (remote/scripts.py parses them); a launch
is remote/scripts.launch_script with the spec's sbatch options; a sweep's, one job array."""

from __future__ import annotations

from collections.abc import Iterable

from jobtpu.decide.workers import LaunchSpec, WorkerRef
from jobtpu.remote.scripts import LOG_CHUNK, TAIL_BYTES, call, launch_call, launch_init, named, render
from jobtpu.result import MAX_RESULT_BYTES

# Tenths of a second a stop waits, past the scancel, for Slurm to say the job ended (its KillWait).
END_WAIT_TENTHS = 300


def probe_script(root: str, workers: Iterable[tuple[WorkerRef, int]], chunk: int = LOG_CHUNK) -> str:
    """A `host` report, then for each (worker, log bytes already pulled) the `worker`, `log` and
    `log-end` reports remote/scripts.probe_script's say, liveness from one squeue (and one sacct for the
    jobs squeue forgot whose wrapper wrote no exit), and an ended worker 0's saved value
    (jobtpu.save_result) as its `result` report, as on every machine."""
    args = [int(n) for w, offset in workers for n in (w.job, w.attempt, w.worker, offset)]
    return render(("common.sh", "slurm.sh"),
                  [named("jobtpu_slurm_probe", {"root": root, "chunk": int(chunk), "tail": TAIL_BYTES,
                                                       "result": MAX_RESULT_BYTES}, *args)])


def kill_script(root: str, refs: Iterable[WorkerRef], grace: float) -> str:
    """scancel each worker's Slurm job (TERM, then after `grace` seconds the kill): one `kill` report each."""
    args = [n for r in refs for n in (r.job, r.attempt, r.worker)]
    tenths = max(1, int(grace / 0.1))
    return render(("common.sh", "slurm.sh"), [call("jobtpu_slurm_kill", root, tenths, END_WAIT_TENTHS, "--", *args)])


def doctor_script() -> str:
    """A `tool` report for each Slurm command jobtpu runs, then a `slurm` report: the controller's
    partitions, or its error."""
    return render(("common.sh", "slurm.sh"), [call("jobtpu_slurm_doctor")])


def array_launch_script(specs: list[LaunchSpec], throttle: int | None) -> str:
    """A sweep's workers (one root, one set of sbatch options) on a Slurm cluster as ONE job array
    (sh/slurm.sh jobtpu_array), at most `throttle` running at once; launch_script's reports."""
    return render(("common.sh", "wrapper.sh", "tpu.sh", "launch.sh", "slurm.sh"), [
        launch_init(), call("jobtpu_batch", *(specs[0].batch or ())), call("jobtpu_array", specs[0].root, throttle or ""),
        *map(launch_call, specs), call("jobtpu_array_submit")])

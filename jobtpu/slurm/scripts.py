"""The scripts a pass runs at a Slurm cluster's login host (jobtpu/remote/sh/slurm.sh): the probe of
every worker of the home's jobs there with one squeue, and the stop of workers with scancel. Their
reports are those of the other machines' probe and kill (remote/scripts.py parses them); a launch
is remote/scripts.launch_script with the spec's sbatch options; a sweep's, one job array."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping

from jobtpu.decide.workers import LaunchSpec, WorkerRef
from jobtpu.remote.scripts import (
    LOG_CHUNK,
    TAIL_BYTES,
    call,
    launch_init,
    limit_seconds,
    named,
    render,
    tenths,
)
from jobtpu.result import MAX_RESULT_BYTES
from jobtpu.schema.state import Job

# Tenths of a second a stop waits, past the scancel, for Slurm to say the job ended (its KillWait).
END_WAIT_TENTHS = 300


def probe_script(root: str, workers: Iterable[tuple[WorkerRef, int]], chunk: int = LOG_CHUNK,
                 ids: Mapping[WorkerRef, str] | None = None) -> str:
    """A `host` report, then for each (worker, log bytes already pulled) the `worker`, `log` and
    `log-end` reports remote/scripts.probe_script's say, liveness from one squeue (and one sacct for the
    jobs squeue forgot whose wrapper wrote no exit), and an ended worker 0's saved value
    (jobtpu.save_result) as its `result` report, as on every machine. `ids`: each worker's Slurm id as
    the home knows it, for an array member that has not started (it records its own when it does)."""
    known = ids or {}
    args = [str(n) for w, offset in workers for n in (w.job, w.attempt, w.worker, int(offset), _id(known.get(w)))]
    return render(("common.sh", "reports.sh", "slurm.sh"),
                  [named("jobtpu_slurm_probe", {"root": root, "chunk": int(chunk), "tail": TAIL_BYTES,
                                                       "result": MAX_RESULT_BYTES}, *args)])


def kill_script(root: str, refs: Iterable[WorkerRef], grace: float, ids: Mapping[WorkerRef, str] | None = None) -> str:
    """scancel each worker's Slurm job (TERM, then after `grace` seconds the kill): one `kill` report
    each. `ids` as probe_script's: a member Slurm still holds pending is cancelled by the home's id."""
    known = ids or {}
    args = [str(n) for r in refs for n in (r.job, r.attempt, r.worker, _id(known.get(r)))]
    tenths = max(1, int(grace / 0.1))
    return render(("common.sh", "slurm.sh"), [call("jobtpu_slurm_kill", root, tenths, END_WAIT_TENTHS, "--", *args)])


def slurm_ids(jobs: Iterable[Job], refs: Iterable[WorkerRef]) -> dict[WorkerRef, str]:
    """The Slurm id the home has for each worker's attempt (a launch's report: `slurm_job`), where it has one."""
    wanted = list(refs)
    by_job = {r.job for r in wanted}
    known = {(job.id, a.n): a.slurm_job for job in jobs if job.id in by_job for a in job.attempts
             if a.slurm_job is not None}
    return {r: str(known[(r.job, r.attempt)]) for r in wanted if (r.job, r.attempt) in known}


def _id(slurm_job: str | None) -> str:
    """A Slurm id word for the scripts: a job's number or an array member's <array id>_<index>, else -."""
    return slurm_job if slurm_job is not None and re.fullmatch(r"[0-9]+(_[0-9]+)?", slurm_job) else "-"


def doctor_script() -> str:
    """A `tool` report for each Slurm command jobtpu runs, then a `slurm` report: the controller's
    partitions, or its error."""
    return render(("common.sh", "slurm.sh"), [call("jobtpu_slurm_doctor")])


def array_launch_script(specs: list[LaunchSpec], throttle: int | None) -> str:
    """A sweep's workers (one root, one home, one set of sbatch options) on a Slurm cluster as ONE job
    array (sh/slurm_array.sh), at most `throttle` running at once: a few files and one sbatch; each
    member makes its own folder on its node. launch_script's reports, one per worker."""
    first = specs[0]
    quoted: dict[str, str] = {}  # a thousand members repeat most of their words (names, machine, archive)

    def quote(word: str) -> str:
        q = quoted.get(word)
        if q is None:
            q = quoted[word] = shlex.quote(word)
        return q

    return render(("common.sh", "wrapper.sh", "launch.sh", "slurm.sh", "slurm_array.sh"), [
        launch_init(), call("jobtpu_batch", *(first.batch or ())),
        named("jobtpu_array", {"root": first.root, "home_id": first.home_id, "token": first.token,
                               "throttle": throttle or ""}, *dict.fromkeys(spec.ref.job for spec in specs)),
        *(member_call(spec, quote) for spec in specs), call("jobtpu_array_submit")])


def member_call(spec: LaunchSpec, quote: Callable[[str], str] = shlex.quote) -> str:
    """One member of the array: jobtpu_launch's arguments by position (a thousand members a script),
    whether a value of its environment is a secret (it then gets an env file of its own: a secret never
    lies in the array's table), its environment after them; every word quoted as remote/scripts.call
    quotes it."""
    r = spec.ref
    signal, delay = spec.early_signal or ("", 0)
    env = [word for name, value in spec.env.items() for word in (name, "=" if name in spec.literal else "x", value)]
    secret = any(name in spec.secret for name in spec.env)
    words = (r.job, r.attempt, r.worker, spec.archive, int(spec.fresh), spec.command, signal, int(delay),
             limit_seconds(spec.time_limit), tenths(spec.grace), int(secret), *env)
    return " ".join(["jobtpu_array_member", *(quote(str(word)) for word in words)])

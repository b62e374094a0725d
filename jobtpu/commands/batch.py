"""What `submit` adds for sweeps, dependencies, retries, grace and an early signal, and what `clean`
settles for the jobs that wait on the ones it removes. The pure parts (axes, sweep files, cycles)
are in jobtpu/sweeps.py."""

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home

if TYPE_CHECKING:
    from jobtpu.schema.state import Job, State

MAX_GRACE = 3600.0  # seconds: a longer TERM→KILL wait holds `kill` (and a pass) for an hour


class Extras(NamedTuple):
    """The checked values of the options this module adds to `submit`."""

    combinations: list[dict[str, str]] | None  # None: not a sweep
    after: list[int]
    after_any: list[int]
    retries: int
    grace: float | None
    signal: str | None
    signal_before: float | None
    max_running: int | None  # --max-running: at most this many of the sweep's jobs active at once (None: no cap)


def parse_extras(sweep: list[str], sweep_file: str | None, after: list[str], after_any: list[str],
                 retries: int, grace: str | None, signal: str | None, timeout: float | None,
                 max_running: int = 0, rows: list[dict[str, str]] | None = None) -> Extras:
    """Check the options before anything is snapshotted or written; one clear line for each mistake.
    `rows`: the combinations as values (the Python API's `sweep=`, sweeps.from_python), never split again."""
    from jobtpu import sweeps
    from jobtpu.inputs import parse_duration

    if sweep and sweep_file is not None:
        raise JobtpuError("give --sweep or --sweep-file, not both",
                          hint="write every combination into the file, or give the axes with --sweep")
    if rows is not None and (sweep or sweep_file is not None):  # the folder's jobtpu.toml gave one too
        raise JobtpuError("give sweep= or the job file's sweep, not both",
                          hint="drop sweep from the [job] table of jobtpu.toml, or sweep= from the call")
    combinations = rows
    if sweep:
        combinations = sweeps.expand(sweeps.parse_axes(sweep))
    elif sweep_file is not None:
        combinations = sweeps.read_file(Path(sweep_file).expanduser())
    if max_running and combinations is None:
        raise JobtpuError("--max-running caps how many jobs of a sweep run at once: give it with --sweep or "
                          "--sweep-file", hint="a single job runs once; `jobtpu update --sweep ID --max-running N` "
                                               "caps a sweep already queued")
    if combinations is not None:
        from jobtpu.commands.common import note

        for key in sweeps.check_env_names(combinations):
            note(f"jobtpu: the sweep key {key!r} is in the job's arguments but not its environment: "
                 f"${sweeps.ENV_PREFIX}{key.upper()} is the combination's index")
    grace_s = parse_duration(grace, "--grace") if grace is not None else None
    if grace_s is not None and grace_s > MAX_GRACE:
        raise JobtpuError(f"--grace {grace}: at most {int(MAX_GRACE)} seconds")
    name, before = parse_signal(signal, timeout) if signal is not None else (None, None)
    return Extras(combinations, sweeps.parse_after(after, "--after"), sweeps.parse_after(after_any, "--after-any"),
                  retries, grace_s, name, before, max_running or None)


def parse_signal(text: str, timeout: float | None) -> tuple[str, float]:
    """`USR1@30` → ("USR1", 30.0): the signal and how many seconds before --timeout it is sent."""
    from jobtpu.inputs import parse_duration
    from jobtpu.schema.names import SIGNALS

    word, sep, when = text.partition("@")
    name = word.strip().upper().removeprefix("SIG")
    if not sep or name not in SIGNALS:
        raise JobtpuError(f"--signal {text!r} is not SIG@SECONDS with SIG one of {', '.join(SIGNALS)}",
                          hint="like --signal USR1@60 (USR1, 60 seconds before --timeout ends)")
    before = parse_duration(when, "--signal")
    if timeout is None:
        raise JobtpuError("--signal needs a --timeout: it is sent that long before the timeout ends",
                          hint="like --timeout 2h --signal USR1@120")
    if before >= timeout:
        raise JobtpuError(f"--signal {text!r}: {before:g} s is not within the --timeout of {timeout:g} s")
    return name, before


def apply_extras(job: "Job", extras: Extras) -> None:
    job.after, job.after_any, job.retries = list(extras.after), list(extras.after_any), extras.retries
    job.grace, job.signal, job.signal_before = extras.grace, extras.signal, extras.signal_before
    job.max_running = extras.max_running


def sweep_jobs(job: "Job", combinations: list[dict[str, str]], team: dict[str, str], own: dict[str, str]) -> "list[Job]":
    """One job per combination, copies of `job` (one snapshot) with the combination's overrides after
    the command line's own, through the same three alias levels (`team`, the user's `own`); ids, the
    sweep and its tag are given when they are saved."""
    from jobtpu.home.settings import config_overrides
    from jobtpu.limits import check_overrides
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.sweeps import as_overrides

    jobs = [msgspec.structs.replace(job, overrides=[*job.overrides, *config_overrides(as_overrides(c), team, own)],
                                    sweep_index=i, sweep_values=dict(c), tags=list(job.tags), after=list(job.after),
                                    after_any=list(job.after_any), env=dict(job.env), req=list(job.req))
            for i, c in enumerate(combinations)]
    for one in jobs:
        check_overrides(one.overrides)
    return jobs


def sweep_tag(sweep_id: int) -> str:
    """The tag every job of a sweep carries (`--tag sweep:12` selects it as `--sweep 12` does)."""
    return f"sweep:{sweep_id}"


def check_dependencies(home: Home, state: "State", first_id: int, after: list[int], after_any: list[int]) -> None:
    """Refuse, before anything is saved, an id no job has, a job waiting for itself, a cycle, and an
    --after on a job that already ended without finishing (it could never start)."""
    from jobtpu.schema.state import Status
    from jobtpu.sweeps import check_dependencies as check_graph

    if not after and not after_any:
        return
    known: dict[int, list[int]] = {j.id: [*j.after, *j.after_any] for j in state.jobs}
    ended: dict[int, str] = {j.id: j.status for j in state.jobs if j.ended}
    missing = [i for i in (*after, *after_any) if i not in known and i != first_id]
    if missing:  # cleaned jobs are in history: they wait for nothing any more
        for job_id, status in history_statuses(home, set(missing)).items():
            known[job_id], ended[job_id] = [], status
    check_graph(first_id, [*after, *after_any], known)
    from jobtpu.decide.rules import cycle_text, dependency_cycles

    rings = dependency_cycles(state.jobs)  # made by hand: a job waiting on one would wait forever
    for job_id in (*after, *after_any):
        if job_id in rings:
            raise JobtpuError(f"--after {job_id}: job {job_id} is in a dependency cycle ({cycle_text(rings[job_id])}); "
                              "it can never start", hint="the next pass fails the jobs of the cycle; wait on another job")
    for job_id in after:
        if job_id in ended and ended[job_id] != Status.FINISHED:
            raise JobtpuError(f"--after {job_id}: job {job_id} already ended {ended[job_id]}; this job could never start",
                              hint=f"`jobtpu rerun {job_id}` first, or wait for it with --after-any")


def history_statuses(home: Home, ids: set[int]) -> dict[int, str]:
    """The status of each of these ids that `clean` moved to history.jsonl."""
    from jobtpu.home.store import open_history
    from jobtpu.schema.msgspec_lib import msgspec

    class Line(msgspec.Struct):
        id: int
        status: str

    found: dict[int, str] = {}
    decoder = msgspec.json.Decoder(Line)
    try:
        f = open_history(home)
    except FileNotFoundError:
        return found
    with f:
        for raw in f:
            try:
                line = decoder.decode(raw)
            except msgspec.DecodeError:
                continue  # a damaged line names no job anyone can wait for
            if line.id in ids:
                found[line.id] = line.status
    return found


def settle_dependents(remaining: "list[Job]", gone: "list[Job]") -> None:
    """Before `clean` moves ended jobs to history: jobs still waiting for them stop waiting (a finished
    one, or any ended one under --after-any) or fail with reason `dependency` (one that failed or was
    killed, under --after), as the pass would have decided; no queued job is left waiting for an id
    that is no longer in state.json."""
    from jobtpu.schema.state import DEPENDENCY, Cause, Status

    by_id = {j.id: j for j in gone}
    for job in remaining:
        if job.status is not Status.QUEUED or not (job.after or job.after_any):
            continue  # only a queued job still waits; the records of the others stay as they are
        broken = next((by_id[i] for i in job.after if i in by_id and by_id[i].status != Status.FINISHED), None)
        if broken is not None:
            job.last_line = f"job {broken.id} it waited for (--after) ended {broken.status}"
            job.move(Status.FAILED, DEPENDENCY, cause=Cause.REFUSE)
            job.waiting = None
            continue
        job.after = [i for i in job.after if i not in by_id]
        job.after_any = [i for i in job.after_any if i not in by_id]

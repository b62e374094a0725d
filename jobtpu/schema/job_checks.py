"""What state.json's types cannot say about a job: its words (reasons, rules, signals), requests that
must parse, and the fields that only make sense together. One line says what is wrong."""

import functools

from jobtpu.schema import exit_codes
from jobtpu.schema.names import (
    ARCHIVE_NAME,
    ENV_NAME,
    INT_RANGE,
    MAX_COUNT,
    MAX_WORKERS,
    RESOURCE_NAME,
    SIGNALS,
)
from jobtpu.schema.state import (
    ACTIVE,
    ENDED,
    FINISHED,
    RECOVERIES,
    RULES,
    Attempt,
    Ending,
    Job,
    is_valid_reason,
)

_ENDED_WORDS = ", ".join(sorted(s.value for s in ENDED))
_I64 = 2**63
_ARCHIVE_OK = ARCHIVE_NAME.match


def job_problem(job: Job) -> str | None:
    """Why a decoded job cannot be used (the rules its types cannot express), or None."""
    return None if _plainly_fine(job) else _job_problem(job)


def _plainly_fine(job: Job) -> bool:
    """The common case of a sweep's queued job, as one expression (10k jobs in a few ms); anything
    less plain is checked field by field by _job_problem, which also says what is wrong."""
    return (0 < job.id < _I64 and 0 <= job.attempt < _I64 and 0 <= job.recoveries < _I64
            and 0 <= job.max_recoveries < _I64 and 0 <= job.log_size < _I64
            and (job.timeout is None or job.timeout > 0) and (job.stall is None or job.stall > 0)
            and job.preemptions == 0 and job.max_preemptions is None and job.retry_on_exit is None
            and _ARCHIVE_OK(job.archive) is not None and job.cmd != "" and not job.cmd.isspace()
            and job.reason is None and job.exit_code is None and (job.rule is None or job.rule in RULES)
            and not job.env and not job.alloc and not job.attempts and job.ending is None
            and (not job.req or _request_problem(tuple(job.req)) is None)
            and (bool(job.machine) or job.status not in ACTIVE) and -_I64 <= job.priority < _I64
            and 0 <= job.retries < _I64 and 0 <= job.retried < _I64 and job.grace is None and job.signal is None
            and (not job.after or min(job.after) > 0) and (not job.after_any or min(job.after_any) > 0)
            and (job.sweep is None or _plain_sweep(job.sweep, job.sweep_index))
            and (job.max_running is None or (job.sweep is not None and job.max_running >= 1))
            and job.slices >= 1 and not job.gang)


def _plain_sweep(sweep: int, index: int | None) -> bool:
    return 0 < sweep < _I64 and index is not None and 0 <= index < _I64


def _job_problem(job: Job) -> str | None:
    if job.id < 1:
        return "field 'id' must be a positive integer"
    for name in ("attempt", "max_recoveries", "recoveries", "log_size"):
        if getattr(job, name) < 0:
            return f"field {name!r} must be 0 or more"
    for name in ("preemptions", "max_preemptions"):
        if (getattr(job, name) or 0) < 0:
            return f"field {name!r} must be 0 or more"
    if job.timeout is not None and not job.timeout > 0:
        return "field 'timeout' must be a number of seconds above 0, or null"
    if job.stall is not None and not job.stall >= 0:  # 0: --stall 0, no stall watch even on a preemptible TPU
        return "field 'stall' must be a number of seconds, 0 or more, or null"
    if job.retry_on_exit is not None:
        try:
            exit_codes.parse(job.retry_on_exit)
        except ValueError as e:
            return f"field 'retry_on_exit': {e}"
    if not job.cmd.strip():
        return "field 'cmd' is empty"
    if not ARCHIVE_NAME.match(job.archive):
        return f"field 'archive' must be an archive's bare file name, like <sha256>.tar.gz (got {job.archive[:80]!r})"
    return (_env_problem(job.env) or _reason_problem(job.reason) or _alloc_problem(job.alloc)
            or _rule_problem(job.rule) or _attempts_problem(job.attempts) or _ending_problem(job.ending)
            or _request_problem(tuple(job.req)) or _bounds_problem(job) or _sweep_problem(job)
            or (f"a {job.status} job needs a 'machine'" if job.active and not job.machine else None))


def _sweep_problem(job: Job) -> str | None:
    """The fields of sweeps, dependencies, retries, grace and signal."""
    for name in ("retries", "retried"):
        if getattr(job, name) < 0:
            return f"field {name!r} must be 0 or more"
    if job.sweep is not None and job.sweep < 1 or job.sweep_index is not None and job.sweep_index < 0:
        return "fields 'sweep' and 'sweep_index' must be a job id and 0 or more"
    if job.max_running is not None and (job.sweep is None or job.max_running < 1):
        return "field 'max_running' must be 1 or more, in a sweep's job (null: no cap)"
    if any(i < 1 for i in job.after + job.after_any):
        return "fields 'after' and 'after_any' must list job ids"
    if job.grace is not None and not 0 < job.grace <= 3600:
        return "field 'grace' must be a number of seconds above 0, at most 3600"
    if job.signal is not None and (job.signal not in SIGNALS or job.signal_before is None or not job.signal_before > 0):
        return f"fields 'signal' and 'signal_before' must be one of {', '.join(SIGNALS)} and seconds above 0"
    if job.slices < 1 or (job.gang and (len(set(job.gang)) != job.slices or job.gang[0] != job.machine)):
        # A machine named twice would be two slices on one machine: two launches, one machine's resources.
        return ("field 'slices' must be 1 or more, and 'gang' (when set) list that many different machines, "
                "'machine' first")
    return None


def _env_problem(env: dict[str, str]) -> str | None:
    for name in env:
        if not ENV_NAME.match(name) or name.startswith("JOBTPU_"):
            return (f"field 'env': {name[:80]!r} is not a variable name a job may set "
                    "(letters, digits and '_', not starting with a digit nor JOBTPU_)")
    return None


def _reason_problem(reason: str | None) -> str | None:
    return None if is_valid_reason(reason) else f"field 'reason' is not a known reason: {reason!r}"


def _alloc_problem(alloc: dict[str, list[int]]) -> str | None:
    for resource, indices in alloc.items():
        if not RESOURCE_NAME.match(resource):
            return f"field 'alloc': {resource[:40]!r} is not a resource name (lowercase, digits, '_')"
        if len(indices) > MAX_COUNT or not all(0 <= i < MAX_COUNT for i in indices):
            return f"field 'alloc': alloc.{resource} must list at most {MAX_COUNT} indices, each 0 to {MAX_COUNT - 1}"
    return None


def _rule_problem(rule: str | None) -> str | None:
    if rule is None or rule in RULES:
        return None
    return f"field 'rule' must be one of {', '.join(RULES)} or null (got {rule!r})"


def _attempts_problem(attempts: list[Attempt]) -> str | None:
    for i, attempt in enumerate(attempts):
        if attempt.n < 0:
            return f"attempts[{i}].n must be 0 or more"
        if not 1 <= attempt.workers <= MAX_WORKERS:
            return f"attempts[{i}].workers must be 1 to {MAX_WORKERS}"
        if attempt.outcome is not None and attempt.outcome != FINISHED and not is_valid_reason(attempt.outcome):
            return (f"attempts[{i}].outcome must be null, 'finished' or a reason word like 'preempted' or "
                    f"'exit 1' (got {attempt.outcome!r})")
    return None


def _ending_problem(ending: Ending | None) -> str | None:
    if ending is None:
        return None
    if ending.status not in ENDED:
        return f"ending.status must be one of {_ENDED_WORDS} (got {ending.status.value!r})"
    if not is_valid_reason(ending.reason):
        return f"ending.reason is not a known reason: {ending.reason!r}"
    if ending.recover not in RECOVERIES:
        return f"ending.recover must be one of {', '.join(map(str, RECOVERIES[1:]))} or null (got {ending.recover!r})"
    return None


def _bounds_problem(job: Job) -> str | None:
    """An integer beyond 64 bits (msgspec reads any size) would not survive other tools' readers."""
    low, high = INT_RANGE
    for name in ("id", "attempt", "max_recoveries", "recoveries", "log_size", "exit_code", "priority", "retries",
                 "retried", "sweep", "sweep_index"):
        value = getattr(job, name)
        if value is not None and not low <= value <= high:
            return f"field {name!r} is too large"
    return None


@functools.lru_cache(maxsize=256)
def _request_problem(tokens: tuple[str, ...]) -> str | None:
    """Why these --req tokens cannot be parsed, or None. Found only at dispatch, it would stop every
    pass. (Cached: thousands of jobs of a sweep share a handful of requests.)"""
    from jobtpu.errors import JobtpuError
    from jobtpu.schema.request import parse_request  # here: only a job that names requests needs it

    try:
        parse_request(tokens)
    except JobtpuError as e:
        return f"field 'req': {e.message}"
    return None


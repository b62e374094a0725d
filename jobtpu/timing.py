"""Every wait and interval of the product in one frozen object (docs/design.md, "Timing").

Code reads `current().<field>`; nothing else holds a product wait. Tests (and anyone who must) shorten
them through ONE environment variable, `$JOBTPU_TIMING`: a JSON object of field overrides in
seconds, e.g. `{"lock_wait": 0.5, "unreachable_retry": 1}`, read once per process. The older
variables documented as user settings keep working and win over it: `$JOBTPU_LOCK_WAIT`,
`$JOBTPU_SHEET_FRESH`, `$JOBTPU_STOP_POLL`, `$JOBTPU_SETUP_TIMEOUT` and `$JOBTPU_RESTART_WAIT`.
"""

import functools
import os
from typing import NamedTuple

from jobtpu.errors import JobtpuError

ENV = "JOBTPU_TIMING"


class Timing(NamedTuple):
    """Seconds, unless the name says otherwise. Immutable (a NamedTuple: `--help` loads no dataclasses
    nor JSON, tests/test_imports.py)."""

    lock_wait: float = 5.0  # for a lock a teammate may hold (docs/design.md §2)
    manage_lock_wait: float = 2.0  # a pass waits this long for another pass to let go of the pass lock
    run_lock_wait: float = 30.0  # `run`, which must have its pass, waits longer for it
    act_lock_wait: float = 60.0  # kill/resume/rerun/clean/tpu/doctor --fix wait for a running pass
    lock_poll: float = 0.02  # between tries of a held lock
    state_lock_wait: float = 30.0  # for the home's state lock, held by a pass at most for a save
    unreachable_retry: float = 60.0  # an unreachable machine takes no new job this long after a failed contact
    setup_wait: float = 20.0  # a pass waits this long for a setup, so a quick one launches in that pass
    setup_poll: float = 0.5  # between looks at a running setup
    reset_wait: float = 20.0  # a launch waits this long for another worker replacing the job folder
    claims_fresh: float = 5.0  # a sheet read's claims are trusted this long by a pass about to launch
    claim_stale_minutes: float = 3  # a launch claim with no pid after this long never started (minutes)
    stop_poll: float = 2.0  # how often a local job's wrapper looks for a stop request
    grace: float = 5.0  # between TERM and KILL unless the job's --grace says otherwise
    launch_give_up: float = 3600.0  # a launch may go on this long without a clear answer from every worker
    stale_intervals: float = 3  # `status` warns after this many loop intervals without a pass (a count)
    lease_intervals: float = 3  # a runner's lease holds this many of its intervals; a standby takes over after (a count)
    default_interval: float = 60.0  # the loop interval assumed for passes from cron or by hand
    notify_budget: float = 5.0  # all of a pass's webhook deliveries together
    api_timeout: float = 30.0  # one TPU API call (the client has none: a hung API must not hang a pass)
    keepalive: float = 30.0  # between SSH keepalives on a kept connection
    script_timeout: float = 120.0  # one script run on a worker by a pass
    log_catch_up: float = 10.0  # a pass pulls the rest of ended attempts' logs this long; later passes go on
    peer_copy_wait: float = 600.0  # a worker serves a launch's snapshot to the others at most this long (whole s)
    follow_poll: float = 1.0  # between looks at a followed log with nothing new
    run_follow_poll: float = 1.0  # between the passes of `run --follow`
    events_poll: float = 0.5  # between looks at events.jsonl for `events --follow`
    setup_now_timeout: float = 3600.0  # `tpu setup`: one worker's setup commands (pip installs, a disk to mount)
    restart_wait: float = 900.0  # `tpu restart`: each of the stop and the start
    restart_poll: float = 1.0  # `tpu restart`: between looks at the operation
    spool_poll: float = 0.5  # a loop (manage --loop, watch) looks this often for members' requests in a shared home
    busy_interval: float = 2.0  # a loop's interval while work is in flight (a TPU operation, a setup, a launch)
    log_stream: float = 5.0  # between its passes, a loop brings running jobs' new log lines home this often
    request_wait: float = 10.0  # a member's act waits this long for a running loop to carry it out
    serve_watch: float = 0.5  # `serve`: its one watcher looks at the home's files this often
    serve_poll: float = 1.0  # `serve`: an open page asks whether anything changed this often (an ETag answer)
    stall_default: float = 1800.0  # a job on a preemptible TPU with no --stall ends `hang` after this long without a log byte


DEFAULTS = Timing()
# The documented single-value variables of before: a user setting each, kept working.
_LEGACY = {"JOBTPU_LOCK_WAIT": "lock_wait", "JOBTPU_SHEET_FRESH": "claims_fresh", "JOBTPU_STOP_POLL": "stop_poll",
           "JOBTPU_SETUP_TIMEOUT": "setup_now_timeout", "JOBTPU_RESTART_WAIT": "restart_wait"}


def parse(text: str | None, legacy: dict[str, str]) -> Timing:
    """The timing `$JOBTPU_TIMING` (`text`) and the legacy variables (name → value) ask for."""
    overrides: dict[str, float] = {}
    if text:
        import json

        try:
            raw = json.loads(text)
        except ValueError:
            raise JobtpuError(f"${ENV} is not JSON: give an object of seconds, e.g. "
                              '{"lock_wait": 0.5}, or unset it') from None
        if not isinstance(raw, dict):
            raise JobtpuError(f'${ENV} must be a JSON object of seconds, e.g. {{"lock_wait": 0.5}}')
        for name, value in raw.items():
            overrides[_field(name)] = _seconds(f"${ENV} {name}", value)
    for variable, name in _LEGACY.items():
        if variable in legacy:
            overrides[name] = _seconds(f"${variable}", legacy[variable])
    return DEFAULTS._replace(**overrides)


def _field(name: str) -> str:
    known = list(Timing._fields)
    if name not in known:
        raise JobtpuError(f"${ENV}: no wait named {name!r}; known: {', '.join(known)}")
    return name


def _seconds(what: str, value: object) -> float:
    try:
        seconds = float(value) if not isinstance(value, bool) else -1.0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = -1.0
    if not 0 <= seconds <= 86400:
        raise JobtpuError(f"{what}: {value!r} is not a number of seconds from 0 to 86400; fix or unset it")
    return seconds


def current() -> Timing:
    """This process's timing from the environment, parsed once (again only if the variables change,
    as in-process tests do)."""
    return _parsed(os.environ.get(ENV), tuple((k, os.environ[k]) for k in _LEGACY if k in os.environ))


@functools.cache
def _parsed(text: str | None, legacy: tuple[tuple[str, str], ...]) -> Timing:
    return parse(text, dict(legacy))


def env(**overrides: float) -> dict[str, str]:
    """The environment entry that gives a child process these waits (tests' one mechanism)."""
    import json

    for name in overrides:
        _field(name)
    return {ENV: json.dumps(overrides)}

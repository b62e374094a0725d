"""Jobs and attempts as data, their status and reason words, and the one table of legal status moves.

Only `Job.move` changes a job's status; every other module asks it to, and an illegal move raises."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .schema import ATTEMPT_LISTED, FIELDS, LISTED, STATUSES

# The recovery rules a job may name; rules.py says what each does (it imports this module, not back).
RULES = ("pre", "pass", "reapply", "rerun", "resume")


class Status(StrEnum):
    QUEUED = "queued"
    LAUNCHING = "launching"
    RUNNING = "running"
    KILLING = "killing"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"


# A job holds machine resources while it is in one of these.
ACTIVE = frozenset({Status.LAUNCHING, Status.RUNNING, Status.KILLING})
ENDED = frozenset({Status.FINISHED, Status.FAILED, Status.KILLED})

# Reason words (docs/reference.md §4.3). `exit N` is built by exit_reason().
PREEMPTED = "preempted"
GRPC = "grpc"
OOM = "oom"
LOST = "lost"
HANG = "hang"
TIMEOUT = "timeout"
LAUNCH_FAILED = "launch_failed"
KILLED = "killed"
RECOVERING = "recovering"
UNREACHABLE = "unreachable"
FINISHED = "finished"  # an attempt's outcome when every worker exited 0

REASONS = frozenset({PREEMPTED, GRPC, OOM, LOST, HANG, TIMEOUT, LAUNCH_FAILED, KILLED, RECOVERING, UNREACHABLE})


def exit_reason(code: int) -> str:
    return f"exit {code}"


def is_valid_reason(reason: str | None) -> bool:
    if reason is None or reason in REASONS:
        return True
    word, _, number = reason.partition(" ")
    return word == "exit" and number.lstrip("-").isdigit()


# The transition table: from → the statuses it may move to.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.QUEUED: frozenset({Status.LAUNCHING, Status.KILLED, Status.FAILED}),
    Status.LAUNCHING: frozenset({Status.RUNNING, Status.QUEUED, Status.KILLING, Status.FINISHED,
                                 Status.FAILED, Status.KILLED}),
    Status.RUNNING: frozenset({Status.RUNNING, Status.KILLING, Status.QUEUED, Status.FINISHED,
                               Status.FAILED, Status.KILLED}),
    Status.KILLING: frozenset({Status.KILLING, Status.QUEUED, Status.FAILED, Status.KILLED,
                               Status.FINISHED}),
    Status.FINISHED: frozenset({Status.QUEUED}),
    Status.FAILED: frozenset({Status.QUEUED}),
    Status.KILLED: frozenset({Status.QUEUED}),
}


class IllegalTransition(RuntimeError):
    """A bug: some code asked for a status move the table does not allow."""


@dataclass
class Attempt:
    n: int
    machine: str
    outcome: str | None = None
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None
    resume: bool = False
    workers: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "machine": self.machine, "outcome": self.outcome, "exit_code": self.exit_code,
                "started": self.started, "ended": self.ended, "resume": self.resume, "workers": self.workers}


@dataclass
class Ending:
    """How a job in `killing` ends once its processes are gone."""

    status: Status
    reason: str | None
    exit_code: int | None = None
    recover: str | None = None  # "resume" | "rerun" | "recreate-resume" | "recreate-rerun" | None

    def to_json(self) -> dict[str, Any]:
        return {"status": str(self.status), "reason": self.reason, "exit_code": self.exit_code,
                "recover": self.recover}


@dataclass
class Job:
    id: int
    user: str
    cmd: str
    archive: str
    created: float
    name: str = ""
    req: list[str] = field(default_factory=list)
    pin: str | None = None
    machine: str | None = None
    status: Status = Status.QUEUED
    reason: str | None = None
    exit_code: int | None = None
    attempt: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    rule: str | None = None  # None: the machine's default (docs/reference.md §7)
    env: dict[str, str] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # "--config.x=v" words appended to cmd
    log_stage: bool = False
    max_recoveries: int = 20
    recoveries: int = 0
    timeout: float | None = None  # seconds of wall time per attempt
    stall: float | None = None  # seconds without log growth
    resume: bool = False  # the next/current attempt resumes from checkpoints
    alloc: dict[str, list[int]] = field(default_factory=dict)
    log_size: int = 0  # bytes of all workers' logs of the current attempt seen so far
    log_grew: float | None = None  # when log_size last grew
    last_line: str = ""
    ending: Ending | None = None
    dir: str = ""

    # ---- status moves -------------------------------------------------------------------------
    def move(self, to: Status, reason: str | None = None) -> None:
        if to not in TRANSITIONS[self.status]:
            raise IllegalTransition(f"job {self.id}: {self.status} → {to} is not allowed")
        self.status = to
        self.reason = reason

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def current(self) -> Attempt | None:
        """The attempt now launching/running, or the last one that ran."""
        return self.attempts[-1] if self.attempts and self.attempts[-1].n == self.attempt else None

    def full_command(self) -> str:
        """The command as a shell runs it: cmd plus the config overrides (already shell-quoted)."""
        words = list(self.overrides)
        if self.log_stage:
            words.append(f"--config.stage={self.attempt}")
        return " ".join([self.cmd, *words]) if words else self.cmd

    # ---- JSON ---------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        # By hand, not dataclasses.asdict: that deep-copies every value and is 20x slower on 10k jobs.
        out = {name: getattr(self, name) for name in _FIELDS}
        out["status"] = self.status.value
        out["req"], out["tags"], out["overrides"] = list(self.req), list(self.tags), list(self.overrides)
        out["env"] = dict(self.env)
        out["alloc"] = {k: list(v) for k, v in self.alloc.items()}
        out["attempts"] = [a.to_json() for a in self.attempts]
        out["ending"] = self.ending.to_json() if self.ending else None
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        """Build a job from a record; raises ValueError/TypeError/KeyError on a malformed one."""
        unknown = sorted(set(data) - _FIELD_SET)
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r} (valid: {', '.join(sorted(_FIELD_SET))})")
        values = dict(data)
        for name in _REQUIRED:
            if name not in values:
                raise ValueError(f"field {name!r} is missing")
        status = values.get("status", "queued")
        if status not in STATUSES:
            raise ValueError(f"field 'status' must be one of {', '.join(Status)} (got {status!r})")
        values["status"] = Status(status)
        attempts = values.get("attempts", [])
        if not isinstance(attempts, list):
            raise ValueError("field 'attempts' must be a list")
        values["attempts"] = [_attempt(a, f"attempts[{i}]") for i, a in enumerate(attempts)]
        if values.get("ending") is not None:
            values["ending"] = _ending(values["ending"])
        job = cls(**values)
        _check_types(job)
        return job

    def queued_by_hand(self) -> None:
        """After `resume` or `rerun`: a person asked for this attempt, so the automatic recoveries
        count afresh (max_recoveries is a budget per run a person starts, not per job)."""
        self.recoveries = 0


def _attempt(data: Any, where: str) -> Attempt:
    """One stored attempt, checked field by field (`where`: its path in the record, for the error)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be an object")
    unknown = sorted(set(data) - set(_ATTEMPT_TYPES))
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (valid: {', '.join(_ATTEMPT_TYPES)})")
    for name in ("n", "machine"):
        if name not in data:
            raise ValueError(f"{where}.{name} is missing")
    for name, value in data.items():
        _check_value(f"{where}.{name}", value, _ATTEMPT_TYPES[name])
    attempt = Attempt(**data)
    if attempt.n < 0:
        raise ValueError(f"{where}.n must be 0 or more")
    if not 1 <= attempt.workers <= MAX_WORKERS:
        raise ValueError(f"{where}.workers must be 1 to {MAX_WORKERS}")
    if attempt.outcome is not None and attempt.outcome != FINISHED and not is_valid_reason(attempt.outcome):
        raise ValueError(f"{where}.outcome must be null, 'finished' or a reason word like 'preempted' or "
                         f"'exit 1' (got {attempt.outcome!r})")
    return attempt


_ENDING_FIELDS = ("status", "reason", "exit_code", "recover")
RECOVERIES = (None, "resume", "rerun", "recreate-resume", "recreate-rerun")


def _ending(data: Any) -> Ending:
    if not isinstance(data, dict):
        raise ValueError("ending must be an object or null")
    unknown = sorted(set(data) - set(_ENDING_FIELDS))
    if unknown:
        raise ValueError(f"ending: unknown field {unknown[0]!r} (valid: {', '.join(_ENDING_FIELDS)})")
    status = data.get("status")
    if status not in {s.value for s in ENDED}:
        raise ValueError(f"ending.status must be one of {', '.join(sorted(ENDED))} (got {status!r})")
    reason, exit_code, recover = data.get("reason"), data.get("exit_code"), data.get("recover")
    if not (reason is None or isinstance(reason, str) and is_valid_reason(reason)):
        raise ValueError(f"ending.reason is not a known reason: {reason!r}")
    _check_value("ending.exit_code", exit_code, (int, type(None)))
    if recover not in RECOVERIES:
        raise ValueError(f"ending.recover must be one of {', '.join(map(str, RECOVERIES[1:]))} or null (got {recover!r})")
    return Ending(status=Status(status), reason=reason, exit_code=exit_code, recover=recover)


_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_FIELD_SET = frozenset(_FIELDS)
# schema.py spells these out for listings that do not import this module; they must agree.
assert _FIELD_SET == FIELDS and {s.value for s in Status} == STATUSES, "schema.py is out of date"


def _json_defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default.value if isinstance(f.default, Status) else f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


# state.json stores a record without the optional fields that hold their default value (a 10k-job
# file stays small and quick to parse). The fields every listing promises are always written, so
# `status --json` prints records as they are stored; loading fills the rest from the defaults.
JOB_DEFAULTS = _json_defaults(Job)
ATTEMPT_DEFAULTS = _json_defaults(Attempt)
_ABSENT = object()


def compact(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k in LISTED or JOB_DEFAULTS.get(k, _ABSENT) != v}
    out["attempts"] = [{k: v for k, v in a.items() if k in ATTEMPT_LISTED or ATTEMPT_DEFAULTS.get(k, _ABSENT) != v}
                       for a in record.get("attempts", [])]
    return out


_REQUIRED = ("id", "user", "cmd", "archive", "created")
# Counts used in loops and paths: a hand edit must not make a pass spin (a machine offers at most this
# many of a resource; an attempt runs on at most this many workers).
MAX_COUNT = 1024
MAX_WORKERS = 1024
# An archive is named by its content (<sha256>.tar.gz) and used in paths on remote machines: a bare
# file name, nothing that could climb out of the archives folder or mean something to a shell.
ARCHIVE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,200}\.tar\.gz$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESOURCE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")

_TYPES: dict[str, tuple[type, ...]] = {
    "id": (int,), "user": (str,), "cmd": (str,), "archive": (str,), "created": (int, float),
    "name": (str,), "req": (list,), "pin": (str, type(None)), "machine": (str, type(None)),
    "reason": (str, type(None)), "exit_code": (int, type(None)), "attempt": (int,),
    "tags": (list,), "rule": (str, type(None)), "env": (dict,), "overrides": (list,),
    "log_stage": (bool,), "max_recoveries": (int,), "recoveries": (int,),
    "timeout": (int, float, type(None)), "stall": (int, float, type(None)), "resume": (bool,),
    "alloc": (dict,), "log_size": (int,), "log_grew": (int, float, type(None)), "last_line": (str,),
    "dir": (str,),
}
_ATTEMPT_TYPES: dict[str, tuple[type, ...]] = {
    "n": (int,), "machine": (str,), "outcome": (str, type(None)), "exit_code": (int, type(None)),
    "started": (int, float, type(None)), "ended": (int, float, type(None)), "resume": (bool,), "workers": (int,),
}


_WHAT = {(int,): "an integer", (str,): "a string", (list,): "a list", (dict,): "an object", (bool,): "true or false",
         (int, float): "a number", (str, type(None)): "a string or null", (int, type(None)): "an integer or null",
         (int, float, type(None)): "a number or null", (list, type(None)): "a list or null",
         (dict, type(None)): "an object or null"}


def _check_value(where: str, value: Any, types: tuple[type, ...]) -> None:
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise TypeError(f"{where} must be {_WHAT.get(types, 'of another type')} (got {_json_type(value)})")


def _json_type(value: Any) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _check_types(job: Job) -> None:
    for name, types in _TYPES.items():
        value = getattr(job, name)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise TypeError(f"field {name!r} has the wrong type ({type(value).__name__})")
    if job.id < 1:
        raise ValueError("field 'id' must be a positive integer")
    for name in ("attempt", "max_recoveries", "recoveries", "log_size"):
        if getattr(job, name) < 0:
            raise ValueError(f"field {name!r} must be 0 or more")
    for name in ("timeout", "stall"):
        if getattr(job, name) is not None and not getattr(job, name) > 0:
            raise ValueError(f"field {name!r} must be a number of seconds above 0, or null")
    if not job.cmd.strip():
        raise ValueError("field 'cmd' is empty")
    if not ARCHIVE_NAME.match(job.archive):
        raise ValueError(f"field 'archive' must be an archive's bare file name, like <sha256>.tar.gz (got {job.archive[:80]!r})")
    if not all(isinstance(x, str) for x in [*job.req, *job.tags, *job.overrides]):
        raise TypeError("fields 'req', 'tags' and 'overrides' hold strings only")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in job.env.items()):
        raise TypeError("field 'env' maps strings to strings")
    for name in job.env:
        if not ENV_NAME.match(name) or name.startswith("JOBTPU_"):
            raise ValueError(f"field 'env': {name[:80]!r} is not a variable name a job may set "
                             "(letters, digits and '_', not starting with a digit nor JOBTPU_)")
    if not is_valid_reason(job.reason):
        raise ValueError(f"field 'reason' is not a known reason: {job.reason!r}")
    if not all(isinstance(k, str) and isinstance(v, list) and all(type(i) is int for i in v)
               for k, v in job.alloc.items()):
        raise TypeError("field 'alloc' maps resource names to lists of indices")
    for resource, indices in job.alloc.items():
        if not RESOURCE_NAME.match(resource):
            raise ValueError(f"field 'alloc': {resource[:40]!r} is not a resource name (lowercase, digits, '_')")
        if len(indices) > MAX_COUNT or not all(0 <= i < MAX_COUNT for i in indices):
            raise ValueError(f"field 'alloc': alloc.{resource} must list at most {MAX_COUNT} indices, each 0 to {MAX_COUNT - 1}")
    if job.rule is not None and job.rule not in RULES:
        raise ValueError(f"field 'rule' must be one of {', '.join(RULES)} or null (got {job.rule!r})")
    problem = _request_problem(tuple(job.req))  # found only at dispatch, it would stop every pass
    if problem:
        raise ValueError(f"field 'req': {problem}")
    if job.active and not job.machine:
        raise ValueError(f"a {job.status} job needs a 'machine'")


@functools.lru_cache(maxsize=256)
def _request_problem(tokens: tuple[str, ...]) -> str | None:
    """Why these --req tokens cannot be parsed, or None. (Cached: thousands of jobs of a sweep
    share a handful of requests.)"""
    from .errors import JobtpuError
    from .requests import parse_request  # here: only a job that names requests needs it

    try:
        parse_request(list(tokens))
    except JobtpuError as e:
        return e.message
    return None


# ---- what state.json remembers of each machine -----------------------------------------------------

_OPTIONAL_TEXT = (str, type(None))
_OPTIONAL_NUMBER = (int, float, type(None))
# Fields a pass reads back. Others are kept as they are (a newer jobtpu may remember more).
_MACHINE_FIELDS: dict[str, tuple[type, ...]] = {
    "state": _OPTIONAL_TEXT, "detail": _OPTIONAL_TEXT, "since": _OPTIONAL_NUMBER, "tpu_state": _OPTIONAL_TEXT,
    "health": _OPTIONAL_TEXT, "health_description": _OPTIONAL_TEXT, "failures": (int,),
    "next_try": _OPTIONAL_NUMBER, "last_error": _OPTIONAL_TEXT, "want_recreate": (bool,),
    "incarnation": _OPTIONAL_TEXT, "host_keys_for": _OPTIONAL_TEXT, "recreations": (int,),
    "workers": (int, type(None)), "addresses": (list, type(None)), "host_keys": (list, type(None)),
    "operation": (dict, type(None)), "setup": (dict, type(None)),
}
_OPERATION_KINDS = ("create", "delete")


def check_machine_record(record: dict[str, Any]) -> None:
    """Raise ValueError/TypeError naming the field of a machine's record that a pass could not use."""
    for name, types in _MACHINE_FIELDS.items():
        if name in record:
            _check_value(name, record[name], types)
    for name in ("failures", "recreations", "workers"):
        if (record.get(name) or 0) < 0:
            raise ValueError(f"{name} must be 0 or more")
    addresses = record.get("addresses") or []
    if len(addresses) > MAX_WORKERS or not all(isinstance(a, str) for a in addresses):
        raise ValueError(f"addresses must be a list of at most {MAX_WORKERS} addresses (strings)")
    keys = record.get("host_keys") or []
    if not all(isinstance(k, list) and all(isinstance(x, str) for x in k) for k in keys):
        raise ValueError("host_keys must be a list, per worker, of lists of key strings")
    operation = record.get("operation")
    if operation is not None:
        if operation.get("kind") not in _OPERATION_KINDS:
            raise ValueError(f"operation.kind must be one of {', '.join(_OPERATION_KINDS)} (got {operation.get('kind')!r})")
        _check_value("operation.name", operation.get("name"), (str,))
        _check_value("operation.since", operation.get("since"), _OPTIONAL_NUMBER)
    setup = record.get("setup")
    if setup is not None:
        _check_value("setup.status", setup.get("status"), (str,))
        _check_value("setup.tries", setup.get("tries", 0), (int,))
        _check_value("setup.incarnation", setup.get("incarnation"), _OPTIONAL_TEXT)
        _check_value("setup.error", setup.get("error"), _OPTIONAL_TEXT)

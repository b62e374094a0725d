"""Jobs and attempts as data, their status and reason words, and the one table of legal status moves.

Only `Job.move` changes a job's status; every other module asks it to, and an illegal move raises."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .schema import ATTEMPT_LISTED, FIELDS, LISTED, STATUSES


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
        status = values.get("status", "queued")
        if status not in STATUSES:
            raise ValueError(f"field 'status' must be one of {', '.join(Status)} (got {status!r})")
        values["status"] = Status(status)
        values["attempts"] = [Attempt(**a) for a in values.get("attempts", [])]
        ending = values.get("ending")
        if ending is not None:
            values["ending"] = Ending(status=Status(ending["status"]), reason=ending.get("reason"),
                                      exit_code=ending.get("exit_code"), recover=ending.get("recover"))
        job = cls(**values)
        _check_types(job)
        return job


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


def _check_types(job: Job) -> None:
    for name, types in _TYPES.items():
        value = getattr(job, name)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise TypeError(f"field {name!r} has the wrong type ({type(value).__name__})")
    if job.id < 1:
        raise ValueError("field 'id' must be a positive integer")
    if not job.cmd.strip():
        raise ValueError("field 'cmd' is empty")
    if not all(isinstance(x, str) for x in [*job.req, *job.tags, *job.overrides]):
        raise TypeError("fields 'req', 'tags' and 'overrides' hold strings only")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in job.env.items()):
        raise TypeError("field 'env' maps strings to strings")
    if not is_valid_reason(job.reason):
        raise ValueError(f"field 'reason' is not a known reason: {job.reason!r}")
    # Attempts and allocations are used in arithmetic later; a bad hand edit must stop here, not there.
    for attempt in job.attempts:
        for name, types in _ATTEMPT_TYPES.items():
            value = getattr(attempt, name)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise TypeError(f"attempts: field {name!r} has the wrong type ({type(value).__name__})")
    if not all(isinstance(k, str) and isinstance(v, list) and all(type(i) is int for i in v)
               for k, v in job.alloc.items()):
        raise TypeError("field 'alloc' maps resource names to lists of indices")
    from .rules import RULES  # here: rules imports this module

    if job.rule is not None and job.rule not in RULES:
        raise ValueError(f"field 'rule' must be one of {', '.join(RULES)} or null (got {job.rule!r})")
    from .errors import JobtpuError
    from .requests import parse_request  # here: requests → fleet → store imports this module

    try:  # a bad token found only at dispatch would stop every pass, for every job
        parse_request(job.req)
    except JobtpuError as e:
        raise ValueError(f"field 'req': {e.message}") from None
    if job.active and not job.machine:
        raise ValueError(f"a {job.status} job needs a 'machine'")

"""Jobs, attempts and machine records as typed data (msgspec Structs: what state.json holds, decoded
strictly), their status and reason words, and the one table of legal status moves.

Only `Job.move` changes a job's status; every other module asks it to, and an illegal move raises."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Literal

import msgspec

from jobtpu.errors import NotFoundError


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

# Reason words (docs/reference/state-json.md §4.3). `exit N` is built by exit_reason().
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
DEPENDENCY = "dependency"  # a job it waited for under --after ended without finishing
HOME_FILE = "home_file"  # one of its files in the home is a link, a special file or a folder not ours
FINISHED = "finished"  # an attempt's outcome when every worker exited 0

REASONS = frozenset({PREEMPTED, GRPC, OOM, LOST, HANG, TIMEOUT, LAUNCH_FAILED, KILLED, RECOVERING, UNREACHABLE,
                     DEPENDENCY, HOME_FILE})


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


# Every number jobtpu reads back as a time or a length of time: an integer stays one (a hand edit
# reads back as written), a fraction stays a float.
Number = int | float

# The rule names a job may carry (rules.py says what each does).
RULES = ("pre", "pass", "reapply", "rerun", "resume")
RECOVERIES = (None, "resume", "rerun", "recreate-resume", "recreate-rerun")

# Structs of state.json: unknown fields are refused (a typo in a hand edit is not silently dropped);
# gc=False because they hold no reference cycles, which makes decoding 100k jobs much cheaper.


def _always(make: Callable[[], Any]) -> Any:
    """A field state.json always writes, even at its default: what every listing promises. (With
    omit_defaults, msgspec leaves out fields whose value is a plain default or an empty builtin
    collection; a field made by any other factory is always written.)"""
    return msgspec.field(default_factory=make)


def _none() -> None:
    return None


def _empty() -> list[Any]:
    return []


def _queued() -> Status:
    return Status.QUEUED


class Attempt(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    n: int
    machine: str
    outcome: str | None = _always(_none)
    exit_code: int | None = _always(_none)
    started: Number | None = _always(_none)
    ended: Number | None = _always(_none)
    resume: bool = False
    workers: int = 1
    # goodput (jobtpu report): the last progress the attempt reported (goodput.Progress.to_json), and
    # the last pass that saw a worker of it alive
    progress: dict[str, Number] | None = None
    last_alive: Number | None = None


class Ending(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """How a job in `killing` ends once its processes are gone. (`retry` is written only when true,
    so an ending reads as it always did.)"""

    status: Status
    reason: str | None = _always(_none)
    exit_code: int | None = _always(_none)
    recover: str | None = _always(_none)  # "resume" | "rerun" | "recreate-resume" | "recreate-rerun" | None
    retry: bool = False  # the recovery is one of --retries, counted apart from the rule's recoveries


class ForcedAct(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An act on a job by someone other than its user, made with --force: kept in the job's record."""

    by: str  # the --user / JOBTPU_USER label
    act: str  # kill | resume | rerun | clean | tag | note
    at: Number
    uid: int | None = None  # the real account that acted (docs/design.md §7)
    account: str | None = None


class Job(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """A job as state.json stores it: the fields a listing promises always, the others only when they
    differ from their default (ten thousand jobs stay small and quick to read)."""

    id: int
    user: str
    cmd: str
    archive: str
    created: Number
    name: str = _always(str)
    req: list[str] = _always(_empty)
    pin: str | None = None
    machine: str | None = _always(_none)
    status: Status = _always(_queued)
    reason: str | None = _always(_none)
    exit_code: int | None = _always(_none)
    attempt: int = _always(int)
    attempts: list[Attempt] = _always(_empty)
    tags: list[str] = _always(_empty)
    rule: str | None = _always(_none)  # None: the machine's default (docs/reference/requests-and-rules.md §7)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    overrides: list[str] = msgspec.field(default_factory=list)  # "--config.x=v" words appended to cmd
    log_stage: bool = False
    on_resume: str | None = None  # submit --on-resume: words added on resumed attempts, placeholders unfilled
    max_recoveries: int = 20
    recoveries: int = 0
    timeout: Number | None = None  # seconds of wall time per attempt
    stall: Number | None = None  # seconds without log growth
    resume: bool = False  # the next/current attempt resumes from checkpoints
    alloc: dict[str, list[int]] = msgspec.field(default_factory=dict)
    log_size: int = 0  # bytes of all workers' logs of the current attempt seen so far
    log_grew: Number | None = None  # when log_size last grew
    last_line: str = _always(str)
    ending: Ending | None = None
    dir: str = ""
    waiting: str | None = None  # why a queued job did not start in the last pass (its pending reason)
    progress: str | None = None  # submit --progress: a regex whose group is the step (goodput.compile_progress)
    # Teams: the order of a user's own queued jobs (higher first), and acts others forced on the job.
    priority: int = 0
    forced: list[ForcedAct] = msgspec.field(default_factory=list)
    sheet_note: str | None = None  # the note it brings to its machine's row in the team sheet (submit --sheet-note)
    note: str = ""  # a person's line about the job (`jobtpu note`)
    # Sweeps, dependencies, retries, hold, grace and signal (docs/reference/commands.md §2.2.3).
    sweep: int | None = None  # the sweep it belongs to: the id of the sweep's first job
    sweep_index: int | None = None  # its combination's index in the sweep, 0 …
    after: list[int] = msgspec.field(default_factory=list)  # jobs that must finish first (--after)
    after_any: list[int] = msgspec.field(default_factory=list)  # jobs that must end first (--after-any)
    retries: int = 0  # --retries: attempts a non-zero exit may be retried
    retried: int = 0  # retries made so far (apart from `recoveries`)
    held: bool = False  # `jobtpu hold`: stays queued until `jobtpu release`
    grace: Number | None = None  # seconds between TERM and KILL when stopped (None: 5)
    signal: str | None = None  # --signal: the signal's name (USR1) sent before --timeout ends
    signal_before: Number | None = None  # … this many seconds before
    uid: int | None = None  # the real account that submitted it (its spec says so where it counts: design §7)

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

    def full_command(self, resume_words: str = "") -> str:
        """The command as a shell runs it: cmd plus the config overrides (already shell-quoted), and
        on a resumed attempt its --on-resume words (`resume_words`, placeholders filled)."""
        words = list(self.overrides)
        if self.log_stage:
            words.append(f"--config.stage={self.attempt}")
        if self.resume and resume_words:
            words.append(resume_words)
        return " ".join([self.cmd, *words]) if words else self.cmd

    def queued_by_hand(self) -> None:
        """After `resume` or `rerun`: a person asked for this attempt, so the automatic recoveries
        count afresh (max_recoveries is a budget per run a person starts, not per job), and so do
        the retries."""
        self.recoveries = 0
        self.retried = 0


# ---- what msgspec's types cannot say -------------------------------------------------------------

# Counts used in loops and paths: a hand edit must not make a pass spin (a machine offers at most this
# many of a resource; an attempt runs on at most this many workers).
MAX_COUNT = 1024
MAX_WORKERS = 1024
# An archive is named by its content (<sha256>.tar.gz) and used in paths on remote machines: a bare
# file name, nothing that could climb out of the archives folder or mean something to a shell.
ARCHIVE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,200}\.tar\.gz$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESOURCE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# What a user name may be (docs/reference/commands.md §2.1).
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_ENDED_WORDS = ", ".join(sorted(s.value for s in ENDED))
# Integers jobtpu stores must fit 64 bits (what other JSON tools read back exactly).
_INT_RANGE = (-2**63, 2**64 - 1)


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
            and _ARCHIVE_OK(job.archive) is not None and job.cmd != "" and not job.cmd.isspace()
            and job.reason is None and job.exit_code is None and (job.rule is None or job.rule in RULES)
            and not job.env and not job.alloc and not job.attempts and job.ending is None
            and (not job.req or _request_problem(tuple(job.req)) is None)
            and (bool(job.machine) or job.status not in ACTIVE) and -_I64 <= job.priority < _I64
            and 0 <= job.retries < _I64 and 0 <= job.retried < _I64 and job.grace is None and job.signal is None
            and (not job.after or min(job.after) > 0) and (not job.after_any or min(job.after_any) > 0)
            and (job.sweep is None or _plain_sweep(job.sweep, job.sweep_index)))


def _plain_sweep(sweep: int, index: int | None) -> bool:
    return 0 < sweep < _I64 and index is not None and 0 <= index < _I64


def _job_problem(job: Job) -> str | None:
    if job.id < 1:
        return "field 'id' must be a positive integer"
    for name in ("attempt", "max_recoveries", "recoveries", "log_size"):
        if getattr(job, name) < 0:
            return f"field {name!r} must be 0 or more"
    for name in ("timeout", "stall"):
        value = getattr(job, name)
        if value is not None and not value > 0:
            return f"field {name!r} must be a number of seconds above 0, or null"
    if not job.cmd.strip():
        return "field 'cmd' is empty"
    if not ARCHIVE_NAME.match(job.archive):
        return f"field 'archive' must be an archive's bare file name, like <sha256>.tar.gz (got {job.archive[:80]!r})"
    return (_env_problem(job.env) or _reason_problem(job.reason) or _alloc_problem(job.alloc)
            or _rule_problem(job.rule) or _attempts_problem(job.attempts) or _ending_problem(job.ending)
            or _request_problem(tuple(job.req)) or _bounds_problem(job) or _sweep_problem(job)
            or (f"a {job.status} job needs a 'machine'" if job.active and not job.machine else None))


SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM")  # what --signal may send


def _sweep_problem(job: Job) -> str | None:
    """The fields of sweeps, dependencies, retries, grace and signal."""
    for name in ("retries", "retried"):
        if getattr(job, name) < 0:
            return f"field {name!r} must be 0 or more"
    if job.sweep is not None and job.sweep < 1 or job.sweep_index is not None and job.sweep_index < 0:
        return "fields 'sweep' and 'sweep_index' must be a job id and 0 or more"
    if any(i < 1 for i in job.after + job.after_any):
        return "fields 'after' and 'after_any' must list job ids"
    if job.grace is not None and not 0 < job.grace <= 3600:
        return "field 'grace' must be a number of seconds above 0, at most 3600"
    if job.signal is not None and (job.signal not in SIGNALS or job.signal_before is None or not job.signal_before > 0):
        return f"fields 'signal' and 'signal_before' must be one of {', '.join(SIGNALS)} and seconds above 0"
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
    low, high = _INT_RANGE
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
    from jobtpu.decide.fit import parse_request  # here: only a job that names requests needs it
    from jobtpu.errors import JobtpuError

    try:
        parse_request(list(tokens))
    except JobtpuError as e:
        return f"field 'req': {e.message}"
    return None


# ---- what state.json remembers of each machine -----------------------------------------------------
# Written by passes and `jobtpu tpu`; fields a record does not hold are left out of the file. Fields
# a newer jobtpu may add are ignored rather than refused (the record is jobtpu's memory, not yours).

class Operation(msgspec.Struct, gc=False):
    """A TPU API operation in flight, followed by later passes."""

    kind: Literal["create", "delete"]
    name: str
    since: Number | None = None


class Setup(msgspec.Struct, omit_defaults=True, gc=False):
    """The machine's setup commands on its current incarnation."""

    status: str  # running | done | failed
    tries: int = 0
    incarnation: str | None = None
    error: str | None = None


class Transient(msgspec.Struct, gc=False):
    """A transient node state first seen at `since` (how long a node looks stuck)."""

    state: str
    since: Number | None = None


class Refused(msgspec.Struct, gc=False):
    """A create the API refused as wrong, not asked again while machines.json asks the same (spec_key)."""

    message: str | None = None
    spec_key: str = ""


class MachineRecord(msgspec.Struct, omit_defaults=True, gc=False):
    state: str | None = None  # what `machines` shows: up, unreachable, recreating, ...
    detail: str | None = None
    since: Number | None = None  # when an ssh machine became unreachable
    api_error: str | None = None  # the TPU API could not be asked (credentials)
    # TPU node, as the last listing saw it
    tpu_state: str | None = None
    health: str | None = None
    health_description: str | None = None
    zone: str | None = None  # the zone the machine is in now (capacity errors move it)
    incarnation: str | None = None  # the node's create time: a new one is a new machine
    workers: int | None = None
    addresses: list[str] | None = None
    host_keys: list[list[str]] | None = None  # per worker, published through the TPU API
    host_keys_for: str | None = None  # the incarnation they belong to
    spec: dict[str, Any] | None = None  # the node's create fields, to recreate it as it was
    spec_zone: str | None = None
    setup: Setup | None = None
    transient: Transient | None = None
    # recreation
    want_recreate: bool = False
    operation: Operation | None = None
    create_sent: Number | None = None
    queue_asked: Number | None = None
    queued_state: str | None = None
    recreations: int = 0
    failures: int = 0
    next_try: Number | None = None
    last_error: str | None = None
    refused: Refused | None = None
    zone_capacity_failures: int = 0
    moved: str | None = None
    note: str | None = None  # a person's line about the machine (`jobtpu note --machine`)
    # TPU steps (delete, create, setup...) a pass saved before carrying them out; cleared once carried
    # out. Left behind only by a pass that died in between: the next one plans again from the listing.
    steps: list[str] | None = None


def machine_problem(record: MachineRecord) -> str | None:
    """Why a decoded machine record cannot be used by a pass, or None."""
    for name in ("failures", "recreations", "workers", "zone_capacity_failures"):
        if (getattr(record, name) or 0) < 0:
            return f"{name} must be 0 or more"
    if len(record.addresses or ()) > MAX_WORKERS:
        return f"addresses must be a list of at most {MAX_WORKERS} addresses"
    return None


# ---- the document --------------------------------------------------------------------------------

VERSION = 1


class LastPass(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """When the last manage pass ended, how long it took, and how often its loop runs passes
    (None: a single pass, from cron or by hand): `status` says how fresh what it shows is."""

    ended: Number
    took: Number
    every: Number | None = None


class State(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """Everything state.json holds."""

    version: int = VERSION
    next_id: int = 1
    jobs: list[Job] = msgspec.field(default_factory=list)
    machines: dict[str, MachineRecord] = msgspec.field(default_factory=dict)  # known of each machine
    last_pass: LastPass | None = None
    # Events a pass (or kill) decided with the result it saved and tells right after that save: each an
    # event's JSON with its "id"; a later save drops those found told (docs/design.md §3).
    untold: list[dict[str, Any]] = msgspec.field(default_factory=list)

    def job(self, job_id: int) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def require_job(self, job_id: int) -> Job:
        job = self.job(job_id)
        if job is None:
            raise unknown_job(job_id)
        return job

    def machine(self, name: str) -> MachineRecord:
        """The record of a machine, made empty the first time it is asked for."""
        record = self.machines.get(name)
        if record is None:
            record = self.machines[name] = MachineRecord()
        return record


def unknown_job(job_id: int) -> NotFoundError:
    """The one error every command gives for an id it does not know."""
    return NotFoundError(f"no job {job_id} in state.json",
                         hint="`jobtpu status --all-users --all` lists every job; `jobtpu status --history "
                              "--all-users` those `clean` moved to history.jsonl")

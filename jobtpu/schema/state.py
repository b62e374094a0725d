"""Jobs and attempts as typed data (msgspec Structs: what state.json holds, decoded strictly), their
status and reason words, the one definition of which statuses are active and which ended, and the
one table of legal status moves. (Each machine's record is schema/records.py's; what the types
cannot say is checked by schema/job_checks.py.) Only `Job.move` changes a job's status; every
other module asks it to, and an illegal move raises."""

import functools
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from jobtpu.errors import NotFoundError
from jobtpu.schema.events import Event
from jobtpu.schema.last_pass import LastPass, recorded  # noqa: F401  # recorded: read here by older imports
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import Attempts, MachineRecord, Number, Priority, Seconds, Time, Tries
from jobtpu.schema.saving import Saved, Saving


class Status(StrEnum):
    QUEUED = "queued"
    LAUNCHING = "launching"
    RUNNING = "running"
    KILLING = "killing"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"


# The one definition of both (every module asks these, or Job.active / Job.ended): a job holds
# machine resources while it is active; an ended job is done with, whatever its outcome.
ACTIVE = frozenset({Status.LAUNCHING, Status.RUNNING, Status.KILLING})
ENDED = frozenset({Status.FINISHED, Status.FAILED, Status.KILLED})
STATUS_WORDS = tuple(s.value for s in Status)  # every status, in the order a job moves through them

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


RULES = ("pre", "pass", "reapply", "rerun", "resume")  # the rule names a job may carry (rules.py says what each does)


class Recovery(StrEnum):
    """What a rule (or --retries) does with an attempt that ended badly: an Ending's `recover`."""

    RESUME = "resume"
    RERUN = "rerun"
    RECREATE_RESUME = "recreate-resume"
    RECREATE_RERUN = "recreate-rerun"


RECOVERIES = (None, *Recovery)

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


# The fields of a job that belong to some statuses only (docs/reference/state-json.md §4.3), as pueue's
# task status carries its own data: a move to another status resets them, in this one place, so a
# record never says why a job waits once it runs, nor holds a slot once it ended. (They stay flat
# fields of the job: state.json keeps its shape, and msgspec has no way to move a record from one
# struct of a tagged union to another in place, which every holder of the job would need.)
STATUS_FIELDS: dict[str, frozenset[Status]] = {
    "waiting": frozenset({Status.QUEUED}),  # why it did not start in the last pass
    "ending": frozenset({Status.KILLING}),  # how it ends once its workers are gone
    "alloc": frozenset({Status.LAUNCHING, Status.RUNNING, Status.KILLING}),  # the resources it holds
    "exit_code": frozenset({Status.FINISHED, Status.FAILED, Status.KILLED}),  # its last attempt's exit
    "gang": frozenset({Status.LAUNCHING, Status.RUNNING, Status.KILLING}),  # its slices' machines, slice order
    "keeps": frozenset({Status.QUEUED}),  # the machines it waits to resume on: no other job takes them
    "evicted_by": frozenset({Status.KILLING, Status.QUEUED}),  # the higher-class job that evicted it, until it starts again
}


class Attempt(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    n: Attempts
    machine: str
    outcome: str | None = _always(_none)
    exit_code: int | None = _always(_none)
    started: Time | None = _always(_none)
    ended: Time | None = _always(_none)
    resume: bool = False
    workers: int = 1
    # goodput (jobtpu report): its last progress (progress.Progress.to_json), the last pass that saw it alive
    progress: dict[str, Number] | None = None
    last_alive: Time | None = None
    saved: Saved | None = None  # its last save, when its job says how one shows (decide/saving.py)
    logs_behind: bool = False  # ended, and its log not yet all home: later passes pull the rest
    gang: list[str] = msgspec.field(default_factory=list)  # its slices' machines (submit --slices N > 1)
    slurm_job: int | str | None = None  # the Slurm job id it became, on a Slurm cluster ("<array id>_<index>": a sweep's array member)
    slurm_after: str | None = None  # sbatch's --dependency it was handed with (decide/slurm_after.py)
    # The box whose local machine runs it, in a home with a runner lease (home-files.md §1.7): a runner
    # on another box cannot see its processes, so it never takes it as lost.
    box: str | None = None


class Cause(StrEnum):
    """Why a job's status moved, named by the decision that moved it: one per edge a job takes. A
    pass's events are made from these, never guessed from the record (docs/design.md §3)."""

    LAUNCH = "launch"  # dispatch starts a queued job's attempt: its first, or one a person queued
    RELAUNCH = "relaunch"  # dispatch starts the attempt a recovery (or --retries) queued
    STARTED = "started"  # every worker reported its launch: launching → running
    UNLAUNCH = "unlaunch"  # a launch that certainly never started: queued again, same attempt
    STOP = "stop"  # its workers are to be stopped: → killing, its ending kept
    END = "end"  # the attempt ended and so does the job: → finished, failed or killed
    RECOVER = "recover"  # the attempt ended and the job is queued for its next one
    REFUSE = "refuse"  # a queued job that can never start fails (its dependency, a cycle, a rewritten spec)
    KILL = "kill"  # a person's kill of a queued job
    REQUEUE = "requeue"  # a person's resume or rerun of an ended job


class Transition(msgspec.Struct, frozen=True, gc=False):
    """One change of a job's status, as Job.move returns it to the decision that made it, with its cause."""

    job: int
    was: Status
    to: Status
    reason: str | None  # the job's reason once moved
    was_reason: str | None  # its reason before (a queued job's `recovering`, or none when queued by hand)
    attempt: int  # the job's attempt number as it moved
    cause: Cause
    spent: str | None = None  # an ending's budget that ran out (Ending.spent), for its event


class Ending(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """How a job in `killing` ends once its processes are gone (`retry`, `spent` written only when set)."""

    status: Status
    reason: str | None = _always(_none)
    exit_code: int | None = _always(_none)
    # A Recovery word, or None. Read as a string so that a hand edit's wrong word is told in
    # job_checks' words (the ones allowed); code reads it through `recovery`.
    recover: str | None = _always(_none)
    retry: bool = False  # the recovery is one of --retries, counted apart from the rule's recoveries
    spent: str | None = None  # the budget that ran out, in one line (decide/rules.py Budget.spent)
    # A gang's slice (its index) whose machine the recovery brings back once the gang has stopped: the
    # one that failed first, when the rule recreates on that failure (reapply on grpc) and it was not
    # preempted (a preempted slice is asked back by the gang's dispatch, decide/gang.py).
    lost: int | None = None

    @property
    def recovery(self) -> Recovery | None:
        """`recover` as its enum (state.json's reader refused any other word)."""
        return None if self.recover is None else Recovery(self.recover)


class ForcedAct(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An act on a job by someone other than its user, made with --force: kept in the job's record."""

    by: str  # the --user / JOBTPU_USER label
    act: str  # kill | resume | rerun | clean | tag | note
    at: Time
    uid: int | None = None  # the real account that acted (docs/design.md §7)
    account: str | None = None


class Job(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """A job as state.json stores it: the fields a listing promises always, the others only when they
    differ from their default (ten thousand jobs stay small and quick to read)."""

    id: int
    user: str
    cmd: str
    archive: str
    created: Time
    name: str = _always(str)
    req: list[str] = _always(_empty)
    pin: str | None = None
    machine: str | None = _always(_none)
    status: Status = _always(_queued)
    reason: str | None = _always(_none)
    exit_code: int | None = _always(_none)
    attempt: Attempts = _always(int)
    attempts: list[Attempt] = _always(_empty)
    tags: list[str] = _always(_empty)
    rule: str | None = _always(_none)  # None: the machine's default (docs/reference/requests-and-rules.md §7)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    overrides: list[str] = msgspec.field(default_factory=list)  # "--config.x=v" words appended to cmd
    log_stage: bool = False
    on_resume: str | None = None  # submit --on-resume: words added on resumed attempts, placeholders unfilled
    saving: Saving | None = None  # --saved-when, --saved-marker, --checkpoints (decide/saving.py)
    max_recoveries: Tries = 20  # the infrastructure budget (a record written before preemptions were
    recoveries: Tries = 0  # counted apart counts them here too); preemptions' below (rules.budget)
    max_preemptions: Tries | None = None  # None: no limit
    preemptions: Tries = 0
    timeout: Seconds | None = None  # seconds of wall time per attempt
    stall: Seconds | None = None  # seconds without log growth
    resume: bool = False  # the next/current attempt resumes from checkpoints
    alloc: dict[str, list[int]] = msgspec.field(default_factory=dict)
    log_size: int = 0  # bytes of all workers' logs of the current attempt seen so far
    log_grew: Time | None = None  # when log_size last grew
    last_line: str = _always(str)
    ending: Ending | None = None
    dir: str = ""
    waiting: str | None = None  # why a queued job did not start in the last pass (its pending reason)
    progress: str | None = None  # submit --progress: a regex whose group is the step (progress.compile_progress)
    # Teams: the order of a user's own queued jobs (higher first), and acts others forced on the job.
    priority: Priority = 0
    forced: list[ForcedAct] = msgspec.field(default_factory=list)
    sheet_note: str | None = None  # the note it brings to its machine's row in the team sheet (submit --sheet-note)
    note: str = ""  # a person's line about the job (`jobtpu note`)
    # Sweeps, dependencies, retries, hold, grace and signal (docs/reference/commands.md §2.2.3).
    sweep: int | None = None  # the sweep it belongs to: the id of the sweep's first job
    sweep_index: int | None = None  # its combination's index in the sweep, 0 …
    sweep_values: dict[str, str] = msgspec.field(default_factory=dict)  # its combination as given: JOBTPU_SWEEP_<KEY>
    max_running: Tries | None = None  # --max-running: at most this many jobs of its sweep active at once
    after: list[int] = msgspec.field(default_factory=list)  # jobs that must finish first (--after)
    after_any: list[int] = msgspec.field(default_factory=list)  # jobs that must end first (--after-any)
    retries: Tries = 0  # --retries: attempts a non-zero exit may be retried
    retried: Tries = 0  # retries made so far (apart from `recoveries`)
    retry_on_exit: str | None = None  # --retry-on-exit: the codes retried (schema/exit_codes.py); None: any
    held: bool = False  # `jobtpu hold`: stays queued until `jobtpu release`
    grace: Seconds | None = None  # seconds between TERM and KILL when stopped (None: 5)
    signal: str | None = None  # --signal: the signal's name (USR1) sent before --timeout ends
    signal_before: Seconds | None = None  # … this many seconds before
    uid: int | None = None  # the real account that submitted it (its spec says so where it counts: design §7)
    # Multislice (submit --slices): a gang of machines, `machine` its slice 0 (docs/reference/state-json.md §4.3).
    slices: Tries = 1
    gang: list[str] = msgspec.field(default_factory=list)  # slices 0 … N-1's machines while active
    keeps: list[str] = msgspec.field(default_factory=list)  # queued to resume: machines no other job takes
    # Priority classes (machines.json's priority_classes, decide/evict.py): its class (None: the default),
    # and while stopped for a higher-class job and queued to resume, that job's id.
    priority_class: str | None = None
    evicted_by: int | None = None

    # ---- status moves -------------------------------------------------------------------------
    def move(self, to: Status, reason: str | None = None, *, cause: Cause) -> Transition:
        """The one way a job's status changes; returns the change as a value, with the cause its
        decision names, for whoever decided it to hand on (a pass's events are made from these,
        docs/design.md §3)."""
        if to not in TRANSITIONS[self.status]:
            raise IllegalTransition(f"job {self.id}: {self.status} → {to} is not allowed")
        moved = Transition(self.id, self.status, to, reason, self.reason, self.attempt, cause)
        self.status = to
        self.reason = reason
        for name, statuses in STATUS_FIELDS.items():
            if to not in statuses:
                setattr(self, name, _field_default(name))
        return moved

    def stop(self, ending: Ending) -> Transition:
        """Move to killing, saying why (its ending's reason: timeout, hang, exit N), and keep the ending
        it gets once its workers are gone (docs/reference/state-json.md §4.3)."""
        moved = self.move(Status.KILLING, ending.reason, cause=Cause.STOP)
        self.ending = ending
        return moved

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def holds(self) -> list[str]:
        """The machines its workers are on (while active): its gang's, else its one machine."""
        return list(self.gang) if self.gang else [self.machine] if self.machine else []

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
        self.recoveries = self.preemptions = self.retried = 0

# ---- the document --------------------------------------------------------------------------------

VERSION = 1


class State(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """Everything state.json holds."""

    version: int = VERSION
    next_id: int = 1
    jobs: list[Job] = msgspec.field(default_factory=list)
    machines: dict[str, MachineRecord] = msgspec.field(default_factory=dict)  # known of each machine
    last_pass: LastPass | None = None
    # Events a pass (or kill) saved with its result, each with its "id", told after it (docs/design.md §3).
    untold: list[Event] = msgspec.field(default_factory=list)
    runner_token: int = 0  # the lease token of the runner that last saved (docs/reference/home-files.md §1.7)

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


@functools.cache
def _defaults() -> dict[str, msgspec.structs.FieldInfo]:
    return {f.name: f for f in msgspec.structs.fields(Job)}


def _field_default(name: str) -> Any:
    """A new value of the job's field as a fresh record has it (its default, or a new one from its factory)."""
    info = _defaults()[name]
    return info.default_factory() if info.default is msgspec.NODEFAULT else info.default

"""What a pass observed and what it decided to do, as plain values: the observation decide reads,
the actions of its plan, and the names both sides use for a job's workers and rule."""

from __future__ import annotations

from jobtpu.decide.workers import WorkerRef, WorkerState
from jobtpu.schema.fleet import Machine
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Cause, Job, Status, Transition


class MachineView(msgspec.Struct):
    """What one pass learnt about one machine."""

    reachable: bool | None = None  # None: not asked this pass
    error: str | None = None
    workers: dict[WorkerRef, WorkerState] = msgspec.field(default_factory=dict)
    n_workers: int = 1
    ready: bool = True  # may take new jobs now
    preempted: bool = False  # the TPU API says its node is gone or preempted
    recovering: bool = False  # jobtpu is already recreating it
    setting_up: bool = False  # its setup runs in this pass's act, before any launch there


class Observation(msgspec.Struct):
    now: float
    machines: dict[str, MachineView] = msgspec.field(default_factory=dict)
    log_tails: dict[WorkerRef, str] = msgspec.field(default_factory=dict)  # for workers that exited non-zero
    last_lines: dict[int, str] = msgspec.field(default_factory=dict)
    claims: dict[str, str] = msgspec.field(default_factory=dict)  # machine -> who claimed it by hand (team sheet)
    # machine -> the users a claim names (as themselves or by their sheet_name): their own jobs may go there
    claimants: dict[str, frozenset[str]] = msgspec.field(default_factory=dict)
    # Queued jobs this pass may not run on the local machine: id -> (specs.Verdict kind, why) (design §7).
    local_refusals: dict[int, tuple[str, str]] = msgspec.field(default_factory=dict)
    bad_files: dict[int, str] = msgspec.field(default_factory=dict)  # job -> what is wrong with its files in the home
    drained: dict[str, str] = msgspec.field(default_factory=dict)  # machine -> why it takes no new job (`machines drain`)
    # This runner's box (lease.box_name), and whether a local attempt records it: the home has a runner
    # lease, so another box's runner may take over (docs/reference/home-files.md §1.7).
    box: str = ""
    boxes: bool = False

    def view(self, name: str) -> MachineView:
        """The view of a machine, made (and kept) when the pass has none yet: for the steps that fill it."""
        return self.machines.setdefault(name, MachineView())

    def peek(self, name: str) -> MachineView:
        """The view of a machine, or an empty one, leaving the observation as it is: what decide reads."""
        view = self.machines.get(name)
        return view if view is not None else MachineView()


def elsewhere(job: Job, this_box: str) -> str | None:
    """The other box whose local machine runs the job's current attempt (None: `this_box`'s, or not a
    local machine's): its processes are not this box's to see, probe or stop (home-files.md §1.7)."""
    attempt = job.current
    box = attempt.box if attempt is not None and attempt.ended is None else None
    return box if box and box != this_box else None


def elsewhere_line(box: str, seen: Observation) -> str:
    """What a job on another box's local machine says while this runner holds the home."""
    return (f"on {box}'s local machine, which this runner ({seen.box}) cannot reach: it waits for a runner "
            f"on {box} (`jobtpu runner handover` with one standing by there)")


class Launch(msgspec.Struct, frozen=True):
    job: int
    machine: str
    attempt: int
    workers: int  # every slice's together
    gang: tuple[str, ...] = ()  # a gang's machines in slice order (`machine` is slice 0's); () for one slice


class Kill(msgspec.Struct, frozen=True):
    job: int
    machine: str
    refs: tuple[WorkerRef, ...]
    # An eviction's (decide/evict.py): the job's --signal, sent a grace before the TERM so that the
    # job may checkpoint (docs/reference/requests-and-rules.md §8); None: TERM first, as `kill` stops.
    first: str | None = None


class Recreate(msgspec.Struct, frozen=True):
    machine: str


Action = Launch | Kill | Recreate


class Plan(msgspec.Struct):
    """What decide decided, as values: it changes none of the jobs it was given. `changed` holds the
    new record of each job it changed (its status moves, with their causes, are in `moves`; every
    other field it set, such as why a job waits or its last line, is in the new record); the caller
    applies them with `apply_to`, a dry run does not."""

    actions: list[Action] = msgspec.field(default_factory=list)
    moves: list[Transition] = msgspec.field(default_factory=list)  # every status change decided, in order
    notes: list[str] = msgspec.field(default_factory=list)  # one human line per decision, as a real pass says it
    would: list[str] = msgspec.field(default_factory=list)  # what --dry-run prints: facts seen, and acts as "would ..."
    changed: dict[int, Job] = msgspec.field(default_factory=dict)  # job id -> its new record
    shallow: set[int] = msgspec.field(default_factory=set)  # new records that share the given's attempts

    def do(self, action: Action, why: str = "") -> None:
        self.actions.append(action)
        self.would.append(f"would {describe(action)}" + (f": {why}" if why else ""))

    def move(self, job: Job, to: Status, reason: str | None, cause: Cause) -> None:
        self.moves.append(self.edit(job).move(to, reason, cause=cause))

    def saw(self, line: str) -> None:
        """A fact, said alike by a pass and a dry run (a machine that does not answer)."""
        self.notes.append(line)
        self.would.append(line)

    def wait(self, job: Job, why: str) -> None:
        """Give a job that stays queued its pending reason (a new record only when the reason is new:
        a sweep's thousands mostly keep theirs); one that failed instead keeps none."""
        latest = self.latest(job)
        reason = why if latest.status is Status.QUEUED else None
        if latest.waiting == reason:
            return
        if job.id in self.changed:
            self.changed[job.id].waiting = reason
        else:  # a shallow copy will do (a sweep's thousands each get a new count ahead of them)
            self.changed[job.id] = msgspec.structs.replace(job, waiting=reason)
            self.shallow.add(job.id)

    def latest(self, job: Job) -> Job:
        """The job as decided so far: its new record once changed, else the one given."""
        return self.changed.get(job.id, job)

    def edit(self, job: Job) -> Job:
        """The new record of a job, to change: a copy of the one given (made once), never that one."""
        new = self.changed.get(job.id)
        if new is None:
            new = self.changed[job.id] = fork(job)
        elif job.id in self.shallow:
            self.shallow.discard(job.id)
            new = self.changed[job.id] = fork(new)
        return new

    def drop_unchanged(self, given: dict[int, Job]) -> None:
        """Forget the new records that came out equal to the ones given (a running job looked at
        and left as it was)."""
        self.changed = {i: new for i, new in self.changed.items() if new != given.get(i)}

    def apply_to(self, jobs: list[Job]) -> None:
        """Carry the decided records into `jobs`, each into the record of its id (those holding a
        record see it changed)."""
        held = {job.id: job for job in jobs} if self.changed else {}
        for job_id, new in self.changed.items():
            job = held.get(job_id)
            if job is not None:
                for name in Job.__struct_fields__:
                    setattr(job, name, getattr(new, name))


def fork(job: Job) -> Job:
    """A copy of a job that decide may change: its own attempts and holdings; what decide only ever
    replaces whole (its request, ending, lists a person set) is shared."""
    return msgspec.structs.replace(job, attempts=[msgspec.structs.replace(a) for a in job.attempts],
                                   alloc=dict(job.alloc))


def describe(action: Action) -> str:
    if isinstance(action, Launch):
        where = action.machine if not action.gang else f"{len(action.gang)} slices ({', '.join(action.gang)})"
        return f"launch job {action.job} attempt {action.attempt} on {where} ({action.workers} worker(s))"
    if isinstance(action, Kill):
        return f"stop job {action.job} on {action.machine}"
    return f"recreate {action.machine}"


def refs_of(job: Job) -> tuple[WorkerRef, ...]:
    workers = job.current.workers if job.current else 1
    return tuple(WorkerRef(job.id, job.attempt, w) for w in range(workers))


def rule_of(job: Job, machine: Machine | None) -> str:
    return job.rule or (machine.default_rule() if machine else "pass")


def claim_reason(holder: str) -> str:
    """Why a machine a person claimed in the team sheet takes no job of anyone else's."""
    return f"claimed by {holder} in the sheet"

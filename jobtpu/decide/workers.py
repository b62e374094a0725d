"""The domain types of job workers on a machine: which worker of which attempt, how to start one, and
what a launch or a probe found. Pure data; jobtpu/remote/scripts.py turns them into shell calls and back."""

from __future__ import annotations

from jobtpu import timing
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.worker_protocol import LaunchOutcome


class WorkerRef(msgspec.Struct, frozen=True):
    """One worker of one attempt of one job."""

    job: int
    attempt: int
    worker: int

    @property
    def stem(self) -> str:
        return f"{self.job} {self.attempt} {self.worker}"


class LaunchSpec(msgspec.Struct, frozen=True):
    ref: WorkerRef
    root: str
    archive: str
    command: str  # the job's full command, run by bash -c
    env: dict[str, str]
    tpu_cleanup: bool = False  # clear stale TPU device holders and the libtpu lock file first
    fresh: bool = False  # start from the snapshot: replace a folder an earlier attempt left (rerun)
    home_id: str = ""  # the home's stable id, part of the marker every process of the job carries
    literal: frozenset[str] = frozenset()  # env names whose values are never expanded (secrets)
    early_signal: tuple[str, float] | None = None  # --signal: (name, seconds after the start)
    grace: float = msgspec.field(default_factory=lambda: timing.current().grace)  # TERM to KILL, seconds
    stop_requests: bool = False  # the wrapper obeys a stop request in the root's stop/ (the local machine)
    evict_signal: str = ""  # --signal's name: what an eviction's stop request sends first ("": none)
    time_limit: float | None = None  # --timeout: the wrapper stops the job this long after its start
    token: int = 0  # the launching runner's lease token: a worker refuses one older than it has seen (0: no lease)
    batch: tuple[str, ...] | None = None  # handed to a batch scheduler (Slurm) with these sbatch options
    secret: frozenset[str] = frozenset()  # env names whose values are secrets: never in a Slurm array's table


class LaunchResult(msgspec.Struct, frozen=True):
    ref: WorkerRef
    outcome: LaunchOutcome
    pid: int | None = None
    detail: str = ""
    slurm: int | str | None = None  # the Slurm job id the attempt became (a Slurm cluster; "<array id>_<index>": a member)


class WorkerState(msgspec.Struct, frozen=True):
    ref: WorkerRef
    pid: int | None
    alive: bool
    exit_code: int | None
    log_size: int
    claimed: bool
    log_offset: int = 0
    log_bytes: bytes = b""
    exited_at: float | None = None  # when the exit record was written (the worker's clock)
    log_end: bytes = b""  # an exited worker's last TAIL_BYTES, when the pull is further behind than that
    marked: int = 0  # live processes that carry the worker's marker (its leader, children, escapees)
    saved_at: float | None = None  # its job's --saved-marker, written since it started: when (the worker's clock)
    timed_out: bool = False  # its wrapper stopped it at its --timeout (the worker's clock)
    result_size: int | None = None  # the value its job saved (jobtpu.save_result): its size, None: none saved
    result: bytes | None = None  # and its bytes, when at most the probe's limit
    preempted: bool = False  # its batch scheduler requeued or preempted it (a Slurm cluster)
    waiting: str = ""  # why its batch scheduler holds it pending (Slurm's reason)
    unsubmitted: bool = False  # its batch scheduler forgot the job it took before it ran: submitted again

    @property
    def started(self) -> bool:
        return self.pid is not None or self.exit_code is not None

"""A job's goodput report as a type: what each attempt and each interruption cost (decide/goodput.py
makes it, views/report.py shows it, `report --json` prints it as published.py's ReportDocument).
Here, with the other published types, so the schema that publishes it needs nothing above it."""

from jobtpu.schema.msgspec_lib import msgspec


class AttemptCost(msgspec.Struct):
    n: int
    machine: str
    outcome: str | None
    started: float
    ended: float | None  # None: still running
    wall: float
    accelerator: float | None  # chip-seconds (GPU-seconds when unit is "GPU")
    running: float  # seconds it ran (see decide/goodput.py's definitions)
    run_from: float
    run_until: float
    unit: str = "chip"
    slices: int = 1  # a gang's machines (submit --slices): its wall time counts once per slice

    @property
    def slice_hours(self) -> float:
        return self.wall * self.slices / 3600


class SliceGap(msgspec.Struct):
    """One slice of a gang through an interruption: whether it was lost (preempted, the others kept
    meanwhile), and when it was ready again (its TPU created and set up; a kept one: at once)."""

    machine: str
    lost: bool
    ready_at: float


class Interruption(msgspec.Struct):
    after: int  # the attempt interrupted
    before: int  # the attempt that followed
    machine_from: str
    machine_to: str
    lost_at: float
    back_at: float
    detection: float
    recreate: float
    setup: float
    launch: float
    redone_steps: int | None
    redone: float | None  # seconds of work done again; None: unknown
    by_hand: bool = False  # after an attempt a person killed: waiting on them, not counted in the total
    slices: list[SliceGap] = msgspec.field(default_factory=list)  # a gang's, each slice apart; [] for one

    @property
    def total(self) -> float:
        return self.back_at - self.lost_at

    @property
    def slice_hours_lost(self) -> float:
        """Every slice waits out the whole interruption: the lost one coming back, the kept ones for it."""
        return self.total * max(1, len(self.slices)) / 3600


class Mark(msgspec.Struct):
    machine: str
    kind: str  # preempted | recreate | setup
    start: float
    end: float


class JobReport(msgspec.Struct):
    job: int
    name: str
    attempts: list[AttemptCost]
    interruptions: list[Interruption]
    total: float
    productive: float
    marks: list[Mark] = msgspec.field(default_factory=list)
    redone_unknown: bool = False

    @property
    def goodput(self) -> float | None:
        return self.productive / self.total if self.total > 0 else None

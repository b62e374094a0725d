"""The team sheet's part in a manage pass, and the rows jobtpu keeps there (jobtpu/sheet/sync.py reads and writes it).

At the pass's start the claims people made by hand go to dispatch through `seen.claims`; at its end
the machines' rows are written in one batch. A quiet pass (same rows as last written, sheet read less
than `read_every` ago) reads one small file and leaves the API, and its client libraries, alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu import timing
from jobtpu.decide.sheet_layout import SheetMachine
from jobtpu.schema.records import MachineRecord, MachineState
from jobtpu.schema.state import RECOVERING, Status

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobtpu.decide.observation import Observation
    from jobtpu.home.layout import Home
    from jobtpu.passes.session import Session
    from jobtpu.schema.fleet import Fleet, Machine
    from jobtpu.schema.state import Job, State, Transition
    from jobtpu.schema.state_file import Encoded
    from jobtpu.sheet.sync import PassSheet

MEMO = "sheet.json"  # what jobtpu last wrote and read, in the home (one of its own files)


def memo_path(home: Home) -> Path:
    return home.root / MEMO


class SheetHook:
    """The sheet's part in one pass: claims for dispatch before it decides, the machines' rows after.
    `would_launch`: whether deciding over an observation starts a queued job (a rehearsal)."""

    def __init__(self, would_launch: Callable[[Observation], bool] = lambda seen: False) -> None:
        self.would_launch = would_launch
        self.started: PassSheet | None = None  # the PassSheet the pass started with, until its end

    def before_decide(self, p: Session, seen: Observation) -> list[str]:
        """Hand claims for dispatch; one line when the sheet cannot be read (its last claims then
        hold). A pass that would start a job reads the claims first unless its last read is fresher
        than `claims_fresh()`: a machine claimed by hand a moment ago is not launched on."""
        config = p.fleet.sheet
        if config is None:
            return []
        from jobtpu.sheet.sync import PassSheet  # here: a home without a sheet loads no Sheets client

        path = memo_path(p.home)
        own = own_users(sheet_rows(p.fleet, p.state, p.home))
        ps = PassSheet.start(config, path)
        seen.claims = ps.claims(own)
        if not ps.read and not ps.read_within(claims_fresh()) and self.would_launch(seen):
            ps = PassSheet(config, path)
            seen.claims = ps.claims(own)
        queued = {j.user for j in p.state.jobs if j.status is Status.QUEUED}
        seen.claimants = claimants(seen.claims, sheet_names(p.home, queued) if seen.claims else {}, queued)
        self.started = ps
        return [ps.problem] if ps.problem else []

    def before_intents(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        return None

    def before_result(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        return None

    def after_pass(self, p: Session, seen: Observation) -> list[str]:
        """The pass's one write (none when nothing changed); a failure is one line, never the pass's."""
        ps, self.started = self.started, None
        if ps is None:
            return []
        result = ps.finish(sheet_rows(p.fleet, p.state, p.home))
        return [result.problem] if result.problem else []


def claims_fresh() -> float:
    """Seconds a read's claims are trusted by a pass about to launch (read_every is for the rest):
    timing's claims_fresh, which $JOBTPU_SHEET_FRESH sets."""
    return timing.current().claims_fresh


def claimants(claims: dict[str, str], names: dict[str, str], users: set[str]) -> dict[str, frozenset[str]]:
    """Machine → the `users` its claim names, as themselves or by their sheet name (`names`), in any
    case: `Lyy` in the user cell is lyy, whose own jobs the claim does not keep off."""
    known: dict[str, set[str]] = {}
    for user in users:
        for name in {user, names.get(user, user)}:
            known.setdefault(name.strip().casefold(), set()).add(user)
    found = {}
    for machine, holder in claims.items():
        named = {u for person in holder.split(",") for u in known.get(person.strip().casefold(), ())}
        if named:
            found[machine] = frozenset(named)
    return found


def own_users(rows: list[SheetMachine]) -> dict[str, str]:
    """Machine → the user cell jobtpu writes for it now: such a cell is no claim."""
    return {row.name: ", ".join(row.users) for row in rows}


# ---- the rows ---------------------------------------------------------------------------------------

def sheet_rows(fleet: Fleet, state: State, home: Home | None = None) -> list[SheetMachine]:
    """One row per machine in machines.json, with the jobs that hold it now (launching, running): a
    job being killed gives its machine back at the kill, not when the machine confirms it. A machine
    that is not up, with no such job, is held by the jobs waiting to resume on it (`recovering`).
    Users are named as their `sheet_name` setting says, when `home` is given and they have one."""
    on: dict[str, list[Job]] = {}
    back: dict[str, list[Job]] = {}
    for job in state.jobs:
        if job.active and job.status is not Status.KILLING and job.machine:
            for name in job.gang or [job.machine]:  # a gang is shown on each of its machines' rows
                on.setdefault(name, []).append(job)
        else:
            for name in resuming_on(job):
                back.setdefault(name, []).append(job)
    rows = []
    for m in fleet.machines.values():
        record = state.machines.get(m.name) or MachineRecord()
        # A machine a job keeps to resume on is held though it is up (a gang's surviving slice): no
        # other job is started there, and the sheet says whose it is.
        kept = any(m.name in j.keeps for j in back.get(m.name, []))
        up = _state(m, record) == MachineState.UP and not kept
        waiting = [] if on.get(m.name) or up else back.get(m.name, [])
        rows.append((m, record, on.get(m.name) or waiting, bool(waiting)))
    names = sheet_names(home, {j.user for row in rows for j in row[2]}) if home is not None else {}
    return [machine_row(m, record, jobs, names, recovering) for m, record, jobs, recovering in rows]


def resuming_on(job: Job) -> list[str]:
    """The machines a queued job waits to resume on: those it keeps (every slice of a gang), else
    the one its last attempt ran on, when a recovery (a preemption's, say) queued it again."""
    if job.status is not Status.QUEUED:
        return []
    if job.keeps:
        return list(job.keeps)
    if job.reason != RECOVERING or not job.attempts:
        return []
    return [job.attempts[-1].machine]


def sheet_names(home: Home, users: set[str]) -> dict[str, str]:
    """User → the name the sheet knows them by (their settings' sheet_name), for those who set one.
    A settings file that cannot be read names its user as they are: the sheet is no place to fail."""
    from jobtpu.errors import JobtpuError
    from jobtpu.home.settings import load_settings

    names = {}
    for user in sorted(users):
        try:
            name = load_settings(home, user).sheet_name
        except (JobtpuError, OSError):
            name = None
        if name:
            names[user] = name
    return names


def machine_row(machine: Machine, record: MachineRecord, jobs: list[Job],
                names: dict[str, str] | None = None, recovering: bool = False) -> SheetMachine:
    jobs = sorted(jobs, key=lambda j: j.id)
    users = tuple(dict.fromkeys((names or {}).get(j.user, j.user) for j in jobs))
    started = [j.current.started for j in jobs if j.current is not None and j.current.started]
    notes = [j.sheet_note for j in sorted(jobs, key=_started_at) if j.sheet_note is not None]
    from jobtpu.fleet.drivers import driver_for

    driver = driver_for(machine)
    return SheetMachine(
        name=machine.name, kind=machine.kind, accelerator=machine.accelerator or "",
        zone=driver.provider_zone(machine, record), provisioning=driver.provisioning(machine, record),
        state=_state(machine, record), users=users,
        jobs=tuple(_job_cell(j) for j in jobs), since=min(started) if started else None,
        note=notes[-1] if notes else None, recovering=recovering)  # the note of the job that started last


def _job_cell(job: Job) -> str:
    """The job as its machine's row names it; a gang (submit --slices) says it is one job of N slices,
    shown on each of its machines."""
    slices = len(job.gang or job.keeps)
    return f"{job.id} {job.name}".strip() + (f" ({slices} slices)" if slices > 1 else "")


def _started_at(job: Job) -> float:
    return float(job.current.started or 0) if job.current is not None else 0.0


def _state(machine: Machine, record: MachineRecord) -> str:
    """The word `machines` shows."""
    from jobtpu.fleet.drivers import driver_for

    if record.api_error:
        return "unknown"
    return driver_for(machine).state_word(record)



"""What each page of `jobtpu serve` shows, as plain values for its template: built by the CLI's own
view code (status's selection and rows, machines' rows, events' lines, report's goodput, tail's log
reading) from what the last pass recorded. No page contacts a machine, the TPU API or the sheet.

`Watcher` is the server's one look at the home's files: a page asks it whether anything changed
(a generation number, the page's ETag), and state.json is read once per change, not per request."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobtpu.home.layout import Home
from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.commands.select import Selection
    from jobtpu.render.cells import JobRow, MachineCells
    from jobtpu.schema.events import Event
    from jobtpu.schema.state import Job, State

# A page draws at most this many job rows (a browser tab stays quick); `all` pages through the rest.
PAGE_ROWS = 500
LOG_TAIL = 64 * 1024  # a worker's log: its last 64 KiB, older parts on request
EVENTS_SHOWN = 500  # the events page: the newest this many that match
WATCHED = ("state.json", "events.jsonl", "machines.json", "history.jsonl", "sheet.json")


class Watcher:
    """Bumps `generation` whenever one of the home's watched files changes (inode, size, mtime)."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.generation = 0
        self._seen: tuple[tuple[int, int, int], ...] | None = None
        self._state: tuple[int, State] | None = None
        self._lock = threading.Lock()
        self._looking = threading.Lock()

    def look(self) -> bool:
        """One look; whether anything changed since the last (the watcher's loop and pages look)."""
        with self._looking:
            seen = tuple(_signature(self.home.root / name) for name in WATCHED)
            if seen == self._seen:
                return False
            self._seen = seen
            self.generation += 1
            return True

    @property
    def stale_cache(self) -> bool:
        """Whether state() would read state.json (else it answers from memory)."""
        return self._state is None or self._state[0] != self.generation

    def state(self) -> State:
        """state.json as of the current generation, read once per generation."""
        from jobtpu.home.store import Store

        with self._lock:
            if self._state is None or self._state[0] != self.generation:
                self._state = (self.generation, Store(self.home).load())
            return self._state[1]


def _signature(path: Path) -> tuple[int, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# ---- the jobs page -----------------------------------------------------------------------------------

class JobsPage(msgspec.Struct):
    columns: list[tuple[str, str]]  # (title, the JobRow field it shows)
    rows: list[JobRow]
    captions: list[str]
    page: int = 1
    pages: int = 1
    ids: list[int] = msgspec.field(default_factory=list)


def jobs_page(home: Home, state: State, sel: Selection, show_all: bool, page: int, viewer: str | None) -> JobsPage:
    """`status`'s table: its selection, rows, columns (the viewer's), counts and "not shown" line;
    with `show_all` every job, PAGE_ROWS a page. Work first (dashboard.work_first): what runs, then
    what waits, then what ended, the last to end first; history keeps its newest-first order."""
    from jobtpu.commands.select import chosen_jobs
    from jobtpu.commands.status import (
        Shown,
        columns_for,
        history_rows_to_show,
        owners_of,
        rows_to_show,
        shown_rows,
        status_view,
        sweep_summary,
    )
    from jobtpu.render.job_columns import JOB_COLUMNS
    from jobtpu.views.listing import config_aliases, status_counts
    from jobtpu.web.dashboard import work_first

    jobs = chosen_jobs(home, sel, state)
    ordered = jobs if sel.history else work_first(jobs)
    shown: Shown
    pages = 1
    if sel.ids or show_all:
        pages = max(1, -(-len(jobs) // PAGE_ROWS))
        page = min(max(1, page), pages)
        shown, left_out = list(ordered[(page - 1) * PAGE_ROWS:page * PAGE_ROWS]), None
        if pages > 1:
            left_out = f"page {page} of {pages}: jobs {(page - 1) * PAGE_ROWS + 1}–{(page - 1) * PAGE_ROWS + len(shown)} of {len(jobs)}"
    else:
        shown, left_out = (history_rows_to_show if sel.history else rows_to_show)(jobs)
        shown = shown if sel.history else work_first(shown)
        if len(shown) > PAGE_ROWS:  # thousands on machines at once: the page still draws at most PAGE_ROWS
            left_out = f"{len(shown) - PAGE_ROWS} more job(s) on machines not shown ('all' pages through them)"
            shown = shown[:PAGE_ROWS]
    chosen, zone = status_view(home)
    aliases, short = config_aliases(home)
    keys = dict(JOB_COLUMNS)
    owners = owners_of(shown)
    titles = [t for t in columns_for(chosen, owners, viewer) if t in keys]
    counts = f"sweep {', '.join(map(str, sel.sweeps))}: {sweep_summary(jobs)}" if sel.sweeps else status_counts(jobs)
    # A collapsed sweep's row (its members' id span, JobRow.collapsed) names its sweep: the page links
    # to the sweep's view rather than to a job, and offers no box to tick for it.
    rows = shown_rows(shown, time.time(), aliases, zone, short)
    return JobsPage(columns=[(t, keys[t]) for t in titles], rows=rows,
                    captions=[("in history: " if sel.history else "") + counts, *([left_out] if left_out else [])],
                    page=page, pages=pages, ids=[j.id for j in owners])


# ---- one job -----------------------------------------------------------------------------------------

class LogTail(msgspec.Struct):
    attempt: int
    worker: int
    text: str
    start: int  # the offset `text` starts at (older parts: ?before=start)
    end: int  # the log's size when read: where following goes on


class JobPage(msgspec.Struct):
    job: Job
    details: list[tuple[str, str]]  # its record, readable (dashboard.job_details)
    attempts: list[dict[str, Any]]
    events: list[ShownEvent]  # newest first
    goodput: Any
    logs: list[LogTail]
    timeline: Any = None  # charts.Chart of its attempts and interruptions


def job_page(home: Home, state: State, job_id: int) -> JobPage:
    from jobtpu.commands.report import job_reports
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.settings import viewer_settings, viewer_zone
    from jobtpu.render.text import clock
    from jobtpu.schema.state_file import records
    from jobtpu.tell import eventlog
    from jobtpu.views.listing import find_job
    from jobtpu.web.chart_pages import job_timeline
    from jobtpu.web.dashboard import job_details

    job = find_job(home, state.jobs, job_id)
    record = records([job])[0]
    log = eventlog.read(home.root, job_id)
    zone = viewer_zone(viewer_settings(home))
    report = job_reports(load_fleet(home), [job], log, time.time())[0] if job.attempts else None
    logs = [log_tail(home, job_id, job.attempts[-1].n, w) for w in range(_workers(home, job))] if job.attempts else []
    return JobPage(job=job, details=job_details(record, lambda t: clock(t, zone)), attempts=record["attempts"],
                   events=event_lines(reversed(log[-EVENTS_SHOWN:]), zone), goodput=report, logs=logs,
                   timeline=job_timeline(report))


def _workers(home: Home, job: Job) -> int:
    """How many workers' logs the job's latest attempt may have (its logs/ folder says)."""
    n = job.attempts[-1].n
    found = 1
    while home.log_file(job.id, n, found).exists() and found < 1024:
        found += 1
    return found


def log_tail(home: Home, job_id: int, attempt: int, worker: int, before: int | None = None) -> LogTail:
    """A worker's log by job, attempt and worker number (never a path from the request): its last
    LOG_TAIL bytes, or those before `before`, from whole lines."""
    from jobtpu.home.logfiles import log_rel, read_end, read_from

    rel = log_rel(job_id, attempt, worker)
    try:
        if before is None:
            data, end = read_end(home.root, rel, LOG_TAIL)
            start = end - len(data)
        else:
            start = max(0, before - LOG_TAIL)
            data = read_from(home.root, rel, start, before - start)
            end = before
    except (FileNotFoundError, NotADirectoryError):
        return LogTail(attempt, worker, "", 0, 0)
    if start > 0 and b"\n" in data:
        cut = data.index(b"\n") + 1  # a line cut by where the read began
        data, start = data[cut:], start + cut
    return LogTail(attempt, worker, data.decode(errors="replace"), start, end)


def log_since(home: Home, job_id: int, attempt: int, worker: int, offset: int) -> tuple[str, int]:
    """What a worker's log holds past `offset` (at most LOG_TAIL bytes, whole lines), and the new offset."""
    from jobtpu.home.logfiles import log_rel, read_from

    try:
        data = read_from(home.root, log_rel(job_id, attempt, worker), offset, LOG_TAIL)
    except (FileNotFoundError, NotADirectoryError):
        return "", offset
    if b"\n" in data:
        data = data[:data.rindex(b"\n") + 1]  # a half-written line comes whole next time
    elif len(data) < LOG_TAIL:
        data = b""
    return data.decode(errors="replace"), offset + len(data)


# ---- machines and events -----------------------------------------------------------------------------

class MachinePage(msgspec.Struct):
    row: Any  # the published MachineRow
    cells: MachineCells  # its row as `machines` shows it
    lines: list[tuple[str, str]]


def machines_page(home: Home, state: State) -> list[MachinePage]:
    """`machines`' rows, each with `machines NAME`'s lines (its sheet claim, whose jobs it holds since when)."""
    from jobtpu.commands.machines import machine_rows
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.settings import viewer_settings, viewer_zone
    from jobtpu.render.text import clock
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.published import MachineRow as MachineJson
    from jobtpu.schema.records import MachineRecord
    from jobtpu.views.machine import machine_lines
    from jobtpu.views.rows import machine_rows as table_rows

    fleet = load_fleet(home)
    zone = viewer_zone(viewer_settings(home))
    last = float(state.last_pass.ended) if state.last_pass is not None else None
    found = machine_rows(home, state)
    typed = msgspec.convert(found, list[MachineJson])
    out = []
    for row, published, cells in zip(found, typed, table_rows(fleet, state, typed, time.time(), zone), strict=True):
        machine = fleet.machines[row["name"]]
        holding = [j for j in state.jobs if machine.name in j.holds and j.active]
        lines = machine_lines(row, machine, state.machines.get(machine.name) or MachineRecord(), holding,
                              lambda t: clock(t, zone), last)
        out.append(MachinePage(published, cells, lines))
    return out


class ShownEvent(msgspec.Struct):
    """An event as a page shows it: `events`' line, and the job and machine it links to."""

    line: str
    job: int | None
    machine: str | None


def event_lines(found: Any, zone: Any) -> list[ShownEvent]:
    from jobtpu.decide import events as ev

    return [ShownEvent(ev.render_line(e, zone), e.job, e.machine) for e in found]


def events_page(home: Home, job: int | None, machine: str | None, since: float | None) -> tuple[list[ShownEvent], bool]:
    """`events`' lines with its filters, the newest EVENTS_SHOWN, newest first (a page is read from
    its top), and whether older ones were left out. Read from the newest end: a full log (its
    rotated files too) is not parsed for one page."""
    from jobtpu.home.settings import viewer_settings, viewer_zone

    found, more = newest_events(home, job, machine, since, EVENTS_SHOWN)
    zone = viewer_zone(viewer_settings(home))
    return event_lines(reversed(found), zone), more


def newest_events(home: Home, job: int | None, machine: str | None, since: float | None,
                  n: int) -> tuple[list[Event], bool]:
    """The newest `n` events that match, oldest first, and whether any older one matches too."""
    from jobtpu.tell.eventlog import Filter, log_files, parse_lines, read_file

    wanted = Filter(job, machine, since)
    found: list[Event] = []
    for path in reversed(log_files(home.root)):  # newest file first
        lines = read_file(path).splitlines()
        end = len(lines)
        while end > 0:
            start = max(0, end - 4 * n)
            found = [*parse_lines(lines[start:end], wanted), *found]
            end = start
            if len(found) > n:
                return found[-n:], True
    return found, False

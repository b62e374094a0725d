"""Watching the fleet: `events` (the event log), `report` (what preemptions cost), `watch` (the live
dashboard), and the freshness line `status` and `machines` print under their tables."""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobtpu.commands.common import emit_json, error_text, note
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.views.text import printable

if TYPE_CHECKING:
    from rich.console import RenderableType

    from jobtpu.commands.select import Selection
    from jobtpu.schema.machines import Fleet, Machine
    from jobtpu.schema.state import Job, LastPass, State


# ---- freshness ----------------------------------------------------------------------------------------

STALE_WORD = "STALE"  # what a script greps for in `status`, `machines` and the dashboard


def ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    if seconds < 172800:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"


def freshness(last: LastPass | None, now: float | None = None) -> tuple[str, bool]:
    """The line that says how fresh state.json is, and whether it is stale: older than
    timing's stale_intervals intervals of the loop that ran the last pass (60 s for cron or by hand)."""
    from jobtpu import timing

    # One missed pass is noise, three in a row mean the loop or the cron entry is gone; passes from
    # cron or by hand record no interval: cron's own is assumed.
    stale_intervals, default_interval = timing.current().stale_intervals, timing.current().default_interval

    now = time.time() if now is None else now
    if last is None:
        return (f"{STALE_WORD}: no manage pass has run yet: jobs start only in passes (run `jobtpu manage` "
                "from cron, `jobtpu manage --loop 60` or `jobtpu watch`)"), True
    every = float(last.every or default_interval)
    age = now - float(last.ended)
    line = f"last pass {ago(age)} ago (took {float(last.took):.1f} s)"
    if age <= stale_intervals * every:
        return line, False
    return (f"{STALE_WORD}: {line}; passes should run every {every:g} s: is `jobtpu manage` still running "
            "(its cron entry or --loop)?"), True


def freshness_text(last: LastPass | None, one_line: bool = False) -> Any:
    """The freshness line, red when stale; `one_line`: cut to the screen's width (the dashboard)."""
    from rich.text import Text

    line, stale = freshness(last)
    return Text(line, style="bold red" if stale else "dim", no_wrap=one_line, overflow="ellipsis" if one_line else "fold")


def say_freshness(last: LastPass | None) -> None:
    """Under `status` and `machines`, on stderr (stdout stays the table scripts read): the stale
    warning always, the plain `last pass N s ago` only to a person at a terminal."""
    import sys

    from rich.console import Console

    _, stale = freshness(last)
    if stale or sys.stderr.isatty():
        Console(stderr=True).print(freshness_text(last))


def last_pass_json(last: LastPass | None) -> dict[str, Any] | None:
    """What `machines --json` says of the last pass."""
    if last is None:
        return {"ended": None, "took": None, "every": None, "age": None, "stale": True}
    _, stale = freshness(last)
    return {"ended": last.ended, "took": last.took, "every": last.every,
            "age": round(time.time() - float(last.ended), 3), "stale": stale}


def record_pass_failure(home: Home, error: BaseException) -> None:
    """A pass raised: an event in the log (best effort: the error itself is what the user sees)."""
    from jobtpu.passes.tell import pass_failed

    text = error_text(error) if isinstance(error, JobtpuError) else f"{type(error).__name__}: {error}"
    text = text.removeprefix("jobtpu: error: ").splitlines()[0] if text else ""
    with contextlib.suppress(Exception):  # never hide the pass's own error behind the log's
        pass_failed(home.root, [], text)


# ---- events ---------------------------------------------------------------------------------------------

def events(home: Home, follow: bool, job: int | None, machine: str | None, since: float | None,
           as_json: bool) -> int:
    from jobtpu.home.settings import viewer_settings, viewer_zone
    from jobtpu.tell import events as ev

    zone = None if as_json else viewer_zone(viewer_settings(home))  # times as the user's time_zone reads them
    found = ev.follow(home.root, job, machine, since) if follow else ev.read(home.root, job, machine, since)
    for event in found:
        if as_json:
            emit_json(event.to_json())
        else:
            print(ev.render_line(event, zone), flush=follow)
    return 0


# ---- report ---------------------------------------------------------------------------------------------

def chips_of(machine: Machine | None, job: Job) -> tuple[int | None, str]:
    """What an attempt of `job` held on `machine`, and its unit: a TPU's chips from its type (v2/v3/
    v4/v5p names count TensorCores, two a chip; v5e/v6e names count chips); on a box, the GPUs the
    job asked for (`--req gpu=N`), not all the box has. None when unknown or none were asked."""
    if machine is None:
        return None, "chip"
    if machine.is_tpu and machine.accelerator:
        generation, _, count = machine.accelerator.lower().rpartition("-")
        if count.isdigit():
            cores = int(count)
            return (cores // 2 if generation in ("v2", "v3", "v4", "v5p") else cores), "chip"
        return None, "chip"
    if machine.is_tpu:
        return None, "chip"
    from jobtpu.decide.fit import parse_request

    try:
        gpus = parse_request(list(job.req)).resources.get("gpu")
    except JobtpuError:  # a request state.json holds that no longer parses: unknown, not a failed report
        gpus = None
    return gpus or None, "GPU"


def report_jobs(home: Home, state: State, sel: Selection) -> list[Job]:
    """The jobs the selection names, as `status` picks them (a cleaned job too, by id); without any
    selector, your jobs that ran."""
    from jobtpu.commands.select import chosen_jobs

    chosen = chosen_jobs(home, sel, state)
    return chosen if sel.given else [j for j in chosen if j.attempts]


def report(home: Home, sel: Selection, html: str | None) -> int:
    import msgspec

    from jobtpu.schema.machines import load_fleet
    from jobtpu.tell import events as ev
    from jobtpu.views import goodput

    state = Store(home).load()
    fleet = load_fleet(home)
    jobs = report_jobs(home, state, sel)
    log = ev.read(home.root)
    now = time.time()
    reports = []
    for job in jobs:
        attempts = [goodput.AttemptRecord.from_json(msgspec.to_builtins(a), *chips_of(fleet.get(a.machine), job))
                    for a in job.attempts]
        progress = {a.n: goodput.Progress.from_json(a.progress) for a in job.attempts}
        reports.append(goodput.job_report(job.id, job.name, attempts, log, progress, now))
    if html is not None:
        path = Path(html).expanduser()
        path.write_text(goodput.render_html(reports, now=now), encoding="utf-8")
        note(f"wrote {path}")
        return 0
    print(goodput.render_text(reports) if reports else
          "no job matches the selection" if sel.given else "no job has run yet")
    return 0


# ---- watch: the dashboard ---------------------------------------------------------------------------------

ACTIVE = ("launching", "running", "killing")
STYLE = {"queued": "cyan", "launching": "yellow", "running": "green", "killing": "yellow",
         "finished": "bold green", "failed": "bold red", "killed": "magenta"}


def watch(home: Home, interval: float, manage: bool) -> int:
    """Redraw every `interval` seconds, running a manage pass first each round unless told not to;
    a broken state.json or machines.json is shown, and the next round tries again."""
    from rich.console import Console
    from rich.live import Live

    from jobtpu.passes.session import kept_connections

    console = Console()
    said: list[str] = []  # the last lines the passes said, shown under the events
    with kept_connections(manage), Live(console=console, screen=True, auto_refresh=False,
                                        redirect_stdout=False, redirect_stderr=False) as live:
        def draw() -> None:
            try:
                screen = dashboard(home, console.size.height, said, manage, interval)
            except Exception as e:  # noqa: BLE001 - a bug in drawing must not stop the passes
                screen = _line(f"jobtpu: the dashboard failed: {type(e).__name__}: {e}", "bold red")
            live.update(screen, refresh=True)

        draw()
        while True:
            if manage:
                said[:] = (said + _one_pass(home, interval))[-5:]
                draw()
            time.sleep(interval)
            if not manage:
                draw()


TOLD_AFTER = ("notifications:", "events:")  # how the lines of passevents.after_pass start


def _one_pass(home: Home, every: float) -> list[str]:
    """Run a pass; what it said worth showing. A failing pass is one line, never the end of watch."""
    from jobtpu.passes import manage as passes

    try:
        report = passes.run_pass(home, every=every)
    except Exception as e:  # noqa: BLE001 - the dashboard babysits like manage --loop does
        record_pass_failure(home, e)
        text = error_text(e) if isinstance(e, JobtpuError) else f"the pass failed: {type(e).__name__}: {e}"
        return [text.splitlines()[0]]
    lines = [n for n in report.notes if n.startswith(TOLD_AFTER)]  # the rest are in the events
    if report.skipped:
        lines.append("another manage pass is running; showing what it saves")
    return lines


def dashboard(home: Home, height: int, said: list[str], manage: bool, interval: float,
              now: float | None = None) -> RenderableType:
    """The whole screen: a header, the jobs, the machines, the latest events; each row one line."""
    from rich.console import Group

    from jobtpu.tell import events as ev

    now = time.time() if now is None else now
    height = max(height, 24)
    problems: list[str] = []
    state = _read(lambda: Store(home).load(), problems)
    fleet = _read(lambda: _fleet(home), problems)
    mode = f"a pass every {interval:g} s" if manage else "display only (--no-manage)"
    zone = _zone(home, problems)
    clock = datetime.fromtimestamp(now, zone).strftime("%H:%M:%S")
    header = [_line(f"jobtpu watch  {clock}  {home.root}  ({mode})", "bold")]
    if state is not None:
        header.append(freshness_text(state.last_pass, one_line=True))
    header += [_line(p, "bold red") for p in problems]
    room = height - 1 - len(header) - 4 - len(said)  # a spare line, three section titles, the jobs' header
    jobs = state.jobs if state is not None else []
    machine_lines = machine_rows(fleet, state, now) if fleet is not None else []
    latest = [_line(ev.render_line(e, zone), "") for e in ev.latest(home.root, max(room, 1))]
    machines_room = min(len(machine_lines), max(2, room // 3))
    wanted = sum(1 for j in jobs if j.status in ACTIVE or j.status == "queued" or j.ended) or 1
    jobs_room = max(1, min(wanted, room - machines_room - min(len(latest), 3)))
    events_room = max(0, room - machines_room - jobs_room)  # the events take what is left
    parts: list[Any] = [*header, _title("jobs"), _line(JOB_HEADER, "bold"), *job_rows(jobs, jobs_room, now),
                        _title("machines"), *_fit(machine_lines, machines_room),
                        _title("events"), *(latest[-events_room:] if events_room else []),
                        *(_line(s, "yellow") for s in said)]
    return Group(*parts[:height - 1])


def _zone(home: Home, problems: list[str]) -> Any:
    """The viewer's time_zone (None: local time); a broken settings.json is one red line, not the end."""
    from jobtpu.home.settings import viewer_settings, viewer_zone

    return _read(lambda: viewer_zone(viewer_settings(home)), problems)


def _fit(rows: list[Any], room: int) -> list[Any]:
    """`rows`, or as many as fit in `room` lines and a line saying how many more there are."""
    if len(rows) <= room:
        return rows
    return [*rows[:room - 1], _line(f"… {len(rows) - room + 1} more", "dim")]


def _fleet(home: Home) -> Fleet:
    from jobtpu.schema.machines import load_fleet

    return load_fleet(home)


def _read(load: Any, problems: list[str]) -> Any:
    try:
        return load()
    except JobtpuError as e:
        problems.append(error_text(e).replace("\n", "; "))
    except OSError as e:
        problems.append(printable(f"jobtpu: error: {e.strerror or e}: {e.filename or ''}"))
    return None


def _line(text: str, style: str) -> Any:
    from rich.text import Text

    return Text(printable(text), style=style, no_wrap=True, overflow="ellipsis")


def _title(text: str) -> Any:
    from rich.text import Text

    return Text(text, style="bold underline", no_wrap=True)


def _ended_at(job: Job) -> float:
    ended = job.attempts[-1].ended if job.attempts else None
    return float(ended if ended is not None else job.created)


JOB_HEADER = f"{'id':>5} {'status':<9} {'reason':<9} {'machine/wait':<14} {'try':>3} {'age':>4} {'user':<8} {'name':<16} last line"


def _age(seconds: float) -> str:
    """4s, 5m, 3h, 2d: an age in four columns."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def job_rows(jobs: list[Job], room: int, now: float) -> list[Any]:
    """Active jobs first, then the next queued, then the latest ended: as many as fit, one line each."""
    from rich.text import Text


    active = [j for j in jobs if j.status in ACTIVE]
    queued = [j for j in jobs if j.status == "queued"]
    ended = sorted((j for j in jobs if j.ended), key=_ended_at, reverse=True)
    ordered = active + queued + ended
    if not ordered:
        return [_line("no jobs", "dim")]
    rows = []
    for job in ordered[:room]:
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(f"{job.id:>5} ")
        row.append(f"{job.status:<9} ", style=STYLE.get(job.status, ""))
        where = (job.waiting or "") if job.status == "queued" else (job.machine or "")
        row.append(printable(f"{(job.reason or ''):<9.9} {where:<14.14} {job.attempt:>3} {_age(now - job.created):>4} "
                             f"{job.user:<8.8} {job.name:<16.16} {job.last_line}"))
        rows.append(row)
    return _fit(rows, room) if len(ordered) <= room else [*rows[:room - 1],
                                                          _line(f"… {len(ordered) - room + 1} more", "dim")]


def machine_rows(fleet: Fleet, state: State | None, now: float) -> list[Any]:
    """Each machine: its state, the jobs it holds, its TPU or queued-resource state, its back-off."""
    from rich.text import Text

    from jobtpu.schema.state import MachineRecord

    rows = []
    for machine in fleet.machines.values():
        record = (state.machines.get(machine.name) if state is not None else None) or MachineRecord()
        held = [str(j.id) for j in (state.jobs if state is not None else []) if j.machine == machine.name and j.active]
        word = record.state or ("up" if machine.kind == "local" else "unknown")
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(printable(f"{machine.name[:16]:<16} {machine.kind:<5} "))
        row.append(f"{word:<13.13} ", style="green" if word == "up" else "yellow" if word != "unknown" else "dim")
        extra = [f"jobs {','.join(held)}" if held else "idle"]
        if machine.is_tpu:
            extra.append(f"node {record.tpu_state or '?'}")
        if machine.queued_resource:
            extra.append(f"queued resource {record.queued_state or 'none'}")
        if machine.is_tpu and record.next_try is not None and record.next_try > now:  # a create's
            extra.append(f"back-off {int(record.next_try - now)} s after {record.failures} failure(s)")
        if record.detail:
            extra.append(record.detail)
        row.append(printable("  ".join(extra)))
        rows.append(row)
    return rows

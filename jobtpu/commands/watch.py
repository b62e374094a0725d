"""`jobtpu watch`: the live full-screen dashboard of jobs, machines and events, running a manage pass
every round (unless --no-manage)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobtpu.commands import args
from jobtpu.commands.common import error_text
from jobtpu.commands.freshness import freshness_text, record_pass_failure
from jobtpu.errors import JobtpuError, message_of
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.render.names import cut_apart, short_names
from jobtpu.render.text import printable

if TYPE_CHECKING:
    from rich.console import RenderableType

    from jobtpu.passes.session import KeptConnections
    from jobtpu.schema.fleet import Fleet
    from jobtpu.schema.state import Job, State


def watch(home: Home, interval: float, manage: bool) -> int:
    """Redraw every `interval` seconds, running a manage pass first each round unless told not to,
    until `q` (exit 0) or Ctrl-C; a broken state.json or machines.json is shown, and the next round
    tries again."""
    from rich.console import Console
    from rich.live import Live

    from jobtpu.commands.cadence import between_rounds, spool_stamp
    from jobtpu.home.roles import role_of
    from jobtpu.passes.session import kept_connections

    if role_of(home.root).is_member:  # a shared home's passes are its runner's: a member's watch only shows
        manage = False
    console = Console()
    said: list[str] = []  # the last lines the passes said, shown under the events
    woken: set[tuple[int, int]] = set()  # local jobs' ends that started a round early (manage.wake_folders)
    with kept_connections(manage) as kept, Live(console=console, screen=True, auto_refresh=False,
                                        redirect_stdout=False, redirect_stderr=False) as live:
        def draw() -> None:
            try:
                screen = dashboard(home, console.size.height, said, manage, interval)
            except Exception as e:  # noqa: BLE001 - a bug in drawing must not stop the passes
                screen = _line(f"jobtpu: the dashboard failed: {type(e).__name__}: {message_of(e)}", "bold red")
            live.update(screen, refresh=True)

        draw()
        with quit_key() as pressed_quit:
            while True:
                if manage:
                    seen = spool_stamp(home)
                    lines, left = _one_pass(home, interval, kept)
                    said[:] = (said + lines)[-5:]
                    draw()
                    # a request, a submit, a local job's end or a remote worker's starts the next round at once
                    if between_rounds(home, interval, woken, kept, pause=pressed_quit, spool_seen=seen,
                                      state_seen=left):
                        return 0
                elif pressed_quit(interval):
                    return 0
                if not manage:
                    draw()


QUIT_KEYS = b"qQ"
QUIT_HINT = "q or Ctrl-C to quit"


@contextlib.contextmanager
def quit_key() -> Iterator[Callable[[float], bool]]:
    """A wait of up to N seconds that ends early, saying so, when `q` is pressed at the terminal.
    The terminal is put in cbreak mode (keys arrive unbuffered and unechoed; Ctrl-C still interrupts)
    and given back as it was, however watch ends. Without a terminal on stdin it is a plain sleep."""
    import sys

    fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
    if fd is None:
        yield _sleep_round
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield lambda seconds: _wait_for_quit(fd, seconds)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _sleep_round(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def _wait_for_quit(fd: int, seconds: float) -> bool:
    """Read keys until `seconds` passed (False) or a quit key came (True); other keys are ignored.
    A key pressed during the pass was kept by the terminal and is read at once."""
    import os
    import select

    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            return False
        keys = os.read(fd, 64)
        if not keys:  # the terminal went away: wait out the round
            time.sleep(max(0.0, deadline - time.monotonic()))
            return False
        if any(k in QUIT_KEYS for k in keys):
            return True
    return False


TOLD_AFTER = ("notifications:", "events:")  # how the lines of the events hook's after_pass start (passes/tell.py)


def _one_pass(home: Home, every: float, kept: KeptConnections | None = None) -> tuple[list[str], bytes | None]:
    """Run a pass; what it said worth showing, and state.json's stamp as it left it (the write of
    another command since wakes the loop: commands/cadence.py). A failing pass is one line, never
    the end of watch."""
    from jobtpu.commands.intake import take_in
    from jobtpu.home.store import stamp_of
    from jobtpu.passes import manage as passes

    try:
        taken = take_in(home)  # a shared home's requests (docs/reference/home-files.md §1.3)
        report = passes.run_pass(home, every=every, kept=kept)
    except Exception as e:  # noqa: BLE001 - the dashboard babysits like manage --loop does
        record_pass_failure(home, e)
        text = error_text(e) if isinstance(e, JobtpuError) else f"the pass failed: {type(e).__name__}: {e}"
        return [text.splitlines()[0]], stamp_of(home.state_file)
    lines = taken + [n for n in report.notes if n.startswith(TOLD_AFTER)]  # the rest are in the events
    if report.skipped:
        lines.append("another manage pass is running; showing what it saves")
    return lines, stamp_of(home.state_file) if report.state_left is None else report.state_left


def dashboard(home: Home, height: int, said: list[str], manage: bool, interval: float,
              now: float | None = None) -> RenderableType:
    """The whole screen: a header, the jobs, the machines, the latest events; each row one line."""
    from rich.console import Group

    from jobtpu.decide import events as ev
    from jobtpu.tell import eventlog

    now = time.time() if now is None else now
    height = max(height, 24)
    problems: list[str] = []
    state = _read(lambda: Store(home).load(), problems)
    fleet = _read(lambda: _fleet(home), problems)
    mode = f"a pass every {interval:g} s" if manage else "display only (--no-manage)"
    zone = _zone(home, problems)
    clock = datetime.fromtimestamp(now, zone).strftime("%H:%M:%S")
    # How to leave comes before the home's path, which a narrow screen cuts first.
    header = [_line(f"jobtpu watch  {clock}  {QUIT_HINT}  ({mode})  {home.root}", "bold")]
    if state is not None:
        header.append(freshness_text(state.last_pass, one_line=True))
    header += [_line(p, "bold red") for p in problems]
    room = height - 1 - len(header) - 4 - len(said)  # a spare line, three section titles, the jobs' header
    jobs = state.jobs if state is not None else []
    machine_lines = machine_rows(fleet, state, now) if fleet is not None else []
    short = short_names((m.name, m.aliases) for m in fleet.machines.values()) if fleet is not None else {}
    latest = [_line(ev.render_line(e, zone), "") for e in eventlog.latest(home.root, max(room, 1))]
    machines_room = min(len(machine_lines), max(2, room // 3))
    wanted = sum(1 for j in jobs if j.active or j.status == "queued" or j.ended) or 1
    jobs_room = max(1, min(wanted, room - machines_room - min(len(latest), 3)))
    events_room = max(0, room - machines_room - jobs_room)  # the events take what is left
    parts: list[Any] = [*header, _title("jobs"), _line(JOB_HEADER, "bold"), *job_rows(jobs, jobs_room, now, short),
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
    from jobtpu.home.machines import load_fleet

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


JOB_HEADER = f"{'id':>5} {'status':<9} {'reason':<9} {'machine/wait':<14} {'try':>3} {'age':>4} {'user':<8} {'name':<16} last line"


def job_rows(jobs: list[Job], room: int, now: float, short: Mapping[str, str] | None = None) -> list[Any]:
    """Active jobs first, then the next queued, then the latest ended: as many as fit, one line each
    (views/rows.py's rows in fixed columns). Machines by their short names (`short`,
    render/names.py), cut so that different ones differ."""
    from rich.text import Text

    from jobtpu.render.display import STATUS_STYLE
    from jobtpu.views.rows import job_row, live_order

    ordered = live_order(jobs)
    if not ordered:
        return [_line("no jobs", "dim")]
    shown = [job_row(job, now, {}, short=short, clocks=False) for job in ordered[:room]]
    # A gang is one job on N machines: its slices, as status's where column says them.
    machines = [f"{len(job.gang)} slices: " + ",".join((short or {}).get(m, m) for m in job.gang) if job.gang
                else row.machine for job, row in zip(ordered, shown, strict=False)]
    cut = dict(zip(machines, cut_apart(machines, 14), strict=True))
    lines = []
    for row, machine in zip(shown, machines, strict=True):
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f"{row.id:>5} ")
        line.append(f"{row.status:<9} ", style=STATUS_STYLE.get(row.status, ""))
        where = row.waiting if row.status == "queued" else cut[machine]
        line.append(printable(f"{row.reason:<9.9} {where:<14.14} {row.tries:>3} {row.age:>4} "
                              f"{row.user:<8.8} {row.name:<16.16} {row.last_line}"))
        lines.append(line)
    return _fit(lines, room) if len(ordered) <= room else [*lines[:room - 1],
                                                            _line(f"… {len(ordered) - room + 1} more", "dim")]


def machine_rows(fleet: Fleet, state: State | None, now: float) -> list[Any]:
    """Each machine by its short name (render/names.py): its state, the jobs it holds, its TPU or
    queued-resource state, its back-off (views/rows.py's rows in fixed columns)."""
    from rich.text import Text

    from jobtpu.commands.machines import fleet_rows
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.published import MachineRow
    from jobtpu.schema.state import State
    from jobtpu.views.rows import machine_rows as rows_of

    state = state if state is not None else State()
    rows = rows_of(fleet, state, msgspec.convert(fleet_rows(fleet, state), list[MachineRow]), now)
    lines = []
    for row, name in zip(rows, cut_apart([row.short for row in rows], 16), strict=True):
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(printable(f"{name:<16} {row.kind:<5} "))
        line.append(f"{row.seen:<13.13} ", style="green" if row.seen == "up" else "yellow" if row.seen != "unknown" else "dim")
        line.append(printable(row.doing))
        lines.append(line)
    return lines


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "watch")
    p.add_argument("--interval", type=args.positive_seconds, default=5.0, metavar="SECONDS",
                   help="seconds between rounds (default 5)")
    p.add_argument("--no-manage", action="store_true",
                   help="only display (another manage loop or cron runs the passes); warns when they are late")
    p.set_defaults(func=lambda home, a: watch(home, a.interval, not a.no_manage))

"""`jobtpu status`: the jobs as a table (what a person reads: active, next queued, last ended), as
JSON, or redrawn under --watch.

A listing: it imports at the top only what it uses (`jobtpu status` runs from watch and scripts, so
every module it loads is start-up time paid on every call)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from jobtpu.commands import args
from jobtpu.commands.select import Selection, add_selection_args, chosen_jobs, selection_from
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store

if TYPE_CHECKING:
    from jobtpu.render.cells import JobRow
    from jobtpu.schema.state import Job, State


# The table shows what a person looks at: every job on a machine, the next queued ones and the most
# recently ended; a sweep's thousands of other rows would take seconds to draw and nobody reads them.
QUEUED_SHOWN = 20
ENDED_SHOWN = 20


HISTORY_SHOWN = 20  # `status --history` shows the newest this many (--all: every one)


Shown = list["Job | list[Job]"]  # a job's row, or a sweep's queued members collapsed into one row


def rows_to_show(jobs: list[Job]) -> tuple[Shown, str | None]:
    """What the table shows, in id order, and a line saying what it left out (None: nothing).
    Shown: every job on a machine, the first QUEUED_SHOWN queued (the next to be dispatched) and the
    ENDED_SHOWN that ended last. A sweep's queued members, past SWEEP_ROWS of them, are one row,
    counted as one of those QUEUED_SHOWN (squeue's `39_[0-9999]`); `--all` shows each."""
    from jobtpu.views.rows import ended_at

    queued = [j for j in jobs if j.status == "queued"]
    ended = [j for j in jobs if j.ended]
    recent = sorted(ended, key=ended_at)[-ENDED_SHOWN:] if ENDED_SHOWN else []
    next_queued = queued_rows(queued)[:QUEUED_SHOWN]
    keep = {id(j) for j in next_queued if not isinstance(j, list)} | {id(j) for j in recent}
    groups: Shown = [g for g in next_queued if isinstance(g, list)]
    singles: Shown = [j for j in jobs if j.active or id(j) in keep]
    shown = sorted(singles + groups, key=lambda item: item[0].id if isinstance(item, list) else item.id)
    left_out = []
    hidden = len(queued) - sum(len(item) if isinstance(item, list) else 1 for item in next_queued)
    if hidden:
        left_out.append(f"{hidden} more queued")
    if len(ended) > len(recent):
        left_out.append(f"{len(ended) - len(recent)} older ended")
    if not left_out:
        return shown, None
    return shown, f"{' and '.join(left_out)} job(s) not shown (--all shows every job)"


# A sweep with more queued members than this reads as one row (a few are shown each with the values
# that tell them apart; ten thousand would push every other queued job out of the table).
SWEEP_ROWS = 8


def queued_rows(queued: list[Job]) -> Shown:
    """The queued jobs in their order, the members of a sweep with over SWEEP_ROWS queued collapsed
    into one list where its first one stands."""
    members: dict[int, list[Job]] = {}
    for job in queued:
        if job.sweep is not None:
            members.setdefault(job.sweep, []).append(job)
    out: Shown = []
    for job in queued:
        group = members.get(job.sweep) if job.sweep is not None else None
        if group is None or len(group) <= SWEEP_ROWS:
            out.append(job)
        elif group[0] is job:
            out.append(group)
    return out


def owners_of(shown: Shown) -> list[Job]:
    """Each row's job (a collapsed sweep's: its first queued member)."""
    return [item[0] if isinstance(item, list) else item for item in shown]


def shown_rows(shown: Shown, now: float, aliases: Any, zone: Any, short: Any, clocks: bool = True) -> list[JobRow]:
    """The rows of what rows_to_show chose: a job's (rows.job_rows), or a collapsed sweep's
    (rows.sweep_row), in its order."""
    from jobtpu.views.rows import job_rows, sweep_row

    singles = [item for item in shown if not isinstance(item, list)]
    made = iter(job_rows(singles, now, aliases, zone, short, clocks))
    return [sweep_row(item, now, aliases, zone, short) if isinstance(item, list) else next(made) for item in shown]


def sweep_summary(jobs: list[Job]) -> str:
    """A sweep's line of counts, most advanced first: `4 finished, 1 running, 1 failed`."""
    order = ("finished", "running", "launching", "killing", "queued", "failed", "killed")
    counts = {status: sum(1 for j in jobs if j.status == status) for status in order}
    return ", ".join(f"{n} {status}" for status, n in counts.items() if n)


def history_rows_to_show(jobs: list[Job]) -> tuple[Shown, str | None]:
    """The newest HISTORY_SHOWN of the cleaned jobs (newest first), and what the table leaves out."""
    if len(jobs) <= HISTORY_SHOWN:
        return list(jobs), None
    return list(jobs[:HISTORY_SHOWN]), f"{len(jobs) - HISTORY_SHOWN} older job(s) not shown (--all shows every job)"


def status(home: Home, chosen: Selection, as_json: bool, watch: float | None, show_all: bool) -> int:
    from jobtpu.schema.state_file import jobs_document

    if as_json:  # every selected job, the records as stored, encoded straight from the typed jobs
        sys.stdout.buffer.write(jobs_document(chosen_jobs(home, chosen)))
        sys.stdout.flush()
        return 0
    from rich.console import Console, Group

    from jobtpu.render.display import jobs_table
    from jobtpu.views.listing import config_aliases, status_counts

    chosen_columns, zone = status_view(home)
    viewer = viewer_name()

    console = Console()
    aliases, short = config_aliases(home)

    from jobtpu.commands.freshness import freshness_text, say_freshness

    def table(state: State) -> Any:
        jobs = chosen_jobs(home, chosen, state)
        shown: Shown
        if chosen.ids or show_all:  # jobs named by id are always shown, each on its row
            shown, left_out = list(jobs), None
        elif chosen.history:
            shown, left_out = history_rows_to_show(jobs)
        else:  # only the rows shown become table cells
            shown, left_out = rows_to_show(jobs)
        now = time.time()
        counts = (f"sweep {', '.join(map(str, chosen.sweeps))}: {sweep_summary(jobs)}" if chosen.sweeps
                  else status_counts(jobs))
        captions = [("in history: " if chosen.history else "") + counts]
        columns = columns_for(chosen_columns, owners_of(shown), viewer)
        table_rows = shown_rows(shown, now, aliases, zone, short, clocks="submitted" in columns)
        return jobs_table(table_rows, console.width, captions + ([left_out] if left_out else []), columns)

    if watch is None:
        state = Store(home).load()
        table(state).write(console)  # plain lines to a file or a pipe: 10,000 rows cost what their text does
        say_freshness(state.last_pass)
        from jobtpu.commands.common import note
        from jobtpu.commands.runner import lease_lines

        for line, _ in lease_lines(home):  # a home with a standby: who runs the passes (stderr, as freshness)
            note(line)
        return 0
    from rich.live import Live

    with Live(jobs_table([], console.width), console=console, screen=False, auto_refresh=False) as live:
        while True:
            state = Store(home).load()
            live.update(Group(table(state), freshness_text(state.last_pass)), refresh=True)
            time.sleep(max(0.2, watch))


def status_view(home: Home) -> tuple[list[str] | None, Any]:
    """The columns (None: the defaults) and the time zone the person looking set."""
    from jobtpu.home.settings import viewer_settings, viewer_zone

    settings = viewer_settings(home)
    return settings.columns or None, viewer_zone(settings)


def viewer_name() -> str | None:
    """Who is looking (None: a login jobtpu cannot take as a user name, so nobody's own view)."""
    from jobtpu.home.actor import resolve_user

    try:
        return resolve_user(None)
    except JobtpuError:
        return None


def columns_for(chosen: list[str] | None, shown: list[Job], viewer: str | None) -> list[str]:
    """The columns chosen, else the defaults without `user` when every job shown is the viewer's
    own (it would say the same name on every row)."""
    from jobtpu.render.job_columns import DEFAULT_JOB_COLUMNS

    if chosen is not None:
        return chosen
    own = all(job.user == viewer for job in shown)
    return [c for c in DEFAULT_JOB_COLUMNS if not (own and c == "user")]


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "status")
    add_selection_args(p, "only these jobs, whoever submitted them (default: your jobs)", history=True)
    p.add_argument("--all", action="store_true", dest="show_all",
                   help=f"every job in the table (default: jobs on a machine, the next {QUEUED_SHOWN} "
                        f"queued and the {ENDED_SHOWN} that ended last)")
    p.add_argument("--json", action="store_true", help="every selected job as JSON (the stored records)")
    p.add_argument("--watch", nargs="?", type=args.positive_seconds, const=5.0, metavar="SECONDS",
                   help="redraw every SECONDS (default 5) until interrupted")
    p.set_defaults(func=lambda home, a: status(home, selection_from(a), a.json, a.watch, a.show_all))

"""`jobtpu metrics`: the home's figures in the Prometheus text format (version 0.0.4), for
node_exporter's textfile collector from cron (no server); `jobtpu serve` answers the same at
/metrics. Read from what the last pass recorded, like `status`: no machine, API or sheet is asked.
Needs nothing of the web stack: web/ imports this, never the other way (docs/design.md §5.1)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.home.layout import Home

if TYPE_CHECKING:
    from jobtpu.schema.state import Job, State


def metrics(home: Home) -> int:
    from jobtpu.home.store import Store

    sys.stdout.write(metrics_text(home, Store(home).load()))
    return 0


def _label(value: str) -> str:
    """A label value as the text format escapes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, kind: str, help_text: str, samples: Sequence[tuple[dict[str, str], float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        inside = ",".join(f'{k}="{_label(v)}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{inside}}} {value:g}" if inside else f"{name} {value:g}")
    return lines


def metrics_text(home: Home, state: State, now: float | None = None) -> str:
    from jobtpu.commands.machines import machine_rows
    from jobtpu.commands.report import job_reports
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.users import load_users
    from jobtpu.schema.state import STATUS_WORDS
    from jobtpu.tell import eventlog, totals
    from jobtpu.views.listing import history
    from jobtpu.views.usage import usage

    now = time.time() if now is None else now
    by = Counter((_status_word(job), job.user) for job in state.jobs)
    # A held job waits for a person, not for room: it is counted apart and never the oldest waiting.
    queued = [float(j.created) for j in state.jobs if j.status.value == "queued" and not j.held]
    machines = Counter(str(row["state"]) for row in machine_rows(home, state))
    last = state.last_pass
    fleet = load_fleet(home)
    jobs = [*state.jobs, *history(home)]
    events = eventlog.read(home.root)
    reports = job_reports(fleet, [j for j in jobs if j.attempts], events, now)
    users = {job.id: job.user for job in jobs}
    by_user, _ = usage(((users[r.job], r) for r in reports), 0.0, now)
    used = [({"user": u, "unit": unit}, s / 3600) for u, row in sorted(by_user.items()) for unit, s in sorted(row.used.items())]
    lost = [({"user": u, "unit": unit}, s / 3600) for u, row in sorted(by_user.items()) for unit, s in sorted(row.lost.items())]
    statuses = (STATUS_WORDS[0], "held", *STATUS_WORDS[1:])  # held: a queued job that is held
    counted = totals.load(home.root).plus(totals.tally(events))
    # Every known label value has its series, 0 when nothing has it: a series that vanished would
    # read as "no data" where Prometheus should see none (and a counter's rate needs it from its 0).
    people = sorted({*(load_users(home) or []), *(job.user for job in jobs), *counted.ended})
    ended = [({"outcome": o, "user": u}, counted.ended.get(u, {}).get(o, 0)) for u in people for o in totals.OUTCOMES]
    preempted = [({"machine": m}, counted.preempted.get(m, 0))
                 for m in sorted({*fleet.machines, *counted.preempted})]
    lines = [
        *_family("jobtpu_jobs", "gauge", "Jobs in state.json by status (held: queued and held) and user.",
                 [({"status": s, "user": u}, by[(s, u)]) for u in people for s in statuses]),
        *_family("jobtpu_oldest_queued_seconds", "gauge",
                 "How long the oldest queued job not held has waited (0: none queued).",
                 [({}, max(0.0, now - min(queued)) if queued else 0.0)]),
        *_family("jobtpu_machines", "gauge", "Machines by the state the last pass saw.",
                 [({"state": s}, n) for s, n in sorted(machines.items())]),
        *_family("jobtpu_last_pass_age_seconds", "gauge", "Seconds since the last pass ended (-1: none has run).",
                 [({}, now - float(last.ended) if last is not None else -1.0)]),
        *_family("jobtpu_last_pass_duration_seconds", "gauge", "How long the last pass took (-1: none has run).",
                 [({}, float(last.took) if last is not None else -1.0)]),
        *_family("jobtpu_accelerator_hours_used", "gauge",
                 "Chip-hours (unit chip) and GPU-hours (unit GPU) used, by user, every job in the home.", used),
        *_family("jobtpu_accelerator_hours_lost", "gauge",
                 "Chip-hours and GPU-hours lost to preemption (work done again), by user.", lost),
        *_family("jobtpu_jobs_ended_total", "counter", "Jobs ended, by outcome and user, from the events.", ended),
        *_family("jobtpu_preemptions_total", "counter", "Preemptions, by machine, from the events.", preempted),
    ]
    return "\n".join(lines) + "\n"


def _status_word(job: Job) -> str:
    return "held" if job.held and job.status.value == "queued" else job.status.value


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "metrics")
    p.set_defaults(func=lambda home, a: metrics(home))

"""`jobtpu fetch`: pull a job's remote folder (or a path in it) into results/ID/ or --to DIR."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobtpu.commands import across, args
from jobtpu.commands.common import note
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store


def fetch(home: Home, job_id: int, path: str, to: str | None) -> int:
    """Pull the job's remote folder (or `path` in it) into results/ID/ or `to`."""
    target = fetch_into(home, job_id, path, to)
    note(f"fetched into {target}")
    return 0


def fetch_into(home: Home, job_id: int, path: str, to: str | None) -> Path:
    """Pull the job's remote folder (or `path` in it) into results/ID/ or `to`; the folder it went to."""
    from jobtpu.fleet.operations import fetch as fetch_folder
    from jobtpu.home.machines import load_fleet
    from jobtpu.views.listing import find_job

    state = Store(home).load()
    job = find_job(home, state.jobs, job_id)  # a cleaned job's folder stays until `clean --remote`
    if not job.attempts:
        raise JobtpuError(f"job {job.id} has not run yet; there is nothing to fetch")
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise JobtpuError(f"PATH {path!r} must be relative to the job's folder, without '..'")
    from jobtpu.home.places import results_target

    target = Path(to).expanduser() if to else results_target(home, job.id)
    fetch_folder(home, load_fleet(home), state, job, path, target)
    return target


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "fetch")
    p.add_argument("id", nargs="?", metavar="ID", help="the job (or select several: --sweep, --tag, … below)")
    p.add_argument("path", nargs="?", default="", help="a file or folder inside the job's folder (default: all)")
    p.add_argument("--to", metavar="DIR", help="fetch into DIR instead of results/ID/ (with a selector, DIR/ID/)")
    across.add_selectors(p)
    p.set_defaults(func=_fetch_command)


def _fetch_command(home: Home, a: argparse.Namespace) -> int:
    """One job's folder, or with a selector every selected job's PATH (commands/across.py)."""
    job_id, path = across.fetch_words(a)
    if job_id is None:
        return across.fetch_selected(home, across.selection_of(a), path, a.to)
    return fetch(home, job_id, path, a.to)

"""A private home's state.json carries its owner's consent (docs/design.md §7) even while a save
holds it under a second name: every save keeps the file it replaces as state.json.bak through a
hard link, and a pass read state.json's stat without the lock while a submit saved, took the
second link for a stranger's, and failed local jobs as "no spec" (CI, test_crash's random kills)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from jobtpu.decide.outcomes import refused_at_start
from jobtpu.decide.settle import LaunchDone, settle
from jobtpu.home.layout import Home
from jobtpu.home.specs import records_trusted
from jobtpu.home.trust import folder_is_own, why_untrusted
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Machine
from jobtpu.schema.state import Attempt, Job, State, Status
from tests.helpers import make_home, manage, manage_until, submit

ME = os.geteuid()
OTHER = ME + 1


def _st(mode: int, uid: int = ME, nlink: int = 1) -> os.stat_result:
    return os.stat_result((mode, 0, 0, nlink, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(("st", "links_count", "why"), [
    (_st(stat.S_IFREG | 0o600), True, None),
    (_st(stat.S_IFREG | 0o600, nlink=2), True, "has other hard links"),
    (_st(stat.S_IFREG | 0o600, nlink=2), False, None),
    (_st(stat.S_IFREG | 0o620, nlink=2), False, "is writable by its group or by everyone"),
    (_st(stat.S_IFREG | 0o600, uid=OTHER, nlink=2), False, "not"),
    (_st(stat.S_IFDIR | 0o700), False, "is not a regular file"),
])
def test_a_second_link_counts_against_a_file_only_when_asked(st: os.stat_result, links_count: bool,
                                                            why: str | None) -> None:
    found = why_untrusted(st, ME, links_count=links_count)
    assert found == why if why is None or why != "not" else found is not None and "not" in found


@pytest.mark.parametrize(("st", "own"), [
    (_st(stat.S_IFDIR | 0o700), True),
    (_st(stat.S_IFDIR | 0o755), True),
    (_st(stat.S_IFDIR | 0o775), False),  # its group may make names in it
    (_st(stat.S_IFDIR | 0o757), False),  # anyone may
    (_st(stat.S_IFDIR | 0o700, uid=OTHER), False),
    (_st(stat.S_IFREG | 0o600), False),
])
def test_only_a_folder_nobody_else_writes_is_ones_own(st: os.stat_result, own: bool) -> None:
    assert folder_is_own(st, ME) is own


def _save_cut_short(home: Path) -> None:
    """What a save killed between keeping its .bak and renaming the new file in leaves: state.json
    and state.json.bak one file with two links (jobtpu/home/store.py, _keep_as_backup)."""
    link = home / ".state.json.bak.cut.tmp"
    os.link(home / "state.json", link)
    os.replace(link, home / "state.json.bak")
    assert os.stat(home / "state.json").st_nlink == 2


def test_a_private_homes_records_stay_its_own_with_the_backup_link(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    submit(home, src, "true")
    _save_cut_short(home)
    assert records_trusted(Home(home))
    home.chmod(0o757)  # anyone could have made that second name: it counts again
    try:
        assert not records_trusted(Home(home))
    finally:
        home.chmod(0o755)


def test_a_local_job_runs_after_a_save_was_killed_at_its_backup_link(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    job = submit(home, src, "echo ran")
    _save_cut_short(home)
    first = manage(home)[job]  # started by this very pass, not made to wait for a spec of its own
    assert first["status"] in ("running", "finished"), first
    final = manage_until(home, [job], {"finished", "failed", "killed"})
    assert final[job]["status"] == "finished", final[job]


@pytest.mark.parametrize(("kind", "status", "reason", "line"), [
    # another account's to run: nothing started, it waits again
    ("foreign", Status.QUEUED, None, "could not launch: why"),
    # never run what its spec does not say
    ("tampered", Status.FAILED, model.LAUNCH_FAILED, "launch failed on worker 0: why"),
])
def test_a_launch_its_spec_refuses_as_it_starts_queues_or_fails_its_job(kind: str, status: Status,
                                                                        reason: str | None, line: str) -> None:
    """The launch's own look at the spec (passes/act.py) may find what the pass's first look did not;
    a job another account must run used to fail as launch_failed."""
    box = Machine(name="local", kind="local")
    job = Job(id=7, user="bob", cmd="true", archive="a.tar.gz", created=0.0, machine="local", status=Status.LAUNCHING,
              attempts=[Attempt(n=0, machine="local", started=1.0)])
    state = State(jobs=[job])
    settle(state, [LaunchDone(7, box, refused_at_start(job, [0], kind, "why"))], 2.0).apply_to(state)
    assert (job.status, job.reason, job.last_line) == (status, reason, line)

"""A loop (`manage --loop`) reacts to a submit as it reacts to a job's end (docs/reference/commands.md
§2.3): a submit saved while the loop waits out a long interval starts the next round at once, in a
private home and in a shared one (the runner's own submit, and a member's request in the spool).
Each waits on the job's start, bounded by a timeout far below the loop's interval."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobtpu import timing
from tests.accounts import REPO, Team
from tests.helpers import JOBTPU, make_home, submit, wait_for, write_tree
from tests.test_shared_home import init_shared, rows, source_of

INTERVAL = "600"  # far beyond every wait below: only a wake starts the round that launches the job
STARTED = ("running", "finished")


def _passed(state_file: Path) -> bool:
    """Whether the loop's first round is over (it waits out its interval from then on)."""
    try:
        return bool(json.loads(state_file.read_text()).get("last_pass"))
    except (OSError, ValueError):
        return False


@contextmanager
def _loop(command: list[str], state_file: Path) -> Iterator[subprocess.Popen[str]]:
    loop = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_for(lambda: _passed(state_file), timeout=60, what="the loop's first round")
        yield loop
    finally:
        os.killpg(loop.pid, signal.SIGINT)
        loop.wait(timeout=60)
    assert "Traceback" not in (loop.stderr.read() if loop.stderr else "")


def test_a_submit_wakes_an_idle_loop_in_a_private_home(tmp_path: Path) -> None:
    home = make_home(tmp_path, slots=2)
    src = write_tree(tmp_path / "src", {"a.py": ""})
    with _loop([*JOBTPU, "--home", str(home), "manage", "--loop", INTERVAL], home / "state.json"):
        job = submit(home, src, "sleep 30", in_process=False)
        wait_for(lambda: _status(home, job) in STARTED, timeout=60, what="the submitted job to start")


def _status(home: Path, job: int) -> str | None:
    found = [j for j in json.loads((home / "state.json").read_text())["jobs"] if j["id"] == job]
    return found[0]["status"] if found else None


def test_a_submit_wakes_the_runners_idle_loop_in_a_shared_home(team: Team) -> None:
    alice, bob = team.accounts
    home = init_shared(team)
    env = {"HOME": f"/home/{alice}", "USER": alice, "LOGNAME": alice, "PATH": "/usr/local/bin:/usr/bin:/bin",
           "PYTHONPATH": str(REPO), **timing.env(spool_poll=0.1)}
    command = ["runuser", "-u", alice, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
               sys.executable, "-m", "jobtpu.cli", "--home", str(home), "manage", "--loop", INTERVAL]
    with _loop(command, home / "state.json"):
        for account in (alice, bob):  # the runner's own submit writes state.json; a member's is a request
            job = int(team.run(account, "--home", str(home), "submit", "--dir", str(source_of(team, account)),
                               "--cmd", "sleep 30", umask="0077").stdout)
            wait_for(lambda: rows(team, home).get(job, {}).get("status") in STARTED,  # noqa: B023 - used at once
                     timeout=60, interval=0.3, what=f"{account}'s job to start")


def test_a_folder_watch_wakes_its_wait_when_an_entry_comes(tmp_path: Path) -> None:
    """The loop's wait ends on the change, not at its end (home/folder_watch.py): a wait of 600 s
    returns once a file is renamed into the watched folder (as every save of the home is made)."""
    import threading

    from jobtpu.home.folder_watch import FolderWatch

    watch = FolderWatch([tmp_path, tmp_path / "absent"])  # a folder not there yet is left to the poll
    waiting = threading.Thread(target=watch.wait, args=(600,), daemon=True)
    try:
        waiting.start()
        (tmp_path / ".new").write_text("1")
        (tmp_path / ".new").rename(tmp_path / "state.json")
        waiting.join(timeout=60)
        assert not waiting.is_alive(), "the wait did not end on the rename"
    finally:
        watch.close()

"""How the `jobtpu` program ends (docs/design.md §9.4): at once when the interpreter's exit would
only free memory, with every byte of output delivered and the exit status kept; the usual exit
whenever an atexit callback or another thread is left to finish."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

import pytest

from jobtpu.cli import nothing_left_but_memory

pytestmark = pytest.mark.fast

# Under -v the interpreter's usual exit tells each module it clears ("# cleanup[2] removing ..."),
# and an exit at once tells nothing.
# Started with -S, the packages' folder put on the path by hand: no site hook runs, as a .pth file
# of a machine's may register an atexit callback of its own (which rightly keeps the usual exit).
PROGRAM = """
import sys
sys.path[:0] = {path!r}
from jobtpu import cli
{setup}
sys.exit(cli.command_line())
"""
PATH = [str(Path(__file__).resolve().parent.parent), sysconfig.get_paths()["purelib"]]
TEARDOWN = "# cleanup"


def _run(home: Path, args: list[str], setup: str = "", verbose: bool = True,
         **how: Any) -> subprocess.CompletedProcess[str]:
    how = {"capture_output": True, **how}
    flags = ["-S", "-v"] if verbose else ["-S"]
    return subprocess.run([sys.executable, *flags, "-c", PROGRAM.format(path=PATH, setup=setup), "--home", str(home),
                           *args], text=True, timeout=60, env={**os.environ, "JOBTPU_USER": "tester"}, **how)


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    root.mkdir()
    (root / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local"}}}))
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print(1)\n")
    values = ",".join(str(n) for n in range(500))  # 500 jobs: a listing well past a pipe's buffer
    done = _run(root, ["submit", "--dir", str(src), "--cmd", "true", "--sweep", f"lr={values}"])
    assert done.returncode == 0, done.stderr
    return root


def test_a_command_with_nothing_left_ends_at_once_and_delivers_everything(home: Path) -> None:
    done = _run(home, ["status", "--json"])
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) > 1 << 16
    assert [job["id"] for job in json.loads(done.stdout)["jobs"]] == list(range(1, 501))  # all of it
    assert TEARDOWN not in done.stderr  # no module was cleared: the process ended at once


def test_an_error_keeps_its_exit_status(home: Path) -> None:
    done = _run(home, ["tail", "999"])
    assert done.returncode == 1
    assert "no job 999" in done.stderr and TEARDOWN not in done.stderr


def test_a_closed_stdout_is_no_error(home: Path) -> None:
    """Started with stdout closed (`jobtpu status >&-`), Python has no sys.stdout: nothing to flush."""
    done = _run(home, ["status", "--json"], capture_output=False, stdout=None, stderr=subprocess.PIPE,
                preexec_fn=lambda: os.close(1))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and TEARDOWN not in done.stderr


def _close_standard_streams() -> None:
    for fd in (0, 1, 2):
        os.close(fd)


def test_a_pass_started_with_every_standard_stream_closed_keeps_its_files_whole(home: Path) -> None:
    """A daemon's child may start with 0, 1 and 2 closed: the next file opened would take one of them,
    and a job's wrapper or rsync would write into it. /dev/null stands there instead."""
    # Without -v: Python's own start fails under -v with no stderr to tell its imports to.
    done = _run(home, ["manage"], verbose=False, capture_output=False, preexec_fn=_close_standard_streams)
    assert done.returncode == 0
    state = json.loads((home / "state.json").read_text())
    assert {job["status"] for job in state["jobs"]} <= {"launching", "running", "finished", "queued"}
    assert any(job["status"] != "queued" for job in state["jobs"])  # the pass launched some


def test_an_atexit_callback_gets_the_usual_exit(home: Path) -> None:
    done = _run(home, ["status", "--json"], setup="import atexit\natexit.register(print, 'callback ran')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("callback ran")
    assert TEARDOWN in done.stderr


def test_another_thread_gets_the_usual_exit() -> None:
    go = threading.Event()
    worker = threading.Thread(target=go.wait)
    worker.start()
    try:
        assert not nothing_left_but_memory()
    finally:
        go.set()
        worker.join()

"""An eviction stops politely (docs/reference/requests-and-rules.md §8): a job with --signal gets that
signal first, then its grace to checkpoint, before the TERM and KILL a `kill` sends. Real processes
that trap the signal, on the local machine and on an ssh box."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import make_home, passes_until, submit, wait_for, write_tree
from tests.sshfleet import SshFleet
from tests.test_priority import TEAM
from tests.test_ssh_jobs import write_fleet

# The low job checkpoints on USR1 (it says so and ends); its resume says it resumed and finishes.
LOW = ('[ "${JOBTPU_RESUME:-0}" = 1 ] && { echo resumed; exit 0; }\n'
       "trap 'echo checkpointed on USR1; exit 0' USR1\n"
       'echo running\n'
       'while :; do sleep 0.1; done\n')


def _evict(home: Path, tmp_path: Path, machine: str) -> None:
    src = write_tree(tmp_path / "src", {"low.sh": LOW})
    low = submit(home, src, "bash low.sh", "--user", "bob", "--class", "low", "--machine", machine,
                 "--timeout", "1h", "--signal", "USR1@60", "--grace", "20s")
    passes_until(home, lambda jobs: jobs[low]["status"] == "running", "the low job to run")
    urgent = submit(home, src, "true", "--user", "alice", "--class", "urgent", "--machine", machine)
    jobs = passes_until(home, lambda js: js[urgent]["status"] == "finished" and js[low]["status"] == "finished",
                        "the urgent job, then the evicted one's resume, to finish", timeout=120)
    assert [a["outcome"] for a in jobs[low]["attempts"]] == ["preempted", "finished"]
    evicted = (home / "logs" / str(low) / "0.0.log").read_text()
    # Before: the TERM came first, and the job died of it without a checkpoint.
    assert "checkpointed on USR1" in evicted, evicted
    assert "resumed" in (home / "logs" / str(low) / "1.0.log").read_text()


def test_an_evicted_local_job_gets_its_signal_first_and_checkpoints(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 1}}}, priority_classes=TEAM)
    _evict(home, tmp_path, "local")


def test_an_evicted_job_on_an_ssh_box_gets_its_signal_first_and_checkpoints(tmp_path: Path,
                                                                              ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box", n_hosts=1)
    home = tmp_path / "home"
    extra: dict[str, Any] = {"resources": {"slot": 1}}
    write_fleet(home, ssh_fleet, {"box": (box, extra)}, priority_classes=TEAM)
    _evict(home, tmp_path, "box")


# ---- the local machine of a shared home: the wrapper obeys an eviction's stop request -------------

JOB = "trap 'echo checkpointed > saved; exit 0' USR1; trap 'echo termed > saved; exit 0' TERM; " \
      "echo up > up; while :; do sleep 0.1; done"


@pytest.mark.parametrize(("request_name", "saved"), [("7.0.signal", "checkpointed"), ("7.0", "termed")])
def test_the_wrapper_obeys_an_evictions_request_with_the_jobs_signal_first(request_name: str, saved: str,
                                                                           tmp_path: Path) -> None:
    """The runner may not signal a member's job (docs/design.md §7): it leaves a request in stop/,
    which the job's own wrapper obeys. `<job>.<attempt>.signal` is an eviction's: the job's --signal
    first (the wrapper never gets it), its grace, then TERM and KILL; a plain request TERMs at once."""
    from jobtpu.remote import scripts

    (tmp_path / "stop").mkdir()
    stem = tmp_path / "7.0.0"
    stem.with_suffix(".0.env").touch()
    program = "\n".join([scripts.script_file("common.sh"), scripts.script_file("wrapper.sh"),
                         scripts.script_file("launch.sh"), 'jobtpu_wrapper "$@"'])
    args = [str(stem), JOB, "", "0", "022", "", "50", str(tmp_path / "stop" / "7.0"), "0.1", "USR1"]
    wrapper = subprocess.Popen(["setsid", "bash", "-c", program, "jobtpu-7", *args], cwd=tmp_path,
                               env={**os.environ, "JOBTPU_MARK": "h0me.7.0.0"})
    try:
        wait_for(lambda: (tmp_path / "up").exists(), what="the job to start")
        (tmp_path / "stop" / request_name).touch()
        # A TERM ends the wrapper at once, the job's handler a moment later: wait for what the job says.
        said = tmp_path / "saved"
        wait_for(lambda: said.exists() and said.read_text().strip() and wrapper.poll() is not None, timeout=20,
                 what="the job to be stopped")
        assert (tmp_path / "saved").read_text().strip() == saved
        # A job that ends of its own after the signal has its exit recorded; a TERM stops the wrapper too.
        recorded = stem.with_suffix(".0.exit")
        assert (recorded.read_text().strip() if recorded.exists() else None) == ("0" if saved == "checkpointed" else None)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(wrapper.pid, signal.SIGKILL)  # the job's group, the wrapper's own (setsid)
        wrapper.wait()

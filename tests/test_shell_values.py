"""Values reach a machine's shell as data: a root whose name begins with `-` is a folder, never an option
of mkdir, rm, find or cd; a command that begins with `-` is a script, never options of bash. Through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import cli
from tests.sshfleet import SshFleet
from tests.test_ssh_jobs import code_dir, group_alive, log, manage_until, submit, write_fleet


def test_a_root_that_begins_with_a_dash_runs_kills_fetches_and_cleans(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {"root": "-runs"})})  # relative to the login folder
    src = code_dir(tmp_path)
    done = submit(home, src, "echo hi > result.txt; echo finished")
    held = submit(home, src, "sleep 300")
    state = manage_until(home, lambda s: s[done]["status"] in ("finished", "failed")
                         and s[held]["status"] in ("running", "failed"), "one job to end and the other to run")
    assert (state[done]["status"], state[held]["status"]) == ("finished", "running"), state
    assert log(home, done) == "finished\n", state[done]
    root = fm.home / "-runs"
    assert (root / "jobs" / str(done) / "result.txt").read_text() == "hi\n"
    pgid = int((root / "meta" / str(held) / "0.0.pid").read_text().split()[0])

    code, _, err = cli(home, "doctor", "box")
    assert code == 0 and "root -runs exists" in err and "1 job worker(s) running, all managed" in err, err
    code, _, err = cli(home, "kill", str(held))
    assert code == 0, err
    state = manage_until(home, lambda s: s[held]["status"] == "killed", "the job to be killed")
    assert not group_alive(pgid), "kill did not reach the job's processes"

    code, _, err = cli(home, "fetch", str(done), "result.txt")
    assert code == 0, err
    assert (home / "results" / str(done) / "result.txt").read_text() == "hi\n"
    code, _, err = cli(home, "clean", "--remote")
    assert code == 0, err
    assert not (root / "jobs" / str(done)).exists() and not (root / "meta" / str(done)).exists()
    assert not list((root / "archives").glob("*.tar.gz"))


@pytest.mark.fast
def test_a_command_that_begins_with_a_dash_runs_as_a_script(tmp_path: Path) -> None:
    """bash is given the job's command after `--`: text that looks like bash's own options is still the
    script to run, never options of bash."""
    home = helpers.make_home(tmp_path)
    src = helpers.write_tree(tmp_path / "src", {"train.py": "print('hi')\n"})
    job = int(helpers.jobtpu(home, "submit", "--dir", str(src), "--cmd=--version; echo ran > ran.txt").stdout)
    jobs = helpers.manage_until(home, [job], {"finished", "failed"})
    assert (jobs[job]["status"], jobs[job]["exit_code"]) == ("finished", 0), jobs[job]
    assert (home / "run" / "jobs" / str(job) / "ran.txt").read_text() == "ran\n"

"""A Slurm job that Slurm ended before jobtpu's wrapper could write its exit, and that squeue forgot
before the next pass (its MinJobAge), is recorded from Slurm's accounting: one sacct per pass for such
jobs (docs/reference/machines-json.md §3.3.1). Against a real cluster with slurmdbd and mariadbd
(tests/slurmcluster.py, accounting=True), and the no-accounting one, whose sacct refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import helpers
from tests.slurmcluster import SlurmCluster, slurm_accounting  # noqa: F401  # the fixture
from tests.sshfleet import SshFleet
from tests.test_slurm import WAIT_RELEASE, attempts, log, manage, manage_until, meta, slurm_home, submit

# Past its memory (the cluster's 200 MB a job): Slurm's memory watch kills the whole job with KILL.
HOG = "python3 -c \"b = b'x' * (400 << 20); import time; time.sleep(600)\""


@pytest.fixture
def accounting(slurm_accounting: SlurmCluster, ssh_fleet: SshFleet) -> Iterator[tuple[SlurmCluster, SshFleet]]:  # noqa: F811
    ssh_fleet.extra_conf = f"SetEnv SLURM_CONF={slurm_accounting.conf}\n"
    yield slurm_accounting, ssh_fleet
    for machine in ssh_fleet.machines:
        slurm_accounting.cancel_all(machine.user)


def test_jobs_slurm_ended_and_squeue_forgot_are_recorded_from_sacct(accounting: tuple[SlurmCluster, SshFleet],
                                                                    tmp_path: Path) -> None:
    slurm, fleet = accounting
    home, fm = slurm_home(tmp_path, fleet, resources={"gpu": 2})
    # Each ignores the TERM Slurm sends first: the wrapper waits out its grace, and Slurm's KILL (KillWait
    # after the TERM) ends it before it writes the exit.
    late = submit(home, tmp_path / "code", f"trap '' TERM; echo started; {WAIT_RELEASE}", "--grace", "5m")
    hog = submit(home, tmp_path / "code", f"trap '' TERM; echo started; {WAIT_RELEASE}; {HOG}", "--grace", "5m")
    manage_until(home, lambda s: all("started" in log(home, j) for j in (late, hog)), "both jobs to run")
    late_id, hog_id = (attempts(home, j)[0]["slurm_job"] for j in (late, hog))
    # jobtpu's passes are off from here: Slurm ends both, and squeue forgets them, before the next one.
    assert slurm.run("scontrol", "update", f"JobId={late_id}", "EndTime=now").returncode == 0  # past its --time
    (fm.home / f"release-{hog}").touch()
    for slurm_id in (late_id, hog_id):
        slurm.wait_forgotten(slurm_id)
    assert not meta(fm, late, 0, "exit").exists() and not meta(fm, hog, 0, "exit").exists()
    said = slurm.run("sacct", "-X", "-n", "-P", "--format=JobID,State,ExitCode", f"--jobs={late_id},{hog_id}")
    assert set(said.stdout.split()) == {f"{late_id}|TIMEOUT|0:0", f"{hog_id}|FAILED|0:9"}, said
    # sacct cannot answer (slurmdbd away): the cluster is unreachable this pass, nothing is taken for lost.
    slurm.stop_accounting()
    try:
        manage(home)
        state = helpers.status(home)
        assert [(state[j]["status"], state[j]["reason"]) for j in (late, hog)] == [("running", "unreachable")] * 2
        assert [len(attempts(home, j)) for j in (late, hog)] == [1, 1]
    finally:
        slurm.start_accounting()
    state = manage_until(home, lambda s: s[late]["status"] != "running" and s[hog]["status"] != "running",
                         "a pass to record both")
    # TIMEOUT is the attempt's timeout; FAILED keeps Slurm's exit code (a KILL: 128 + 9).
    assert (state[late]["status"], state[late]["reason"]) == ("failed", "timeout")
    assert (state[hog]["status"], state[hog]["exit_code"]) == ("failed", 137)
    assert [len(attempts(home, j)) for j in (late, hog)] == [1, 1]


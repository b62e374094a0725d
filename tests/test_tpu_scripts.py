"""Scripts on TPU workers. `jobtpu doctor`: a process that holds the TPU device and is no job of jobtpu's is
named, and `--fix` stops it. Through the CLI, against the fake TPU API and a real sshd worker; the
holder is a real process of the worker's user with a file named like a TPU device open."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from jobtpu.scripts import parse_tpu_doctor
from tests.helpers import jobtpu, wait_for
from tests.tpufleet import TpuFleet, write_machines


def test_doctor_names_a_stale_tpu_device_holder_and_fix_stops_it(tpus: TpuFleet, tmp_path: Path) -> None:
    node = tpus.add_node("tpu-doc", workers=1, accelerator="v3-8")
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3": tpus.machine_spec("tpu-doc")})
    user = pwd.getpwnam(node.user)
    device = node.home / "dev" / "accel0"  # what /dev/accel0 looks like through /proc/<pid>/fd
    device.parent.mkdir()
    device.touch()
    named = node.home / "hours"  # a command name with "ours" in it is still no job of ours
    named.symlink_to(str(shutil.which("sleep")))
    with device.open("rb") as held:
        holder = subprocess.Popen([str(named), "300"], stdin=held, user=user.pw_uid, group=user.pw_gid,
                                  cwd=node.home, env={"PATH": os.environ["PATH"]})
    try:
        found = jobtpu(home, "doctor", "v3", check=False, timeout=120)
        assert found.returncode == 1, found.stderr
        assert (f"problem: process {holder.pid} (hours) holds the TPU device and is no job of jobtpu's; "
                "`jobtpu doctor v3 --fix` stops it") in found.stderr, found.stderr
        fixed = jobtpu(home, "doctor", "v3", "--fix", check=False, timeout=120)
        assert f"process {holder.pid}" not in fixed.stderr and "ok: TPU device free" in fixed.stderr, fixed.stderr
        wait_for(lambda: holder.poll() is not None, timeout=10, what="the stale holder to be stopped")
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.fast
def test_a_lock_file_is_ours_only_when_a_holder_is() -> None:
    """A stale holder whose command name contains "ours" does not make the lock file a running job's."""
    holders, lock = parse_tpu_doctor("HOLDER 12 hours stale\nHOLDER 13 my tool ours\nLOCK yes\n")
    assert [(h.pid, h.command, h.ours) for h in holders] == [(12, "hours", False), (13, "my tool", True)]
    assert lock
    holders, lock = parse_tpu_doctor("HOLDER 12 hours stale\nLOCK no\n")
    assert not any(h.ours for h in holders) and not lock


def test_a_failed_setup_that_printed_the_running_word_is_reported_at_once(tpus: TpuFleet, tmp_path: Path) -> None:
    """The setup's report is its last line: a failed setup whose log says "SETUP running" does not keep
    the pass polling it until the setup wait runs out."""
    tpus.add_node("tpu-set", workers=1, accelerator="v3-8")
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3": tpus.machine_spec("tpu-set", setup=["echo SETUP running; exit 3"])})
    started = time.monotonic()
    jobtpu(home, "manage", timeout=120)
    took = time.monotonic() - started
    machines = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert "setup failed" in json.dumps(machines), machines
    assert took < 10, f"the pass took {took:.1f}s: it kept polling a setup that had failed"


def test_a_setup_command_that_begins_with_a_dash_runs_as_a_script(tpus: TpuFleet, tmp_path: Path) -> None:
    node = tpus.add_node("tpu-dash", workers=1, accelerator="v3-8")
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3": tpus.machine_spec("tpu-dash", setup=["--version; echo ran >> ~/setup.log"])})
    jobtpu(home, "manage", timeout=120)
    machines = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert (node.home / "setup.log").read_text() == "ran\n", machines
    assert "setup failed" not in json.dumps(machines), machines

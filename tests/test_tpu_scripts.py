"""Scripts on TPU workers. `jobtpu doctor`: a process that holds the TPU device and is no job of jobtpu's is
named, and `--fix` stops it. Through the CLI, against the fake TPU API and a real sshd worker; the
holder is a real process of the worker's user with a file named like a TPU device open."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from jobtpu import timing
from jobtpu.remote.scripts import parse_tpu_doctor
from jobtpu.tpu.accelerator import expected_devices, worker_lines
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


def test_doctor_accelerator_names_each_worker_without_a_device_and_who_holds_one(tpus: TpuFleet,
                                                                                tmp_path: Path) -> None:
    node = tpus.add_node("tpu-acc", workers=2, accelerator="v3-16")
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3": tpus.machine_spec("tpu-acc"), "here": {"kind": "local"}})
    labels = [f"v3[{w}] {h.addr}:{h.port}" for w, h in enumerate(node.hosts)]

    # The workers' python3 has no jax: the device files answer, and there are none. (An empty stand-in
    # for /dev: this machine's own /dev may hold a device file another test made for its TPU.)
    nodev = node.home / "nodev"
    nodev.mkdir()
    missing = jobtpu(home, "doctor", "v3", "--accelerator", check=False, timeout=120,
                     env={"JOBTPU_DEVICE_DIR": str(nodev)})
    assert missing.returncode == 1, missing.stderr
    for label in labels:
        assert (f"{label}: problem: no TPU device file ({nodev}/accel*, {nodev}/vfio/N); the TPU is not attached "
                "to this worker; `jobtpu tpu reapply v3` recreates the node") in missing.stderr, missing.stderr

    dev = node.home / "dev"  # stand-ins for /dev/accel0-3, as /proc/<pid>/fd shows them
    dev.mkdir()
    for i in range(4):
        (dev / f"accel{i}").touch()
    env = {"JOBTPU_DEVICE_DIR": str(dev)}
    found = jobtpu(home, "doctor", "v3", "--accelerator", check=False, timeout=120, env=env)
    for label in labels:
        assert (f"{label}: ok: 4 TPU device files ({dev}/accel0, {dev}/accel1, {dev}/accel2, {dev}/accel3), "
                "held by no process (no jax on python3 to ask further)") in found.stderr, found.stderr

    user = pwd.getpwnam(node.user)
    with (dev / "accel2").open("rb") as held:
        holder = subprocess.Popen([shutil.which("sleep") or "sleep", "300"], stdin=held, user=user.pw_uid,
                                  group=user.pw_gid, cwd=node.home, env={"PATH": os.environ["PATH"]})
    try:
        busy = jobtpu(home, "doctor", "v3", "--accelerator", check=False, timeout=120, env=env)
        assert busy.returncode == 1
        assert (f"{labels[1]}: problem: the TPU device is held by process {holder.pid} (sleep), no job of "
                "jobtpu's; `jobtpu doctor v3 --fix` stops it") in busy.stderr, busy.stderr
    finally:
        holder.kill()
        holder.wait()

    local = jobtpu(home, "doctor", "here", "--accelerator", check=False)
    assert (local.returncode, local.stderr.splitlines()[0]) == (
        1, "jobtpu: error: --accelerator checks a TPU machine's workers; here is a local machine")


@pytest.mark.fast
def test_a_lock_file_is_ours_only_when_a_holder_is() -> None:
    """A stale holder whose command name contains "ours" does not make the lock file a running job's."""
    stale = '{"kind":"holder","pid":12,"command":"hours","ours":false}\n'
    holders, lock = parse_tpu_doctor(stale + '{"kind":"holder","pid":13,"command":"my tool","ours":true}\n'
                                     '{"kind":"lock","present":true}\n')
    assert [(h.pid, h.command, h.ours) for h in holders] == [(12, "hours", False), (13, "my tool", True)]
    assert lock
    holders, lock = parse_tpu_doctor(stale + '{"kind":"lock","present":false}\n')
    assert not any(h.ours for h in holders) and not lock


def test_a_failed_setup_that_printed_the_running_word_is_reported_at_once(tpus: TpuFleet, tmp_path: Path) -> None:
    """The setup's report is its last line: a failed setup whose log says "SETUP running" does not keep
    the pass polling it until the setup wait runs out."""
    tpus.add_node("tpu-set", workers=1, accelerator="v3-8")
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3": tpus.machine_spec("tpu-set", setup=["echo SETUP running; exit 3"])})
    # The setup wait is as long as the suite's timeout: a pass that kept polling the failed setup
    # till it ran out would not return.
    jobtpu(home, "manage", timeout=120, env=timing.env(setup_wait=3600))
    machines = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert "setup failed" in json.dumps(machines), machines


def test_a_setup_command_that_begins_with_a_dash_runs_as_a_script(tpus: TpuFleet, tmp_path: Path) -> None:
    node = tpus.add_node("tpu-dash", workers=1, accelerator="v3-8")
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3": tpus.machine_spec("tpu-dash", setup=["--version; echo ran >> ~/setup.log"])})
    jobtpu(home, "manage", timeout=120)
    machines = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert (node.home / "setup.log").read_text() == "ran\n", machines
    assert "setup failed" not in json.dumps(machines), machines


@pytest.mark.fast
@pytest.mark.parametrize(("accelerator", "devices"), [
    ("v2-8", 8), ("v3-16", 16), ("v4-32", 16), ("v5p-16", 8), ("v5litepod-16", 16), ("v6e-8", 8), ("a100", None),
])
def test_expected_devices_per_accelerator_type(accelerator: str, devices: int | None) -> None:
    assert expected_devices(accelerator) == devices


@pytest.mark.fast
def test_jax_answers_are_read_against_the_accelerator_type() -> None:
    from jobtpu.remote.scripts import parse_tpu_accelerator
    from jobtpu.schema.fleet import Machine

    m = Machine(name="v4", kind="tpu", accelerator="v4-32")
    said = lambda out: worker_lines(m, "v4[1]", parse_tpu_accelerator(out), workers=4)  # noqa: E731

    def jax(count: str) -> str:
        return json.dumps({"kind": "jax", "said": count}) + "\n"

    device = '{"kind":"device","path":"/dev/accel0"}\n'
    assert said(device + jax("16")) == [("v4[1]: ok: JAX sees 16 TPU devices (v4-32)", False)]
    assert said(jax("8")) == [("v4[1]: problem: JAX sees 8 TPU devices where v4-32 has 16; "
                                "`jobtpu tpu reapply v4` recreates the node", True)]  # 4 workers: no restart
    one = Machine(name="v4-8", kind="tpu", accelerator="v4-8")
    assert worker_lines(one, "v4-8[0]", parse_tpu_accelerator(jax("2")), workers=1) == [
        ("v4-8[0]: problem: JAX sees 2 TPU devices where v4-8 has 4; `jobtpu tpu restart v4-8` stops and "
         "starts the node", True)]
    assert said('{"kind":"jax","error":"RuntimeError: TPU initialization failed"}\n')[0][1] is True

"""A machines.json entry of N slices end to end (docs/reference/machines-json.md §3.3 `slices`): the real
google-cloud-tpu client against the fake TPU API, whose nodes' workers are real sshd hosts each with a
disk of its own. `manage` makes every slice through one multislice queued resource and sets each
worker up; one preempted slice brings the whole queued resource back; `jobtpu tpu` acts on the group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import jobtpu, manage, wait_for
from tests.sshfleet import FleetMachine
from tests.tpufleet import ZONE, TpuFleet, tpu_home


def slices_home(tmp_path: Path, tpus: TpuFleet) -> tuple[Path, FleetMachine]:
    """A home whose machine `big` is 2 slices of 2 workers; no node exists yet. The slices' workers are
    one pod's four hosts (one user, one port, as one machines.json entry gives), two per node."""
    pod = tpus.add_node("pod", workers=4, accelerator="v3-16", own_disks=True)
    tpus.api.remove_node(ZONE, "pod")
    for i in range(2):
        tpus.nodes[f"ms-{i}"] = FleetMachine(f"ms-{i}", pod.user, pod.home, pod.hosts[2 * i:2 * i + 2])
    entry = {"kind": "tpu", "node": "ms", "zone": ZONE, "accelerator": "v3-16", "slices": 2,
             "queued_resource": {"tier": "spot"}, "user": pod.user, "port": pod.hosts[0].port,
             "setup": ["echo ran >> ~/setup.log"]}
    return tpu_home(tmp_path, tpus, {"big": entry}, recreate_backoff=0.5), pod


def rows(home: Path) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]}


def passes_until_up(home: Path, seen: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    def up() -> dict[str, dict[str, Any]] | None:
        manage(home)
        now = rows(home)
        seen.extend((name, row["state"]) for name, row in now.items())
        return now if all(row["state"] == "up" for row in now.values()) else None
    found: dict[str, dict[str, Any]] = wait_for(up, timeout=120, interval=0.2, what="every slice up")
    return found


def setup_lines(tpus: TpuFleet, pod: FleetMachine) -> list[list[str]]:
    disks = [tpus.ssh.disk(host) / "setup.log" for host in pod.hosts]  # type: ignore[attr-defined]
    return [path.read_text().split() if path.exists() else [] for path in disks]


def test_the_slices_come_as_one_queued_resource_and_come_back_as_one(tmp_path: Path, tpu_pods: TpuFleet) -> None:
    tpus = tpu_pods
    home, pod = slices_home(tmp_path, tpus)
    seen: list[tuple[str, str]] = []
    first = passes_until_up(home, seen)
    assert sorted(first) == ["big-0", "big-1"] and {r["queued_resource"] for r in first.values()} == {"ACTIVE"}
    asked = tpus.api.queued(ZONE, "ms")
    assert asked is not None and "spot" in asked
    spec = asked["tpu"]["nodeSpec"][0]
    assert spec["multisliceParams"] == {"nodeCount": 2, "nodeIdPrefix": "ms"} and "nodeId" not in spec
    assert spec["node"]["acceleratorType"] == "v3-16"
    assert tpus.api.count("POST", "/queuedResources") == 1 and tpus.api.count("POST", f"/locations/{ZONE}/nodes") == 0
    assert setup_lines(tpus, pod) == [["ran"]] * 4  # setup ran on every worker of every slice
    assert ("big-1", "queued") in seen  # slice 1 followed slice 0's queued resource

    tpus.api.preempt(ZONE, "ms-1")  # one slice: its queued resource is SUSPENDED, slice 0 still READY
    seen.clear()
    again = passes_until_up(home, seen)
    assert ("big-0", "recreating") in seen and ("big-1", "recreating") in seen, seen
    assert tpus.api.count("DELETE", "/queuedResources/ms") == 1  # the whole queued resource, once
    assert tpus.api.count("POST", "/queuedResources") == 2
    assert sorted(node for event, node in tpus.events if event == "create") == ["ms-0", "ms-0", "ms-1", "ms-1"]
    assert sorted(node for event, node in tpus.events if event == "delete") == ["ms-0", "ms-1"]  # both slices went
    assert setup_lines(tpus, pod) == [["ran"]] * 4  # every worker's new disk, set up again
    assert {r["queued_resource"] for r in again.values()} == {"ACTIVE"}


def test_tpu_delete_and_apply_act_on_every_slice(tmp_path: Path, tpu_pods: TpuFleet) -> None:
    tpus = tpu_pods
    home, _ = slices_home(tmp_path, tpus)
    passes_until_up(home, [])
    # `machines` and `doctor` show each slice, which it is, and the queued resource of them all
    shown = jobtpu(home, "machines", "big-1").stdout
    assert "ms-1 in " in shown and "(slice 1 of 2 of big, queued resource ms)" in shown, shown
    doctor = jobtpu(home, "doctor", "big-0", check=False)
    assert "big-0: ok: slice 0 of 2 of big: queued resource ms ACTIVE" in doctor.stdout + doctor.stderr, doctor
    assert jobtpu(home, "tpu", "status", "big").stdout.startswith("big: ACTIVE (up)")
    described = json.loads(jobtpu(home, "tpu", "describe", "big", "--json").stdout)
    assert (described["slices"], described["node_states"]) == (["big-0", "big-1"], ["READY", "READY"]), described
    done = jobtpu(home, "tpu", "delete", "big-1")
    assert "every slice of big (2 slices, one queued resource)" in done.stdout, done.stdout
    wait_for(lambda: manage(home) is not None and tpus.api.queued(ZONE, "ms") is None, timeout=60,
             what="the queued resource to go")
    for _ in range(3):  # put down by hand: passes leave it down
        manage(home)
    assert tpus.api.count("POST", "/queuedResources") == 1
    assert all("`jobtpu tpu apply` brings every slice back" in r["detail"] for r in rows(home).values()), rows(home)
    jobtpu(home, "tpu", "apply", "big")
    assert tpus.api.count("POST", "/queuedResources") == 2  # asked for at once, as apply does for one node
    passes_until_up(home, [])
    refused = jobtpu(home, "tpu", "apply", "big", check=False)
    assert refused.returncode != 0 and "queued resource ms already exists (ACTIVE)" in refused.stderr
    assert "Traceback" not in refused.stderr
    said = jobtpu(home, "tpu", "reapply", "big-0").stdout  # a slice's name: every slice, anew
    assert "every slice of big" in said and tpus.api.count("DELETE", "/queuedResources/ms") == 2, said
    passes_until_up(home, [])
    assert tpus.api.count("POST", "/queuedResources") == 3


def test_a_bad_slices_value_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "machines.json").write_text(json.dumps({"gcp": {"project": "p"}, "machines": {
        "big": {"kind": "tpu", "node": "ms", "zone": "z-1", "accelerator": "v3-16", "slices": 0}}}))
    done = jobtpu(home, "manage", check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[0] == ("jobtpu: error: machines.json: machine 'big': 'slices' must be a whole "
                                           "number of slices from 2 to 64 (got 0)"), done.stderr


def test_a_job_active_on_a_slice_is_stopped_before_its_group_is_deleted(tmp_path: Path, tpu_pods: TpuFleet) -> None:
    """docs/reference/machines-json.md §3.11: a lost slice brings the group back, but never under a
    job still active on one of its slices; once that job has stopped, the next pass deletes it."""
    tpus = tpu_pods
    home, _ = slices_home(tmp_path, tpus)
    passes_until_up(home, [])
    job_id = int(jobtpu(home, "submit", "--dir", str(tmp_path / "src"), "--machine", "big-0",
                        "--cmd", "sleep 600").stdout)
    wait_for(lambda: manage(home)[job_id]["status"] == "running", timeout=60, what="the job to run on big-0")
    tpus.api.set_state(ZONE, "ms-1", "PREEMPTED")  # slice 1 only: the job's workers on slice 0 live on
    for _ in range(2):
        assert manage(home)[job_id]["status"] == "running"
    assert tpus.api.count("DELETE", "/queuedResources/ms") == 0
    assert f"waiting for job(s) {job_id} to stop" in rows(home)["big-0"]["detail"], rows(home)
    jobtpu(home, "kill", str(job_id))
    passes_until_up(home, [])
    assert tpus.api.count("DELETE", "/queuedResources/ms") == 1 and tpus.api.count("POST", "/queuedResources") == 2

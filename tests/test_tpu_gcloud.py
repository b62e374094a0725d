"""TPU machines against a fake that answers like Google: a recreated node is the node that was
there, and every API failure (capacity, a wrong request, credentials, a lost answer, a failing page,
odd states, slow host keys) has its meaning. All through the CLI, with real sshd workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth._cloud_sdk import CLOUD_SDK_CLIENT_ID

from tests.helpers import JOBTPU, jobtpu, make_home, manage, status, submit, until, wait_for
from tests.tpufleet import PROJECT, ZONE, TpuFleet, tpu_home

FLAKY = 'if [ "$JOBTPU_ATTEMPT" = 0 ]; then sleep 300; fi; echo "attempt $JOBTPU_ATTEMPT resume=$JOBTPU_RESUME"'
MACHINE = "tpu-m"


def home_for(tmp_path: Path, tpus: TpuFleet, node: str, **spec: Any) -> Path:
    """A home with one tpu machine for `node` (machines.json as written by hand: no spot/preemptible
    unless given), a fast back-off, and a source folder."""
    entry = {"kind": "tpu", "node": node, "zone": ZONE, "accelerator": "v3-16", "user": tpus.nodes[node].user,
             "port": tpus.port(node), **spec}
    return tpu_home(tmp_path, tpus, {MACHINE: entry}, recreate_backoff=0.5)


def set_gcp(home: Path, **gcp: Any) -> None:
    doc = json.loads((home / "machines.json").read_text())
    doc["gcp"].update(gcp)
    (home / "machines.json").write_text(json.dumps(doc))


def machine(home: Path, name: str = MACHINE) -> dict[str, Any]:
    rows = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    return next(r for r in rows if r["name"] == name)


def preempt_while_running(home: Path, tpus: TpuFleet, job_id: int, node: str) -> None:
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run")
    tpus.api.preempt(ZONE, node)


def finished_after_one_preemption(home: Path, job_id: int, timeout: float = 120) -> None:
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=timeout, what="the job to end")
    assert (job["status"], job["attempt"]) == ("finished", 1), job
    assert "attempt 1 resume=1" in jobtpu(home, "tail", str(job_id)).stdout


# ---- a recreated node is the node that was there ----------------------------------------------------

GCLOUD_FIELDS: dict[str, Any] = {
    "serviceAccount": {"email": "trainer@test-project.iam.gserviceaccount.com",
                       "scope": ["https://www.googleapis.com/auth/cloud-platform"]},
    "metadata": {"ssh-keys": "alice:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx alice",
                 "startup-script": "#!/bin/bash\necho started > /tmp/started"},
    "tags": ["allow-ssh", "tpu-egress"],
    "networkConfig": {"network": "projects/test-project/global/networks/research",
                      "subnetwork": "projects/test-project/regions/europe-west4/subnetworks/research-ew4",
                      "enableExternalIps": True},
    "description": "made with gcloud",
}


def test_an_out_of_band_spot_node_comes_back_with_every_field(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-g", preemptible=False, spot=True, labels={"team": "nlp"}, **GCLOUD_FIELDS)
    home = home_for(tmp_path, tpus, "tpu-g", spot=True)
    job_id = submit(home, tmp_path / "src", FLAKY)
    row = machine(home)
    assert row["provisioning"] == "spot" and row["preemptible"] is True
    preempt_while_running(home, tpus, job_id, "tpu-g")
    finished_after_one_preemption(home, job_id)
    assert tpus.api.count("DELETE", "/nodes/tpu-g") == 1
    [sent] = tpus.api.create_bodies
    for key, value in GCLOUD_FIELDS.items():
        assert sent[key] == value, (key, sent.get(key))
    assert sent["labels"] == {"team": "nlp"}
    assert sent["schedulingConfig"].get("spot") is True and not sent["schedulingConfig"].get("preemptible")
    assert (sent["acceleratorType"], sent["runtimeVersion"]) == ("v3-16", "tpu-ubuntu2204-base")
    recreated = tpus.api.node(ZONE, "tpu-g") or {}
    assert recreated["metadata"] == GCLOUD_FIELDS["metadata"] and recreated["tags"] == GCLOUD_FIELDS["tags"]
    assert all("accessConfig" in e for e in recreated["networkEndpoints"])  # external IPs again


def test_a_node_made_by_topology_comes_back_with_that_topology(tmp_path: Path, tpus: TpuFleet) -> None:
    # `gcloud … create --type v4 --topology 2x2x1`: the API takes one of type and config, and only the
    # config says the shape of the slice.
    tpus.add_node("tpu-t", workers=1, accelerator="v4-8", acceleratorConfig={"type": "V4", "topology": "2x2x1"})
    home = home_for(tmp_path, tpus, "tpu-t", accelerator="v4-8", preemptible=True)
    manage(home)  # a pass records the node as it is
    jobtpu(home, "tpu", "reapply", MACHINE)
    wait_for(lambda: manage(home) is not None and tpus.api.create_bodies and machine(home)["state"] == "up",
             timeout=60, interval=0.3, what="the recreated node")
    [sent] = tpus.api.create_bodies
    assert sent["acceleratorConfig"] == {"type": "V4", "topology": "2x2x1"} and "acceleratorType" not in sent
    assert sent["runtimeVersion"] == "tpu-ubuntu2204-base"


def test_a_node_that_never_existed_gets_gcloud_defaults(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-n")
    home = home_for(tmp_path, tpus, "tpu-n", accelerator="v5litepod-16", preemptible=True,
                     node_spec={"tags": ["allow-ssh"], "networkConfig": {"network": "research"}})
    tpus.api.remove_node(ZONE, "tpu-n")  # machines.json names a node that is not there
    jobtpu(home, "tpu", "apply", MACHINE)
    [sent] = tpus.api.create_bodies
    assert sent["runtimeVersion"] == "v2-alpha-tpuv5-lite"  # follows the generation, as gcloud does
    assert sent["networkConfig"] == {"network": "research", "enableExternalIps": True}
    assert sent["tags"] == ["allow-ssh"] and sent["schedulingConfig"].get("preemptible") is True
    assert tpus.api.node(ZONE, "tpu-n") is not None


def test_an_accelerator_generation_jobtpu_does_not_know_needs_a_runtime_version(tmp_path: Path,
                                                                               tpus: TpuFleet) -> None:
    tpus.add_node("tpu-x")
    home = home_for(tmp_path, tpus, "tpu-x", accelerator="v9z-8")
    done = jobtpu(home, "machines", check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "runtime_version" in done.stderr and "v9z-8" in done.stderr


def test_a_node_without_a_usable_address_is_a_machine_error_not_a_launch(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-i", networkConfig={"enableExternalIps": False})
    home = home_for(tmp_path, tpus, "tpu-i", use_external_ip=True)
    job_id = submit(home, tmp_path / "src", "echo ran")
    for _ in range(2):
        assert manage(home)[job_id]["status"] == "queued"
    row = machine(home)
    assert row["state"] == "no address" and "external IP" in row["detail"]


# ---- every API failure has its meaning -------------------------------------------------------------

def test_a_429_on_create_backs_off_without_a_traceback(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-q")
    home = home_for(tmp_path, tpus, "tpu-q", preemptible=True)
    job_id = submit(home, tmp_path / "src", FLAKY)
    preempt_while_running(home, tpus, job_id, "tpu-q")
    tpus.api.quota_exceeded_next_creates(1, ZONE)
    seen = []

    def watch(job: dict[str, Any]) -> bool:
        row = machine(home)
        seen.append(row["state"] == "backoff" and "Quota limit" in (row["detail"] or ""))
        return job["status"] in ("finished", "failed")
    outputs: list[str] = []

    def one_pass() -> bool:
        outputs.append(jobtpu(home, "manage").stderr)
        return watch(status(home)[job_id])
    wait_for(one_pass, timeout=120, interval=0.3, what="the job to end")
    assert any(seen), "the 429 back-off was never visible in `jobtpu machines`"
    assert not any("Traceback" in out for out in outputs)
    assert tpus.api.count("POST", "/nodes") == 2
    assert "attempt 1 resume=1" in jobtpu(home, "tail", str(job_id)).stdout


def test_a_spot_reservation_not_found_is_capacity_not_a_wrong_request(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-v", preemptible=False, spot=True)
    home = home_for(tmp_path, tpus, "tpu-v", spot=True)
    job_id = submit(home, tmp_path / "src", FLAKY)
    preempt_while_running(home, tpus, job_id, "tpu-v")
    tpus.api.fail_next_creates(1, "NOT_FOUND")  # the operation ends with code 5 "Reservation not found"
    seen: list[str] = []

    def watch(job: dict[str, Any]) -> bool:
        row = machine(home)
        seen.append(f"{row['state']}: {row['detail']}")
        return job["status"] in ("finished", "failed")
    until(home, job_id, watch, timeout=120, what="the job to end")
    assert any(s.startswith("backoff") and "Reservation not found" in s for s in seen), seen
    assert not any(s.startswith("refused") for s in seen), seen
    finished_after_one_preemption(home, job_id)
    assert tpus.api.count("POST", "/nodes") == 2


def test_a_400_on_create_is_asked_once_until_machines_json_changes(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-b")
    home = home_for(tmp_path, tpus, "tpu-b", preemptible=True, runtime_version="v2-alpha-tpuv6e")
    job_id = submit(home, tmp_path / "src", FLAKY)
    preempt_while_running(home, tpus, job_id, "tpu-b")
    wait_for(lambda: manage(home) and machine(home)["state"] == "refused", timeout=60, what="the refusal")
    for _ in range(4):
        manage(home)
    assert tpus.api.count("POST", "/nodes") == 1
    row = machine(home)
    assert 'Invalid runtime version "v2-alpha-tpuv6e"' in row["detail"], row
    assert "http" not in row["detail"] and "?" not in row["detail"]  # no URL nor query string
    doc = json.loads((home / "machines.json").read_text())
    del doc["machines"][MACHINE]["runtime_version"]  # the fix: the generation's default
    (home / "machines.json").write_text(json.dumps(doc))
    finished_after_one_preemption(home, job_id)
    assert tpus.api.count("POST", "/nodes") == 2


def test_a_lost_create_answer_never_deletes_the_node_it_made(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-l")
    home = home_for(tmp_path, tpus, "tpu-l", preemptible=True)
    job_id = submit(home, tmp_path / "src", FLAKY)
    preempt_while_running(home, tpus, job_id, "tpu-l")
    # Google creates the node, and the answer is a 503.
    tpus.api.inject_error("POST", "nodeId=tpu-l", "UNAVAILABLE", 1, serve=True)
    finished_after_one_preemption(home, job_id)
    assert tpus.api.count("DELETE", "/nodes/tpu-l") == 1  # only the preempted one
    assert tpus.api.count("POST", "/nodes") == 1


def test_a_pass_killed_before_its_create_is_answered_never_deletes_the_node_it_made(tmp_path: Path,
                                                                                   tpus: TpuFleet) -> None:
    tpus.add_node("tpu-x")
    home = home_for(tmp_path, tpus, "tpu-x", preemptible=True)
    job_id = submit(home, tmp_path / "src", FLAKY)
    preempt_while_running(home, tpus, job_id, "tpu-x")
    # Google creates the node; the pass that asked is killed before the answer reaches it.
    release = tpus.api.stall_answers("POST", "nodeId=tpu-x")

    def pass_sending_the_create() -> subprocess.Popen[bytes] | None:
        manager = subprocess.Popen([*JOBTPU, "--home", str(home), "manage"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env={**os.environ, "JOBTPU_USER": "tester"})
        while manager.poll() is None:
            if tpus.api.count("POST", "/nodes") >= 1:
                return manager
            time.sleep(0.02)
        return None

    manager = wait_for(pass_sending_the_create, timeout=60, interval=0.2, what="a pass to send the create")
    manager.send_signal(signal.SIGKILL)
    manager.wait()
    release.set()
    finished_after_one_preemption(home, job_id)
    assert tpus.api.count("DELETE", "/nodes/tpu-x") == 1  # only the preempted one
    assert tpus.api.count("POST", "/nodes") == 1


def write_key_file(path: Path, key_id: str) -> None:
    """A service-account key file, as the console downloads it."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": key_id, "private_key": pem,
        "client_email": f"jobtpu@{PROJECT}.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token"}))


def test_refused_credentials_cost_one_line_and_a_local_job_still_runs(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-c")
    home = home_for(tmp_path, tpus, "tpu-c", preemptible=True)
    key = tmp_path / "key.json"
    write_key_file(key, "deleted-key-1")
    tpus.api.revoked_keys.add("deleted-key-1")
    set_gcp(home, credentials=str(key))
    doc = json.loads((home / "machines.json").read_text())
    doc["machines"]["local"] = {"kind": "local", "resources": {"slot": 2}}
    (home / "machines.json").write_text(json.dumps(doc))
    job_id = submit(home, tmp_path / "src", "sleep 1; echo local done", "--machine", "local")
    lines: list[list[str]] = []

    def pass_until_done() -> bool:
        done = jobtpu(home, "manage")
        lines.append([line for line in done.stderr.splitlines() if "credentials" in line])
        assert "Traceback" not in done.stderr, done.stderr
        return status(home)[job_id]["status"] in ("finished", "failed")
    wait_for(pass_until_done, timeout=60, interval=0.3, what="the local job to end")
    assert status(home)[job_id]["status"] == "finished"
    assert len(lines) >= 2 and all(len(found) == 1 for found in lines), lines
    assert "invalid authentication credentials" in lines[0][0] and "http" not in lines[0][0], lines[0][0]
    row = machine(home)
    assert row["state"] == "unknown" and "credentials" in row["detail"]
    assert tpus.api.list_calls() == 0  # refused before it was served


def test_a_refused_token_refresh_costs_one_line_and_a_local_job_still_runs(tmp_path: Path, tpus: TpuFleet) -> None:
    # `gcloud auth application-default login --impersonate-service-account` with a deleted source key:
    # the token endpoint refuses the source's grant, and google-auth raises RefreshError.
    tpus.add_node("tpu-r")
    home = home_for(tmp_path, tpus, "tpu-r", preemptible=True)
    source = tmp_path / "source.json"
    write_key_file(source, "deleted-key-2")
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({
        "type": "impersonated_service_account", "delegates": [],
        "service_account_impersonation_url": f"{tpus.api.url}/v1/projects/-/serviceAccounts/"
                                             f"trainer@{PROJECT}.iam.gserviceaccount.com:generateAccessToken",
        "source_credentials": {**json.loads(source.read_text()), "token_uri": f"{tpus.api.url}/token"}}))
    set_gcp(home, credentials=str(adc))
    doc = json.loads((home / "machines.json").read_text())
    doc["machines"]["local"] = {"kind": "local"}
    (home / "machines.json").write_text(json.dumps(doc))
    job_id = submit(home, tmp_path / "src", "echo local done", "--machine", "local")
    for _ in range(2):
        done = jobtpu(home, "manage")
        assert "Traceback" not in done.stderr, done.stderr
        [line] = [line for line in done.stderr.splitlines() if "credentials" in line]
        assert "invalid_grant: Invalid JWT Signature." in line and "adc.json" in line, line
    assert status(home)[job_id]["status"] == "finished"
    assert "credentials" in machine(home)["detail"] and tpus.api.list_calls() == 0


def test_a_failing_later_page_of_a_listing_is_one_api_failure(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-p1")
    tpus.add_node("tpu-p2")
    tpus.api.page_size = 1
    home = home_for(tmp_path, tpus, "tpu-p1")
    manage(home)
    tpus.api.inject_error("GET", "pageToken=1", "UNAVAILABLE", 1)
    done = jobtpu(home, "manage")
    assert "Traceback" not in done.stderr and "unknown" in done.stderr, done.stderr
    assert machine(home)["state"] == "unknown"
    manage(home)
    assert machine(home)["state"] in ("up", "setting up")


def test_odd_node_states_are_waited_on_and_say_so(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-s")
    home = home_for(tmp_path, tpus, "tpu-s", preemptible=True)
    manage(home)
    tpus.api.set_state(ZONE, "tpu-s", "UNKNOWN")
    manage(home)
    row = machine(home)
    assert row["state"] == "transient" and "UNKNOWN" in row["detail"] and "for 0 min" in row["detail"], row
    tpus.api.set_state(ZONE, "tpu-s", 42)  # an enum value newer than this client
    done = jobtpu(home, "manage")
    assert "Traceback" not in done.stderr
    row = machine(home)
    assert row["state"] == "transient" and "42" in row["detail"] and "does not know" in row["detail"], row
    state = json.loads((home / "state.json").read_text())
    state["machines"][MACHINE]["transient"]["since"] -= 3600  # an hour in that state
    (home / "state.json").write_text(json.dumps(state))
    manage(home)
    row = machine(home)
    assert row["state"] == "stuck" and "tpu reapply" in row["detail"], row
    assert tpus.api.count("DELETE", "/nodes/tpu-s") == 0  # slow is not a reason to delete


def test_host_keys_wait_for_every_worker_to_publish_one(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-k")
    home = home_for(tmp_path, tpus, "tpu-k", preemptible=True, host_key_policy="strict")
    tpus.unpublished["tpu-k"] = {1}
    job_id = submit(home, tmp_path / "src", "echo ran")
    manage(home)
    row = machine(home)
    assert row["state"] == "waiting for host keys" and "worker(s) 1" in row["detail"], row
    assert status(home)[job_id]["status"] == "queued"
    tpus.unpublished["tpu-k"] = set()
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), what="the job to end")
    assert job["status"] == "finished", job


# ---- zones ----------------------------------------------------------------------------------------

def test_a_zone_without_capacity_moves_the_node_to_the_next_zone(tmp_path: Path, tpus: TpuFleet) -> None:
    other = "us-central1-b"  # another region: the recorded subnetwork and data disks stay behind
    tpus.add_node("tpu-z", networkConfig={"network": "research", "enableExternalIps": True,
                                          "subnetwork": "projects/test-project/regions/europe-west4/subnetworks/ew4"},
                  dataDisks=[{"sourceDisk": "projects/test-project/zones/europe-west4-a/disks/data", "mode": "READ_ONLY"}])
    home = home_for(tmp_path, tpus, "tpu-z", preemptible=True, zone=[ZONE, other])
    job_id = submit(home, tmp_path / "src", FLAKY)
    preempt_while_running(home, tpus, job_id, "tpu-z")
    tpus.api.no_capacity_zones.add(ZONE)
    finished_after_one_preemption(home, job_id)
    row = machine(home)
    assert row["zone"] == other and f"moved from {ZONE} to {other}" in row["moved"], row
    assert tpus.api.node(other, "tpu-z") is not None and tpus.api.node(ZONE, "tpu-z") is None
    first, second, third = tpus.api.create_bodies
    assert first["networkConfig"]["subnetwork"].endswith("/ew4") and first["dataDisks"]
    assert third["networkConfig"] == {"network": "research", "enableExternalIps": True} and "dataDisks" not in third
    assert tpus.api.count("POST", f"/locations/{other}/nodes") == 1
    assert "us-central1-b" in jobtpu(home, "machines", env={"COLUMNS": "250"}).stdout


# ---- queued resources ----------------------------------------------------------------------------

def test_a_queued_resource_waits_runs_is_suspended_and_is_asked_for_again(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-qr", accelerator="v5litepod-16")
    tpus.api.remove_node(ZONE, "tpu-qr")  # nothing there yet: the queued resource will make it
    home = home_for(tmp_path, tpus, "tpu-qr", accelerator="v5litepod-16",
                     queued_resource={"tier": "spot", "valid_for": 7200})
    tpus.api.hold_queued(ZONE, "tpu-qr")
    job_id = submit(home, tmp_path / "src", FLAKY)
    states: list[str | None] = []

    def queued_state(job: dict[str, Any]) -> bool:
        row = machine(home)
        states.append(row["queued_resource"])
        return row["queued_resource"] == "WAITING_FOR_RESOURCES" and job["status"] == "queued"
    until(home, job_id, queued_state, what="the queued resource to wait")
    assert machine(home)["provisioning"] == "spot"
    tpus.api.hold_queued(ZONE, "tpu-qr", False)
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run on the provisioned node")
    assert machine(home)["queued_resource"] == "ACTIVE"
    tpus.api.preempt(ZONE, "tpu-qr")
    assert tpus.api.queued_state(ZONE, "tpu-qr") == "SUSPENDED"

    def watch(job: dict[str, Any]) -> bool:
        states.append(machine(home)["queued_resource"])
        return job["status"] in ("finished", "failed")
    job = until(home, job_id, watch, timeout=120, what="the job to end")
    assert (job["status"], job["attempt"]) == ("finished", 1), job
    assert "attempt 1 resume=1" in jobtpu(home, "tail", str(job_id)).stdout
    assert "SUSPENDED" in states or "DELETING" in states, states
    assert tpus.api.count("DELETE", "/queuedResources/tpu-qr") == 1  # the suspended one, before asking again
    assert tpus.api.count("POST", "/queuedResources") == 2
    assert tpus.api.count("POST", f"/locations/{ZONE}/nodes") == 0  # never a plain create
    first = tpus.api.create_bodies[0]
    assert first["runtimeVersion"] == "v2-alpha-tpuv5-lite" and "schedulingConfig" not in first


def test_a_queued_resource_that_expires_in_a_zone_without_capacity_is_asked_for_in_the_next(
        tmp_path: Path, tpus: TpuFleet) -> None:
    other = "europe-west4-b"
    tpus.add_node("tpu-qz", accelerator="v5litepod-16")
    tpus.api.remove_node(ZONE, "tpu-qz")
    tpus.api.no_capacity_zones.add(ZONE)  # a queued resource there waits until its valid_for ends
    home = home_for(tmp_path, tpus, "tpu-qz", accelerator="v5litepod-16", zone=[ZONE, other],
                     queued_resource={"tier": "spot", "valid_for": 2})
    job_id = submit(home, tmp_path / "src", "echo ran in $JOBTPU_MACHINE")
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the job to end")
    assert job["status"] == "finished", job
    row = machine(home)
    assert row["zone"] == other and f"moved from {ZONE} to {other}" in row["moved"], row
    assert tpus.api.count("POST", f"/locations/{ZONE}/queuedResources") == 1
    assert tpus.api.count("DELETE", f"/locations/{ZONE}/queuedResources/tpu-qz") == 1  # it held quota
    assert tpus.api.count("POST", f"/locations/{other}/queuedResources") == 1
    assert tpus.api.queued_state(other, "tpu-qz") == "ACTIVE" and tpus.api.queued_state(ZONE, "tpu-qz") is None


def test_a_queued_resource_with_several_zones_must_say_how_long_to_wait_in_one(tmp_path: Path) -> None:
    home = bare_home(tmp_path, {"zone": ["z-1", "z-2"], "queued_resource": {"tier": "spot"}})
    done = jobtpu(home, "machines", check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "queued_resource.valid_for" in done.stderr.splitlines()[0], done.stderr


# ---- machines.json and credentials without a fake ---------------------------------------------------

def bare_home(tmp_path: Path, tpu: dict[str, Any], **gcp: Any) -> Path:
    return make_home(tmp_path, {"local": {"kind": "local"},
                                "t": {"kind": "tpu", "node": "n", "zone": "z-1", "accelerator": "v3-8", **tpu}},
                     gcp={"project": "p", "api_endpoint": "http://127.0.0.1:9", **gcp})


def test_missing_adc_costs_each_pass_one_line_and_local_jobs_run(tmp_path: Path) -> None:
    home = bare_home(tmp_path, {}, credentials="default")
    src = tmp_path / "src"
    src.mkdir()
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no-such-adc.json")}
    job_id = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "echo ran", "--machine", "local").stdout)
    for _ in range(3):
        done = jobtpu(home, "manage", env=env)
        lines = [line for line in done.stderr.splitlines() if "credentials" in line]
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "no-such-adc.json" in lines[0] and "gcloud auth application-default login" in lines[0]
    assert status(home)[job_id]["status"] == "finished"


def test_a_wrong_node_spec_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    for spec, needle in (({"node_spec": {"networkConfig": {"enableExternalIPs": True}}}, "networkConfig.enableExternalIPs"),
                         ({"node_spec": {"tags": "allow-ssh"}}, "node_spec.tags"),
                         ({"queued_resource": {"tier": "cheap"}}, "queued_resource.tier"),
                         ({"zone": ["z-1", "z-1"]}, "distinct zones")):
        home = bare_home(tmp_path / needle.replace(" ", "_"), spec)
        before = (home / "machines.json").read_text()
        done = jobtpu(home, "manage", check=False)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert needle in done.stderr.splitlines()[0], done.stderr
        assert (home / "machines.json").read_text() == before and not (home / "state.json").exists()


def test_user_adc_without_a_quota_project_gives_no_warning(tmp_path: Path) -> None:
    home = bare_home(tmp_path, {}, credentials="default")
    gcloud = tmp_path / "gcloud-config"
    gcloud.mkdir()
    # As `gcloud auth application-default login` writes it: gcloud's own OAuth client, no quota project.
    (gcloud / "application_default_credentials.json").write_text(json.dumps({
        "type": "authorized_user", "client_id": CLOUD_SDK_CLIENT_ID, "client_secret": "s", "refresh_token": "r"}))
    # Nothing leaves this machine: the token refresh meets a proxy that refuses the connection.
    env = {"CLOUDSDK_CONFIG": str(gcloud), "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "GOOGLE_APPLICATION_CREDENTIALS": ""}
    done = jobtpu(home, "manage", env=env)
    assert "quota project" not in done.stderr and "Warning" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "credentials" in lines[0], done.stderr

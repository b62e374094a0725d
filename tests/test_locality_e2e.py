"""Where a preempted or hung job resumes, by locality (machines.json's `resume`,
docs/reference/machines-json.md §3.12), end to end: TPU nodes of the fake TPU API in several zones and
regions, whose workers are real sshd hosts; the job's log says where each attempt ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import jobtpu, submit, until
from tests.tpufleet import TpuFleet, tpu_home

# Attempt 0 waits silently (to be preempted, or stopped as a hang); attempt 1 too, printing as it
# goes when `ticks` (a live attempt under --stall); the next one ends at once.
WHERE = ('echo "attempt $JOBTPU_ATTEMPT node=$JOBTPU_NODE zone=$JOBTPU_ZONE args=$*"\n'
         'case "$JOBTPU_ATTEMPT" in 0) sleep 300;; 1) if [ -n "$TICKS" ]; then while :; do echo tick; sleep 0.5; done; fi;; esac\n')


def nodes(tpus: TpuFleet, zones: dict[str, str]) -> dict[str, Any]:
    """One-worker preemptible v2-8 nodes, one per name, in these zones: their machines.json entries."""
    for name, zone in zones.items():
        tpus.add_node(name, workers=1, accelerator="v2-8", zone=zone)
    return {name: {"kind": "tpu", "node": name, "zone": zone, "accelerator": "v2-8", "preemptible": True,
                   "user": tpus.nodes[name].user, "port": tpus.port(name)} for name, zone in zones.items()}


def start_on_home(tmp_path: Path, tpus: TpuFleet, entries: dict[str, Any], *extra: str) -> tuple[Path, int]:
    """A job running on `home`, the only machine machines.json had when it started."""
    home = tpu_home(tmp_path, tpus, {"home": entries["home"]}, recreate_backoff=0.5)
    (tmp_path / "src" / "where.sh").write_text(WHERE)
    job_id = submit(home, tmp_path / "src", "bash where.sh", *extra)
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run on home")
    return home, job_id


def machines_now(home: Path, entries: dict[str, Any], resume: dict[str, Any] | None) -> None:
    """machines.json as the team writes it next: every machine, in this order, and the policy."""
    doc = json.loads((home / "machines.json").read_text())
    doc["machines"] = entries
    if resume is not None:
        doc["resume"] = resume
    (home / "machines.json").write_text(json.dumps(doc))


def attempt_machines(job: dict[str, Any]) -> list[str]:
    return [a["machine"] for a in job["attempts"]]


def test_a_preempted_job_resumes_at_once_in_its_zone_over_another_region_listed_first(
        tmp_path: Path, tpus: TpuFleet) -> None:
    entries = nodes(tpus, {"far": "us-east1-d", "other": "europe-west4-b", "home": "europe-west4-a",
                           "near": "europe-west4-a"})
    home, job_id = start_on_home(tmp_path, tpus, entries, "--on-resume", "--from={zone}/{region}")
    machines_now(home, entries, {"order": ["zone", "region", "allowed"], "regions": ["us-east1"],
                                 "wait_for_own": False})
    tpus.api.preempt("europe-west4-a", "home")
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the job to end")
    assert (job["status"], attempt_machines(job)) == ("finished", ["home", "near"]), job
    assert [a["outcome"] for a in job["attempts"]] == ["preempted", "finished"]
    resumed = jobtpu(home, "tail", str(job_id), "--attempt", "1").stdout
    assert resumed == "attempt 1 node=near zone=europe-west4-a args=--from=europe-west4-a/europe-west4\n", resumed


def test_a_hung_job_stays_in_its_region_and_a_preempted_one_with_none_near_waits_for_its_own(
        tmp_path: Path, tpus: TpuFleet) -> None:
    entries = nodes(tpus, {"far": "us-east1-d", "home": "europe-west4-a"})
    home, job_id = start_on_home(tmp_path, tpus, entries, "--stall", "2s", "--env", "TICKS=1")
    machines_now(home, entries, None)  # no policy: never another region, though `far` is listed first
    job = until(home, job_id, lambda j: j["status"] == "running" and j["attempt"] == 1, timeout=120,
                what="the hung attempt to resume")
    assert attempt_machines(job) == ["home", "home"] and job["attempts"][0]["outcome"] == "hang", job
    machines_now(home, entries, {"order": ["zone", "region"], "wait_for_own": False})
    tpus.api.preempt("europe-west4-a", "home")

    def waits(j: dict[str, Any]) -> bool:
        return j["status"] == "queued" and "resumes in zone europe-west4-a, then region europe-west4 only" in (
            j.get("waiting") or "")

    until(home, job_id, waits, timeout=60, what="the job to wait for its own TPU")
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the job to end")
    assert (job["status"], attempt_machines(job)) == ("finished", ["home", "home", "home"]), job
    assert ("create", "home") in tpus.events and ("create", "far") not in tpus.events

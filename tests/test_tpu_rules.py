"""TPU failure classes and rules end to end: capacity back-off, GRPC resume in place, oom, the
recovery bound, rule pass, and a node stuck CREATING that never makes a pass wait."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from tests.helpers import JOBTPU, jobtpu, manage, status, submit, until, wait_for
from tests.tpufleet import ZONE, TpuFleet, tpu_home

FLAKY = 'if [ "$JOBTPU_ATTEMPT" = 0 ]; then {first}; fi; echo "attempt $JOBTPU_ATTEMPT resume=$JOBTPU_RESUME"'


def setup_home(tmp_path: Path, tpus: TpuFleet, **spec: Any) -> Path:
    tpus.add_node("tpu-r", workers=2, accelerator="v2-16", preemptible=True)
    return tpu_home(tmp_path, tpus, {"v2-16-p": tpus.machine_spec("tpu-r", **spec)}, recreate_backoff=0.5)


def running_then_preempt(home: Path, tpus: TpuFleet, job_id: int) -> None:
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run")
    tpus.api.preempt(ZONE, "tpu-r")


def test_capacity_errors_back_off_then_recreate_and_resume(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", FLAKY.format(first="sleep 300"))
    running_then_preempt(home, tpus, job_id)
    tpus.api.fail_next_creates(2)
    seen_backoff = []

    def watch(job: dict[str, Any]) -> bool:
        machine = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"][0]
        seen_backoff.append(machine["state"] == "backoff"
                            and "There is no more capacity in the zone" in (machine["detail"] or ""))
        return job["status"] in ("finished", "failed")

    job = until(home, job_id, watch, timeout=120, what="the job to end")
    assert (job["status"], job["attempt"]) == ("finished", 1), job
    assert any(seen_backoff), "the capacity back-off was never visible in `jobtpu machines`"
    assert tpus.api.count("POST", "/nodes") == 3  # two refused creates, then one that worked
    log = jobtpu(home, "tail", str(job_id)).stdout
    assert "attempt 1 resume=1" in log


def test_grpc_failure_resumes_on_the_same_node_without_recreating(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", FLAKY.format(first='echo "jax: GRPC error: Socket closed" >&2; exit 1'))
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), what="the job to end")
    assert (job["status"], job["attempt"]) == ("finished", 1), job
    assert [a["outcome"] for a in job["attempts"]] == ["grpc", "finished"]
    assert tpus.api.count("DELETE", "/nodes") == 0 and tpus.api.count("POST", "/nodes") == 0


def test_a_grpc_error_in_any_case_is_resumed_by_the_default_rule(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", FLAKY.format(first='echo "jax.errors.JaxRuntimeError: GRPC Error" >&2; exit 1'))
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), what="the job to end")
    assert (job["status"], job["attempt"], job["rule"]) == ("finished", 1, None), job
    assert [a["outcome"] for a in job["attempts"]] == ["grpc", "finished"]


def test_a_hang_under_reapply_stops_the_workers_recreates_the_node_and_resumes(tmp_path: Path,
                                                                               tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", FLAKY.format(first="sleep 300"), "--rule", "reapply", "--stall", "2s")
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the job to end")
    assert (job["status"], job["attempt"]) == ("finished", 1), job
    assert [a["outcome"] for a in job["attempts"]] == ["hang", "finished"]
    assert tpus.api.count("DELETE", "/nodes/tpu-r") == 1 and tpus.api.count("POST", "/nodes") == 1
    assert "attempt 1 resume=1" in jobtpu(home, "tail", str(job_id)).stdout


def test_oom_fails_and_is_never_retried(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", 'echo "RESOURCE_EXHAUSTED: Out of memory while trying to allocate"; exit 1')
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), what="the job to end")
    assert (job["status"], job["reason"], job["exit_code"], job["attempt"]) == ("failed", "oom", 1, 0)
    manage(home)
    assert status(home)[job_id]["attempt"] == 0


def test_max_preemptions_bounds_the_loop_and_its_end_says_so(tmp_path: Path, tpus: TpuFleet) -> None:
    """Preemptions spend their own budget (docs/reference/requests-and-rules.md §7.3): never a retry nor an
    infrastructure recovery (--max-recoveries 0 would have failed the first one when every cause counted
    as one); once spent, the job fails with its reason, and its job_ended event says which budget ran out."""
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", "sleep 300", "--max-preemptions", "1", "--max-recoveries", "0",
                    "--retries", "2")
    running_then_preempt(home, tpus, job_id)
    job = until(home, job_id, lambda j: j["status"] == "running" and j["attempt"] == 1, timeout=120,
                what="the first recovery")
    assert (job["preemptions"], job.get("recoveries", 0), job.get("retried", 0)) == (1, 0, 0)
    assert "1 (1 pre, 0/2 retry)" in jobtpu(home, "status", str(job_id)).stdout
    tpus.api.preempt(ZONE, "tpu-r")
    job = until(home, job_id, lambda j: j["status"] == "failed", what="the job to fail")
    assert (job["reason"], job["attempt"], job["preemptions"]) == ("preempted", 1, 1)
    ended = [json.loads(line) for line in jobtpu(home, "events", "--job", str(job_id), "--json").stdout.splitlines()]
    ended = [e for e in ended if e["kind"] == "job_ended"]
    assert [e["detail"].get("spent") for e in ended] == ["1 preemption used, the most --max-preemptions allows"]
    said = jobtpu(home, "events", "--job", str(job_id)).stdout
    assert "failed (preempted): 1 preemption used, the most --max-preemptions allows" in said


def test_a_silent_attempt_on_a_preemptible_tpu_is_a_hang_by_default(tmp_path: Path, tpus: TpuFleet,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """No --stall given: a preemptible TPU watches for one all the same (timing's stall_default,
    shortened here), and the default rule pre resumes the job."""
    monkeypatch.setenv(*timing.env(stall_default=2).popitem())
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", FLAKY.format(first="sleep 300"))
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the job to end")
    assert (job["status"], job["attempt"], job.get("stall")) == ("finished", 1, None), job
    assert [a["outcome"] for a in job["attempts"]] == ["hang", "finished"]
    assert job["recoveries"] == 1 and "attempt 1 resume=1" in jobtpu(home, "tail", str(job_id)).stdout


SHOW = ('echo "attempt $JOBTPU_ATTEMPT worker $JOBTPU_WORKER node=$JOBTPU_NODE zone=$JOBTPU_ZONE '
        'region=$JOBTPU_REGION acc=$JOBTPU_ACCELERATOR hosts=$JOBTPU_HOSTS coord=$JOBTPU_COORDINATOR args=$*"\n'
        'if [ "$JOBTPU_ATTEMPT" = 0 ]; then sleep 300; fi\n')


def test_a_recovered_attempt_gets_the_on_resume_arguments_and_knows_where_it_runs(tmp_path: Path,
                                                                                 tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    (tmp_path / "src" / "show.sh").write_text(SHOW)
    job_id = submit(home, tmp_path / "src", "bash show.sh", "--log-stage",
                    "--on-resume", "--config.load_from=gs://ckpt-{region}/run{job} --resumes={attempt}")
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run")
    def printed() -> bool:
        manage(home)
        return all("attempt 0" in jobtpu(home, "tail", str(job_id), "--worker", str(w), check=False).stdout
                   for w in (0, 1))
    wait_for(printed, what="both workers of attempt 0 to print")
    tpus.api.preempt(ZONE, "tpu-r")
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the job to end")
    assert [a["outcome"] for a in job["attempts"]] == ["preempted", "finished"], job
    hosts = ",".join(h.addr for h in tpus.nodes["tpu-r"].hosts)
    where = (f"node=tpu-r zone={ZONE} region=europe-west4 acc=v2-16 hosts={hosts} "
             f"coord={tpus.nodes['tpu-r'].hosts[0].addr}:")
    logs = {(a, w): jobtpu(home, "tail", str(job_id), "--attempt", str(a), "--worker", str(w)).stdout
            for a in (0, 1) for w in (0, 1)}
    for (attempt, worker), text in logs.items():
        assert text.startswith(f"attempt {attempt} worker {worker} {where}"), text
    assert logs[0, 0].endswith(" args=--config.stage=0\n")  # the first attempt: no --on-resume words
    resumed = f" args=--config.stage=1 --config.load_from=gs://ckpt-europe-west4/run{job_id} --resumes=1\n"
    assert logs[1, 0].endswith(resumed) and logs[1, 1].endswith(resumed)
    coordinators = {text.split("coord=")[1].split()[0] for text in logs.values()}
    assert len(coordinators) == 2  # one per attempt, the same on both workers


def test_rule_pass_marks_a_preempted_job_failed(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", "sleep 300", "--rule", "pass")
    running_then_preempt(home, tpus, job_id)
    job = until(home, job_id, lambda j: j["status"] == "failed", what="the job to fail")
    assert (job["reason"], job["attempt"]) == ("preempted", 0)
    assert tpus.api.count("DELETE", "/nodes") == 0  # nobody asked for the node back


def test_a_node_stuck_creating_never_makes_a_pass_wait(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", "sleep 300")
    running_then_preempt(home, tpus, job_id)
    tpus.api.hold_creating(ZONE, "tpu-r")
    until(home, job_id, lambda j: j["status"] == "queued", what="the job to be queued again")
    def creating() -> bool:
        manage(home)
        return (tpus.api.node(ZONE, "tpu-r") or {}).get("state") == "CREATING"
    wait_for(creating, timeout=30, what="the node to be CREATING")
    for _ in range(5):  # each pass returns while the node stays CREATING (held: it would never be READY)
        jobtpu(home, "manage")
        assert (tpus.api.node(ZONE, "tpu-r") or {}).get("state") == "CREATING"
    assert status(home)[job_id]["status"] == "queued"
    machine = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"][0]
    assert machine["state"] == "recreating"


def test_strict_host_keys_come_from_the_tpu_api_and_follow_recreation(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus, host_key_policy="strict")
    manage(home)  # reads the node and the host keys it publishes; no worker contacted yet
    assert not (home / "known_hosts").exists() or not (home / "known_hosts").read_text().strip()
    checked = jobtpu(home, "doctor", "v2-16-p", check=False)  # trusts the published keys too
    assert checked.returncode == 0 and "reachable, logged in" in checked.stderr, checked.stderr
    job_id = submit(home, tmp_path / "src", FLAKY.format(first="sleep 300"))
    running_then_preempt(home, tpus, job_id)
    job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), timeout=120, what="the job to end")
    assert (job["status"], job["attempt"]) == ("finished", 1), job
    known = (home / "known_hosts").read_text()
    for host in tpus.nodes["tpu-r"].hosts:  # the recreated workers' new keys, as the API published them
        assert host.known_hosts_line() in known


@pytest.mark.alone_on_host_tmp  # another TPU test's launch would remove the planted lock file
def test_doctor_finds_and_fixes_a_stale_tpu_lock_file(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    manage(home)  # learns the workers' addresses and runs setup
    # A crashed run left the lock file behind on worker 0 (the workers share /tmp here).
    lock = Path("/tmp/libtpu_lockfile")
    lock.write_text("")
    owner = pwd.getpwnam(tpus.nodes["tpu-r"].user)
    os.chown(lock, owner.pw_uid, owner.pw_gid)  # left by the workers' user, as a crashed job would
    try:
        sick = jobtpu(home, "doctor", "v2-16-p", check=False)
        assert sick.returncode == 1 and "libtpu_lockfile is left over" in sick.stderr
        fixed = jobtpu(home, "doctor", "v2-16-p", "--fix", check=False)
        assert not lock.exists()
        assert jobtpu(home, "doctor", "v2-16-p", check=False).returncode == 0, fixed.stderr
    finally:
        lock.unlink(missing_ok=True)


def test_a_launch_clears_a_stale_holder_of_the_tpu_device(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    device = Path("/dev/accel7")  # stands in for a TPU chip: a file the holder keeps open
    assert not device.exists(), "a real /dev/accel7 on a test machine: refusing to touch it"
    device.write_text("")
    device.chmod(0o666)
    owner = pwd.getpwnam(tpus.nodes["tpu-r"].user)
    try:
        with open(device) as held:
            stale = subprocess.Popen(["sleep", "300"], stdin=held, user=owner.pw_uid, group=owner.pw_gid)
        assert "holds the TPU device" in jobtpu(home, "doctor", "v2-16-p", check=False).stderr
        job_id = submit(home, tmp_path / "src", "echo ran")
        job = until(home, job_id, lambda j: j["status"] in ("finished", "failed"), what="the job to end")
        assert job["status"] == "finished"
        assert stale.wait(timeout=10) is not None  # the launch stopped the stale holder first
    finally:
        device.unlink(missing_ok=True)
        with contextlib.suppress(ProcessLookupError):
            stale.kill()


def test_tpu_commands_and_machines_show_the_node(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    described = json.loads(jobtpu(home, "tpu", "describe", "v2-16-p", "--json").stdout)
    assert (described["tpu_state"], described["accelerator"], len(described["addresses"])) == ("READY", "v2-16", 2)
    tpus.api.set_state(ZONE, "tpu-r", "READY", health="UNHEALTHY_MAINTENANCE", health_description="host maintenance")
    manage(home)
    table = jobtpu(home, "machines", env={"COLUMNS": "250"}).stdout
    assert "UNHEALTHY_MAINTENANCE" in table and "host maintenance" in table
    assert "READY" in jobtpu(home, "tpu", "status", "v2-16-p").stdout
    # apply refuses an existing node; delete then apply recreate it through the API, across passes.
    assert "already exists" in jobtpu(home, "tpu", "apply", "v2-16-p", check=False).stderr
    jobtpu(home, "tpu", "delete", "v2-16-p")
    wait_for(lambda: manage(home) is not None and tpus.api.node(ZONE, "tpu-r") is None, timeout=30,
             what="the node to be deleted")
    jobtpu(home, "tpu", "apply", "v2-16-p")
    wait_for(lambda: manage(home) is not None and json.loads(jobtpu(home, "machines", "--json").stdout)
             ["machines"][0]["state"] == "up", timeout=60, what="the node to be up again")
    assert tpus.api.count("DELETE", "/nodes/tpu-r") == 1 and tpus.api.count("POST", "/nodes") == 1
    # reapply refuses while a job runs there, with the command that frees it.
    job_id = submit(home, tmp_path / "src", "sleep 300")
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run")
    refused = jobtpu(home, "tpu", "reapply", "v2-16-p", check=False)
    assert refused.returncode == 1 and f"jobtpu kill {job_id}" in refused.stderr
    assert "unknown machine" in jobtpu(home, "tpu", "status", "nope", check=False).stderr


def test_tpu_delete_saves_its_intent_before_it_calls_the_api(tmp_path: Path, tpus: TpuFleet) -> None:
    """The record says deleting before the API is asked: `jobtpu tpu delete` killed while its delete is
    under way leaves that on disk, and one whose call failed leaves the delete to the next pass."""
    for node in ("tpu-r", "tpu-s"):
        tpus.add_node(node, workers=1, accelerator="v2-8")
    home = tpu_home(tmp_path, tpus, {"v2-8-r": tpus.machine_spec("tpu-r"), "v2-8-s": tpus.machine_spec("tpu-s")})
    manage(home)
    release = tpus.api.stall_answers("DELETE", "/nodes/tpu-r")
    deleting = subprocess.Popen([*JOBTPU, "--home", str(home), "tpu", "delete", "v2-8-r"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "JOBTPU_USER": "tester"})
    wait_for(lambda: tpus.api.count("DELETE", "/nodes/tpu-r") >= 1, timeout=60, what="the delete to be sent")
    deleting.send_signal(signal.SIGKILL)
    deleting.wait()
    release.set()
    record = json.loads((home / "state.json").read_text())["machines"]["v2-8-r"]
    assert (record["state"], record["steps"]) == ("deleting", ["delete"])
    # The delete call fails: the record still says deleting, and the next pass sends it again.
    tpus.api.inject_error("DELETE", "/nodes/tpu-s", "UNAVAILABLE")
    assert jobtpu(home, "tpu", "delete", "v2-8-s", check=False).returncode != 0
    assert json.loads((home / "state.json").read_text())["machines"]["v2-8-s"]["steps"] == ["delete"]
    wait_for(lambda: manage(home) is not None and tpus.api.node(ZONE, "tpu-s") is None, timeout=30,
             what="the pass to carry out the saved delete")
    assert tpus.api.count("DELETE", "/nodes/tpu-s") == 2


def test_dry_run_never_touches_the_tpu_api_or_the_logs(tmp_path: Path, tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus)
    job_id = submit(home, tmp_path / "src", "echo out; sleep 300")
    until(home, job_id, lambda j: j["status"] == "running" and j["last_line"] == "out", what="the job to run")
    tpus.api.preempt(ZONE, "tpu-r")
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    calls = len(tpus.api.requests)
    out = jobtpu(home, "manage", "--dry-run").stdout
    assert f"job {job_id}: preempted" in out and "would recreate v2-16-p" in out
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and not p.name.endswith(".lock")} == before
    assert not [r for r in tpus.api.requests[calls:] if r[0] in ("POST", "DELETE")]


def test_an_unreachable_tpu_api_is_said_in_one_short_line_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "machines.json").write_text(json.dumps({
        "gcp": {"project": "p", "api_endpoint": "http://127.0.0.1:9", "credentials": "anonymous"},
        "machines": {"t": {"kind": "tpu", "node": "n", "zone": "z-1", "accelerator": "v3-8"}}}))
    reason = "TPU API list nodes in z-1: 127.0.0.1 refused the connection"
    first = jobtpu(home, "manage")
    assert first.stderr == f"t: unknown ({reason})\n"
    assert jobtpu(home, "manage").stderr == ""  # nothing changed: a pass from cron stays quiet
    machine = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"][0]
    assert (machine["state"], machine["detail"]) == ("unknown", reason)


def test_tpu_setup_reruns_a_failed_setup_once_fixed_and_asks_for_force_under_a_job(tmp_path: Path,
                                                                                  tpus: TpuFleet) -> None:
    home = setup_home(tmp_path, tpus, setup=['test -e ~/fixed || { echo "no ~/fixed yet" >&2; exit 3; }',
                                             'echo ready'])
    state = lambda: json.loads(jobtpu(home, "machines", "--json").stdout)["machines"][0]  # noqa: E731
    wait_for(lambda: manage(home) is not None and state()["state"] == "setup failed", what="the setup to fail")

    failed = jobtpu(home, "tpu", "setup", "v2-16-p", check=False)
    assert failed.returncode == 1, failed
    assert failed.stdout.splitlines() == [
        "[0] no ~/fixed yet", "[1] no ~/fixed yet",
        "v2-16-p: setup failed on worker 0 (and 1 more): a setup command exited 3; fix it and run "
        "`jobtpu tpu setup v2-16-p` again"]

    (tpus.nodes["tpu-r"].home / "fixed").touch()
    done = jobtpu(home, "tpu", "setup", "tpu-r")  # the node's name works as everywhere
    assert done.stdout.splitlines() == ["[0] ready", "[1] ready", "v2-16-p: setup done on 2 workers"]
    assert (state()["state"], state()["detail"]) == ("up", "ready (setup run by `jobtpu tpu setup`)")

    job_id = submit(home, tmp_path / "src", "sleep 300")
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run")
    refused = jobtpu(home, "tpu", "setup", "v2-16-p", check=False)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.splitlines()[0] == f"jobtpu: error: v2-16-p runs job {job_id}: its setup would run under it"
    forced = jobtpu(home, "tpu", "setup", "v2-16-p", "--force")
    assert forced.stdout.splitlines()[-1] == "v2-16-p: setup done on 2 workers"
    assert status(home)[job_id]["status"] == "running"


def test_tpu_restart_stops_and_starts_a_single_host_node_and_sends_v3_to_reapply(tmp_path: Path,
                                                                                 tpus: TpuFleet) -> None:
    node = tpus.add_node("tpu-s", workers=1, accelerator="v4-8", preemptible=False)
    tpus.add_node("tpu-r", workers=2, accelerator="v3-16", preemptible=True)
    home = tpu_home(tmp_path, tpus, {"v4": tpus.machine_spec("tpu-s"), "v3": tpus.machine_spec("tpu-r")})
    (node.home / "kept").write_text("on the disk")
    job_id = submit(home, tmp_path / "src", "sleep 300", "--machine", "v4")
    until(home, job_id, lambda j: j["status"] == "running", what="the job to run")
    busy = jobtpu(home, "tpu", "restart", "v4", check=False)
    assert busy.stderr.splitlines()[0] == f"jobtpu: error: v4 runs job {job_id}: a restart would kill it"
    jobtpu(home, "kill", str(job_id))

    done = jobtpu(home, "tpu", "restart", "v4", timeout=120)
    assert done.stdout.splitlines() == [
        "v4: stopping node tpu-s …", "v4: starting node tpu-s …",
        "v4: node tpu-s restarted (READY); its disk was kept, so setup was not run again "
        "(`jobtpu tpu setup v4` reruns it)"]
    assert [e for e in tpus.events if e[1] == "tpu-s"] == [("stop", "tpu-s"), ("start", "tpu-s")]
    assert tpus.api.count("POST", "/nodes/tpu-s:stop") == 1 and tpus.api.count("POST", "/nodes/tpu-s:start") == 1
    again = submit(home, tmp_path / "src", "cat ~/kept", "--machine", "v4")
    assert until(home, again, lambda j: j["status"] in ("finished", "failed"), what="the job after")["status"] == "finished"
    assert jobtpu(home, "tail", str(again)).stdout == "on the disk"

    refused = jobtpu(home, "tpu", "restart", "v3", check=False)
    assert (refused.returncode, refused.stderr.splitlines()) == (1, [
        "jobtpu: error: v3: TPU VMs of type v3-16 cannot be stopped (Google stops v4 and newer only)",
        "hint: `jobtpu tpu reapply v3` deletes and recreates the node instead"])
    assert tpus.api.count("POST", "/nodes/tpu-r:stop") == 0

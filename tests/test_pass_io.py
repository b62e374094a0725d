"""How often a pass touches state.json, counted from the system calls of the real CLI (strace): one
read, and at most two writes (its intents, then its result); a quiet pass writes once (its result:
when it ran, the jobs' last sign of life). And what
the next pass does with intents a dead pass saved but never carried out."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import JOBTPU, jobtpu, make_home, status, submit


def state_io(home: Path, *args: str) -> tuple[int, int]:
    """Run one command under strace: (reads, writes) of the home's state.json."""
    trace = home.parent / "trace.txt"
    subprocess.run(["strace", "-f", "--detach-on=execve", "-qq", "-e", "trace=openat,rename,renameat,renameat2", "-o", str(trace),
                    *JOBTPU, "--home", str(home), *args], check=True, capture_output=True, timeout=120,
                   env={**os.environ, "JOBTPU_USER": "tester"})
    text = trace.read_text()
    path = re.escape(str(home / "state.json"))
    # By path, or by name from the home's folder descriptor (safefs opens every home file that way).
    reads = len(re.findall(rf'openat\(AT_FDCWD, "{path}", O_RDONLY', text)) + \
        len(re.findall(r'openat\(\d+, "state\.json", O_RDONLY', text))
    writes = len(re.findall(rf'rename(?:at2?)?\([^\n]*, "{path}"', text))
    return reads, writes


def test_a_pass_reads_state_once_and_writes_it_at_most_twice(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "job.sh").write_text("sleep 600\n")
    ids = [submit(home, src, "bash job.sh") for _ in range(2)]
    assert state_io(home, "manage") == (1, 2)  # intents (launching), then the result (running)
    assert {status(home)[i]["status"] for i in ids} == {"running"}
    reads, writes = state_io(home, "manage")  # the jobs' first probe records their log size
    assert reads == 1 and writes <= 1
    # A quiet pass still saves its result once: when it ran and how long it took (`last_pass`, which
    # status and machines use to warn of a stale home), and the running jobs' last sign of life.
    assert state_io(home, "manage") == (1, 1)
    assert state_io(home, "kill", *map(str, ids))[1] <= 2
    assert {status(home)[i]["status"] for i in ids} == {"killed"}


@pytest.mark.fast
def test_old_host_keys_a_dead_pass_meant_to_forget_are_forgotten_by_the_next(tmp_path: Path) -> None:
    """A pass saves a recreated node's steps (forget its old host keys, set it up) with the new
    incarnation, then dies before carrying them out: the next pass, seeing the incarnation already
    recorded, must still forget the keys, or the new node's own keys would be refused."""
    import paramiko

    from tests.fake_tpu import FakeTpuApi
    from tests.tpufleet import PROJECT, ZONE

    with FakeTpuApi(ready_after=0) as api:
        api.add_node(PROJECT, ZONE, "node-t", accelerator_type="v3-8")
        home = make_home(tmp_path, {"t": {"kind": "tpu", "node": "node-t", "zone": ZONE, "accelerator": "v3-8"}},
                         gcp={"project": PROJECT, "api_endpoint": api.url, "credentials": "anonymous"})
        jobtpu(home, "manage")
        state = json.loads((home / "state.json").read_text())
        record = state["machines"]["t"]
        assert record["state"] == "up" and "steps" not in record, record
        record["steps"] = ["forget-keys"]  # as the dead pass left it
        (home / "state.json").write_text(json.dumps(state))
        old_keys = [f"{addr} ssh-rsa {paramiko.RSAKey.generate(1024).get_base64()}" for addr in record["addresses"]]
        (home / "known_hosts").write_text("\n".join(old_keys) + "\n")
        jobtpu(home, "manage")
    assert (home / "known_hosts").read_text().strip() == ""
    assert "steps" not in json.loads((home / "state.json").read_text())["machines"]["t"]


def test_observing_writes_nothing_and_the_pulled_log_is_kept_by_its_own_step(tmp_path: Path) -> None:
    """Observe only gathers (docs/design.md §1): the state it read is unchanged and the new log bytes
    its probe brought are not in the home until `bring_logs_home` keeps them."""
    from jobtpu.decide.observation import Observation
    from jobtpu.home.layout import Home
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.store import Store, encode
    from jobtpu.passes.context import Pass
    from jobtpu.passes.observe import bring_logs_home, observe
    from tests.helpers import wait_for

    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    job = submit(home, src, "echo seen-by-the-probe; exec sleep 600")
    jobtpu(home, "manage")
    log = home / "logs" / str(job) / "0.0.log"
    try:
        state, snapshot = Store(Home(home)).read()
        p = Pass(Home(home), load_fleet(Home(home)), state, snapshot)
        before = encode(p.state)

        def observed_the_first_line() -> Observation | None:
            seen = observe(p)
            pulled = any(ws.log_bytes for view in seen.machines.values() for ws in view.workers.values())
            return seen if pulled else None

        seen = wait_for(observed_the_first_line, timeout=30, what="the probe to bring the job's first line")
        assert encode(p.state) == before
        assert not log.exists() or b"seen-by-the-probe" not in log.read_bytes()
        bring_logs_home(p, seen)
        assert b"seen-by-the-probe" in log.read_bytes()
    finally:
        jobtpu(home, "kill", str(job))

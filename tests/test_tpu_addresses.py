"""A TPU machine whose workers' internal and external addresses differ, end to end: jobtpu reaches the
workers over SSH at their external addresses (machines.json `use_external_ip`), while the workers
reach each other, for the snapshot's peer copy (docs/design.md §4.1) and the job's coordinator
(docs/reference/job-environment.md §8.2), at their internal ones. The real google-cloud-tpu client
against the fake TPU API; each worker a real sshd on its external address only, with a disk of its own
(tests/podfleet.py), so a snapshot that did not arrive on a worker is missing there and a peer that
found nothing to fetch from would get the home's copy, which the counted uploads show."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from jobtpu.passes import peercopy
from tests.helpers import run, run_pass, status, submit, wait_for, write_tree
from tests.podfleet import RsyncCounter
from tests.tpufleet import TpuFleet, write_machines

WORKERS = 4  # a v3-32
# Each worker says where its peers are, then lists its job folder's files with their digests.
SHOW = ('echo "hosts=$JOBTPU_HOSTS coord=$JOBTPU_COORDINATOR"; '
        "find . -type f ! -name tree.txt | LC_ALL=C sort | xargs sha256sum > tree.txt")


class Calls:
    """What the pass asked the workers to serve and fetch: the bind address and the URLs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.binds: list[str] = []
        self.urls: list[str] = []
        serve, fetch = peercopy.peer_serve_script, peercopy.peer_fetch_script

        def spy_serve(root: str, archive: str, bind: str, serve_id: str, token: str, peers: int) -> str:
            self.binds.append(bind)
            return serve(root, archive, bind, serve_id, token, peers)

        def spy_fetch(url: str, token: str, spec: Any) -> str:
            self.urls.append(url)
            return fetch(url, token, spec)
        monkeypatch.setattr(peercopy, "peer_serve_script", spy_serve)
        monkeypatch.setattr(peercopy, "peer_fetch_script", spy_fetch)


def _count_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RsyncCounter:
    """The pass runs here: the counting rsync goes first on this process's PATH."""
    counter = RsyncCounter(tmp_path)
    monkeypatch.setenv("PATH", counter.path)
    return counter


def _expected(src: Path) -> str:
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    return "".join(f"{hashlib.sha256((src / f).read_bytes()).hexdigest()}  ./{f}\n" for f in files)


def test_workers_reached_at_external_addresses_share_the_snapshot_and_coordinator_internally(
        tpu_pods: TpuFleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tpus = tpu_pods
    node = tpus.add_node("tpu-x", workers=WORKERS, accelerator="v3-32", own_network=True, own_disks=True)
    internal = [tpus.internal_address("tpu-x", w) for w in range(WORKERS)]
    external = [h.addr for h in node.hosts]
    assert not set(internal) & set(external)
    home = tmp_path / "home"
    write_machines(home, tpus, {"pod": tpus.machine_spec("tpu-x", use_external_ip=True,
                                                         runtime_version="tpu-ubuntu2204-base")})
    src = write_tree(tmp_path / "src", {"train.py": "print('hi')\n", "data/blob.bin": os.urandom(200_000)})
    calls, spy = _count_uploads(tmp_path, monkeypatch), Calls(monkeypatch)
    monkeypatch.setenv(*timing.env(peer_copy_wait=60).popitem())
    job = submit(home, src, SHOW, "--req", "v3-32")
    archive = status(home)[job]["archive"]

    said: list[str] = []

    def ended() -> dict[str, Any] | None:
        said.append(run_pass(home))
        record = status(home)[job]
        return record if record["status"] in ("finished", "failed") else None
    record = wait_for(ended, timeout=60, interval=0.2, what="the job to end")
    assert record["status"] == "finished", (record, said)

    # One upload from the home; the others fetched it from worker 0's server on its internal address
    # (sshd listens on the external one only, so nothing else answers there).
    assert calls.pushes() == [archive]
    assert "could not fetch" not in "".join(said), said
    assert spy.binds == [internal[0]]
    assert len(spy.urls) == WORKERS - 1 and all(u.startswith(f"http://{internal[0]}:") for u in spy.urls), spy.urls
    # Every worker ran the job from the same tree, on its own disk.
    trees = {w: (tpus.disk("tpu-x", w) / "jobtpu" / "jobs" / str(job) / "tree.txt").read_text() for w in range(WORKERS)}
    assert set(trees.values()) == {_expected(src)}, trees
    # The job's peers and coordinator are on the internal network, whatever address SSH uses.
    lines = {run(home, "tail", str(job), "--worker", str(w), in_process=True)[0] for w in range(WORKERS)}
    assert len(lines) == 1, lines
    line = lines.pop()
    assert line.startswith(f"hosts={','.join(internal)} coord={internal[0]}:"), line

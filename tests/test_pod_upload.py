"""One upload per machine (docs/design.md §4.1): a machine whose workers each have a disk of their own
gets the snapshot from the home once; its other workers fetch it from that worker, check it and only
then unpack it, and fall back to the home's copy (saying so) when the fetch fails. Real sshd per worker,
each in a mount namespace of its own (tests/podfleet.py), real rsync: the home's uploads are counted
by an rsync first on the pass's PATH that notes each call and runs the real one."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import tarfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from jobtpu.passes import peercopy
from tests.helpers import jobtpu, run_pass, status, submit, wait_for, write_tree
from tests.podfleet import PodFleet, RsyncCounter
from tests.sshfleet import FleetMachine

NOWHERE = "192.0.2.1"  # an address no worker has (TEST-NET-1): a server cannot listen there
# Each worker lists its job folder's files with their digests, in a file on its own disk.
LISTING = "find . -type f ! -name tree.txt | LC_ALL=C sort | xargs sha256sum > tree.txt"


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[PodFleet]:
    fleet = PodFleet(tmp_path / "podfleet")
    try:
        yield fleet
    finally:
        fleet.close()


class Home:
    """A home whose one machine is the pod, and whose passes count the rsync pushes they make."""

    def __init__(self, tmp_path: Path, fleet: PodFleet, pod: FleetMachine, **extra: Any) -> None:
        self.root, self.fleet, self.pod = tmp_path / "home", fleet, pod
        self.root.mkdir()
        spec = {"kind": "ssh", "hosts": [h.address() for h in pod.hosts], "user": pod.user,
                "identity_file": str(fleet.identity), "connect_timeout": 5, **extra}
        (self.root / "machines.json").write_text(json.dumps({"machines": {"pod": spec}}))
        self.rsync = RsyncCounter(tmp_path)
        self.env = {"PATH": self.rsync.path, **timing.env(peer_copy_wait=60)}

    def manage(self) -> str:
        return jobtpu(self.root, "manage", env=self.env, timeout=90).stderr

    def pushes(self) -> list[str]:
        return self.rsync.pushes()

    def until_ended(self, job: int) -> tuple[dict[str, Any], str]:
        """Passes until the job ended; its record and what the passes said."""
        said: list[str] = []

        def ended() -> dict[str, Any] | None:
            said.append(self.manage())
            record = status(self.root)[job]
            return record if record["status"] in ("finished", "failed") else None
        return wait_for(ended, timeout=40, interval=0.2, what=f"job {job} to end"), "".join(said)

    def folder(self, worker: int, *rel: str) -> Path:
        return Path(self.fleet.disk(self.pod.hosts[worker]), "jobtpu", *rel)


def _src(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", {"train.py": "print('hi')\n", "conf/model.yaml": "depth: 3\n",
                                         "data/blob.bin": os.urandom(300_000)})


def _expected(src: Path) -> str:
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    return "".join(f"{hashlib.sha256((src / f).read_bytes()).hexdigest()}  ./{f}\n" for f in files)


def _leftovers(home: Home, workers: int) -> list[Path]:
    # A snapshot's verified tree (docs/design.md §4) is kept on purpose; nothing else hidden may stay.
    return [p for w in range(workers) for p in home.folder(w, "archives").glob(".*") if not p.name.startswith(".tree.")]


def test_an_eight_worker_machine_gets_one_upload_and_runs_one_tree_on_every_disk(pods: PodFleet, tmp_path: Path) -> None:
    home = Home(tmp_path, pods, pods.add_pod("pod", 8))
    src = _src(tmp_path)
    job = submit(home.root, src, LISTING)
    archive = status(home.root)[job]["archive"]
    record, said = home.until_ended(job)
    assert record["status"] == "finished", (record, said)
    assert home.pushes() == [archive]  # one copy from the home, however many workers
    assert "could not fetch" not in said
    trees = {w: home.folder(w, "jobs", str(job), "tree.txt").read_text() for w in range(8)}
    assert set(trees.values()) == {_expected(src)}, trees
    home_copy = (home.root / "archives" / archive).read_bytes()
    assert all(home.folder(w, "archives", archive).read_bytes() == home_copy for w in range(8))
    wait_for(lambda: not _leftovers(home, 8), timeout=10, what="the server to end and clean up")  # all fetched


def test_a_worker_0_reached_at_an_address_it_lacks_serves_nothing_and_each_peer_gets_the_home_s_copy(
        pods: PodFleet, tmp_path: Path) -> None:
    """The server listens only where the peers reach it (never on every address of the worker): when
    that is no address of worker 0's, it does not start, and the pass says why for each peer."""
    pod = pods.add_pod("pod", 3)
    home = Home(tmp_path, pods, pod, peer_addresses=[NOWHERE, pod.hosts[1].addr, pod.hosts[2].addr])
    src = _src(tmp_path)
    job = submit(home.root, src, LISTING)
    archive = status(home.root)[job]["archive"]
    record, said = home.until_ended(job)
    assert record["status"] == "finished", (record, said)
    for w in (1, 2):
        line = next(ln for ln in said.splitlines() if f"worker {w} could not fetch" in ln)
        assert line.startswith(f"job {job}: worker {w} could not fetch the snapshot from worker 0 (")
        assert line.endswith("); pushed from the home") and f"cannot listen on {NOWHERE}" in line, line
    assert sorted(home.pushes()) == [archive] * 3  # worker 0's, then each peer's own
    assert not _leftovers(home, 3)  # the server that did not start left no folder behind
    assert {home.folder(w, "jobs", str(job), "tree.txt").read_text() for w in range(3)} == {_expected(src)}


def _processes_holding(secret: str) -> list[str]:
    """Every process of this computer (each worker's too) whose argv or environment holds `secret`."""
    found = []
    for pid in (e.name for e in os.scandir("/proc") if e.name.isdigit()):
        for part in ("cmdline", "environ"):
            try:
                text = Path("/proc", pid, part).read_bytes().replace(b"\0", b" ")
            except OSError:
                continue  # it ended meanwhile
            if secret.encode() in text:
                found.append(f"{pid} {part}: {text[:300]!r}")
    return found


def _listening(port: int) -> set[str]:
    """The local addresses of every TCP socket listening on `port` (IPv4 and IPv6)."""
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(addr)
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word host-endian
                found.add(socket.inet_ntop(family, words))
    return found


def _get(url: str, token: str) -> int:
    """The HTTP status a request for `url` with that token gets (never through a proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with opener.open(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_a_serving_worker_s_token_is_in_no_argv_or_file_name_and_it_listens_on_its_peer_address_only(
        pods: PodFleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While worker 0 serves the snapshot, every process and file of every worker is looked at: the
    token is in no command line (what any account's `ps` shows), environment or file name; a request
    with a wrong token of the same length is refused and takes no peer's turn; the server listens on
    worker 0's address only. A real pass, real sshd per worker, a disk of its own each."""
    pod = pods.add_pod("pod", 3)
    home = Home(tmp_path, pods, pod)
    monkeypatch.setenv(*timing.env(peer_copy_wait=60).popitem())
    monkeypatch.setenv("PATH", home.rsync.path)  # the pass runs here: its pushes are counted
    seen: list[dict[str, Any]] = []
    lock, fetch_launch = threading.Lock(), peercopy._fetch_launch

    def look_first(p: Any, machine: Any, worker: Any, source: int, served: Any) -> Any:
        with lock:  # once, before the first peer fetches: the server is up and has served nobody
            if not seen and isinstance(served, peercopy.Serving):
                wrong = ("0" if served.token[0] != "0" else "1") + served.token[1:]
                names = [str(f) for w in range(3) for f in home.folder(w).rglob("*")]
                seen.append({"token": served.token, "holders": _processes_holding(served.token),
                             "files": [n for n in names if served.token in n],
                             "wrong": _get(served.url, wrong), "no token": _get(served.url, ""),
                             "listening": _listening(urllib.parse.urlsplit(served.url).port or 0)})
        return fetch_launch(p, machine, worker, source, served)
    monkeypatch.setattr(peercopy, "_fetch_launch", look_first)

    job = submit(home.root, _src(tmp_path), LISTING)
    said: list[str] = []

    def ended() -> dict[str, Any] | None:
        said.append(run_pass(home.root))
        record = status(home.root)[job]
        return record if record["status"] in ("finished", "failed") else None
    record = wait_for(ended, timeout=40, interval=0.2, what=f"job {job} to end")
    assert record["status"] == "finished", (record, said)
    assert len(seen) == 1, "the pass never served the snapshot from worker 0"
    look = seen[0]
    assert look["holders"] == [] and look["files"] == [], look
    assert (look["wrong"], look["no token"]) == (403, 403), look
    assert look["listening"] == {pod.hosts[0].addr}, look
    # The refused requests took no peer's turn: both peers fetched from worker 0.
    assert "could not fetch" not in "".join(said), said
    assert home.pushes() == [status(home.root)[job]["archive"]]


TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(("header", "ok"), [
    (f"Bearer {TOKEN}", True),
    (f"Bearer {TOKEN[:-1]}0", False),  # the same length, one character off
    (f"Bearer {TOKEN}0", False),
    (TOKEN, False),
    ("Bearer ", False),
    (None, False),
    ("Bearer \u00e9" + TOKEN[1:], False),  # not ASCII: refused, never an error
])
def test_only_the_token_itself_opens_the_server(header: str | None, ok: bool) -> None:
    from jobtpu.remote.peerfile import authorized

    assert authorized(header, TOKEN.encode()) is ok


@pytest.mark.parametrize(("bind", "words"), [
    ("0.0.0.0", "0.0.0.0 is every address of this worker"),
    ("::", ":: is every address of this worker"),
    (NOWHERE, f"cannot listen on {NOWHERE}: Cannot assign requested address"),
    ("no-such-host.invalid", "cannot listen on no-such-host.invalid: "),
])
def test_a_server_never_listens_on_every_address_nor_on_one_the_worker_lacks(bind: str, words: str) -> None:
    from http.server import BaseHTTPRequestHandler

    from jobtpu.remote.peerfile import NotHere, _server

    with pytest.raises(NotHere) as info:
        _server(bind, BaseHTTPRequestHandler)
    assert str(info.value).startswith(words), info.value
    server = _server("127.0.0.1", BaseHTTPRequestHandler)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()


def _another_snapshot(path: Path) -> None:
    """A good .tar.gz that is not the snapshot its name says: what a tampered or mixed-up server sends."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("evil.txt")
        info.size = 4
        tf.addfile(info, io.BytesIO(b"evil"))
    path.write_bytes(buf.getvalue())


def test_a_copy_that_is_not_the_snapshot_is_refused_and_never_unpacked(pods: PodFleet, tmp_path: Path) -> None:
    home = Home(tmp_path, pods, pods.add_pod("pod", 3))
    src = _src(tmp_path)
    job = submit(home.root, src, LISTING)
    archive = status(home.root)[job]["archive"]
    assert home.until_ended(job)[0]["status"] == "finished"
    # Workers 1 and 2 lose the snapshot; worker 0 keeps its job folder (a resume needs no archive there)
    # and serves a file that is not the snapshot.
    for w in (1, 2):
        shutil.rmtree(home.folder(w, "jobs", str(job)))
        home.folder(w, "archives", archive).unlink()
    _another_snapshot(home.folder(0, "archives", archive))
    jobtpu(home.root, "resume", str(job))
    record, said = home.until_ended(job)
    assert record["status"] == "finished", (record, said)
    for w in (1, 2):
        line = next(ln for ln in said.splitlines() if f"worker {w} could not fetch" in ln)
        assert "does not match its name" in line and line.endswith("; pushed from the home"), line
        assert home.folder(w, "jobs", str(job), "tree.txt").read_text() == _expected(src)
        assert not list(home.folder(w).rglob("evil.txt"))
    assert sorted(home.pushes()) == [archive] * 3  # the first launch's one, and one for each refused copy
    assert not _leftovers(home, 3)


# ---- machines.json: peer_addresses --------------------------------------------------------------------

def _load(tmp_path: Path, machine: dict[str, Any]) -> Any:
    from jobtpu.home.layout import Home as JobtpuHome
    from jobtpu.home.machines import load_fleet

    home = JobtpuHome(tmp_path)
    doc = {"gcp": {"project": "p"}, "machines": {"m": machine}}
    home.machines_file.write_text(json.dumps(doc))
    return home, lambda: load_fleet(home)


@pytest.mark.parametrize(("machine", "words"), [
    ({"kind": "ssh", "hosts": ["10.0.0.5", "10.0.0.6"], "peer_addresses": ["192.168.0.5"]},
     "'peer_addresses' names 1 addresses for 2 hosts: give one per host, in the order of 'hosts'"),
    ({"kind": "ssh", "hosts": ["10.0.0.5"], "peer_addresses": "192.168.0.5"}, "'peer_addresses' must be a list"),
    ({"kind": "ssh", "hosts": ["10.0.0.5"], "peer_addresses": [""]}, "'peer_addresses' must be a list"),
    ({"kind": "local", "peer_addresses": ["127.0.0.1"]}, "only for ssh and tpu machines"),
])
def test_peer_addresses_must_name_one_address_per_worker(tmp_path: Path, machine: dict[str, Any], words: str) -> None:
    from jobtpu.errors import ConfigError

    home, load = _load(tmp_path, machine)
    before = home.machines_file.read_text()
    with pytest.raises(ConfigError) as info:
        load()
    assert words in info.value.message and "\n" not in info.value.message, info.value.message
    assert home.machines_file.read_text() == before


def test_peer_addresses_are_read_in_worker_order(tmp_path: Path) -> None:
    _, load = _load(tmp_path, {"kind": "ssh", "hosts": ["gw:2201", "gw:2202"], "peer_addresses": ["10.1.0.1", "10.1.0.2"]})
    assert load().machines["m"].peer_addresses == ("10.1.0.1", "10.1.0.2")

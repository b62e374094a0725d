"""TPU nodes for tests: the fake TPU API's nodes, whose workers are real sshd hosts of an SshFleet.

Preempting a node stops its workers' sshd and kills their processes; a node created again comes up
with a wiped disk and new host keys, exactly what a recreated TPU VM looks like from outside.

By default a worker's internal and external addresses are one, its sshd's. A node added with
`own_network=True` gives each worker an internal address of its own, as on Google: another loopback
address of the host (all of 127.0.0.0/8 is this host's on Linux, so the workers reach each other
there) on which no sshd listens; its external one is the sshd's. A node added with `own_disks=True`
over a PodFleet gives each worker a disk of its own (tests/podfleet.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tests.fake_tpu import FakeTpuApi
from tests.podfleet import PodFleet
from tests.sshfleet import FleetMachine, Host, SshFleet

PROJECT, ZONE = "test-project", "europe-west4-a"


class TpuFleet:
    """WorkerHooks for FakeTpuApi, backed by an SshFleet; one fleet machine per node."""

    def __init__(self, ssh: SshFleet, api: FakeTpuApi) -> None:
        self.ssh, self.api = ssh, api
        self.nodes: dict[str, FleetMachine] = {}
        self.events: list[tuple[str, str]] = []  # (event, node) in order, for assertions
        self.unpublished: dict[str, set[int]] = {}  # node → workers whose guest agent has no host key out yet
        self.own_network: set[str] = set()  # nodes whose workers' internal addresses are not their sshd's
        self._lock = threading.Lock()

    def add_node(self, name: str, workers: int = 2, accelerator: str = "v3-16", preemptible: bool = True,
                 zone: str = ZONE, own_network: bool = False, own_disks: bool = False, **fields: Any) -> FleetMachine:
        """A node made out of band; `fields` as FakeTpuApi.add_node takes them (spot, labels, metadata...)."""
        if own_disks and not isinstance(self.ssh, PodFleet):
            raise TypeError("own_disks needs a TpuFleet over a PodFleet (fixture tpu_pods)")
        if own_network:
            self.own_network.add(name)
        machine = (self.ssh.add_pod(name, workers, same_port=True) if own_disks and isinstance(self.ssh, PodFleet)
                   else self.ssh.add_machine(name, workers, same_port=True))
        self.nodes[name] = machine
        self.api.add_node(PROJECT, zone, name, accelerator_type=accelerator, preemptible=preemptible,
                          workers=self.workers_for(name, accelerator), **fields)
        return machine

    def disk(self, name: str, worker: int) -> Path:
        """The worker's own disk (its home folder) of a node added with own_disks=True."""
        if not isinstance(self.ssh, PodFleet):
            raise TypeError("own disks need a TpuFleet over a PodFleet (fixture tpu_pods)")
        return self.ssh.disk(self.nodes[name].hosts[worker])

    def internal_address(self, name: str, worker: int) -> str:
        """The worker's address on the node's internal network (its `networkEndpoints[].ipAddress`)."""
        host = self.nodes[name].hosts[worker]
        return _internal_of(host) if name in self.own_network else host.addr

    def port(self, name: str) -> int:
        return self.nodes[name].hosts[0].port

    def machine_spec(self, name: str, **extra: Any) -> dict[str, Any]:
        """The machines.json entry for a node."""
        node = self.api.node(ZONE, name) or {}
        return {"kind": "tpu", "node": name, "zone": ZONE, "accelerator": node.get("acceleratorType", "v3-16"),
                "preemptible": any(node.get("schedulingConfig", {}).get(k, False) for k in ("preemptible", "spot")),
                "user": self.nodes[name].user, "port": self.port(name), **extra}

    def machines_json(self, home: Path) -> dict[str, Any]:
        return {"defaults": {"identity_file": str(self.ssh.identity), "connect_timeout": 5},
                "gcp": {"project": PROJECT, "api_endpoint": self.api.url, "credentials": "anonymous"}}

    # ---- WorkerHooks ----------------------------------------------------------------------------
    def workers_for(self, node_name: str, accelerator_type: str) -> list[tuple[str, str]]:
        """(internal, external) per worker; jobtpu's SSH reaches the external one only with use_external_ip."""
        return [(self.internal_address(node_name, i), h.addr) for i, h in enumerate(self.nodes[node_name].hosts)]

    def on_preempt(self, node_name: str) -> None:
        self._take_down("preempt", node_name)

    def on_delete(self, node_name: str) -> None:
        self._take_down("delete", node_name)

    def _take_down(self, event: str, node_name: str) -> None:
        """The node's VMs are gone: no sshd answers and every process of theirs is dead."""
        self._record(event, node_name)
        machine = self.nodes[node_name]
        for host in machine.hosts:
            self.ssh.stop_host(host)
        self.ssh.kill_user_processes(machine)

    def on_stop(self, node_name: str) -> None:
        self._take_down("stop", node_name)

    def on_start(self, node_name: str) -> None:
        """The same VMs come back: their disk and host keys are as they were."""
        self._record("start", node_name)
        for host in self.nodes[node_name].hosts:
            self.ssh.start_host(host)

    def on_create_ready(self, node_name: str) -> None:
        self._record("create", node_name)
        machine = self.nodes[node_name]
        self.ssh.wipe_disk(machine)
        for host in machine.hosts:
            self.ssh.new_host_key(host)
            self.ssh.start_host(host)

    def host_keys(self, node_name: str) -> list[str]:
        slow = self.unpublished.get(node_name, set())
        return ["" if i in slow else h.public_key_line() for i, h in enumerate(self.nodes[node_name].hosts)]

    def _record(self, event: str, node: str) -> None:
        with self._lock:
            self.events.append((event, node))


def _internal_of(host: Host) -> str:
    """127.0.x.y → 127.1.x.y: local, one per fleet host (tests/sshfleet.py hands out 127.0.*), no sshd's."""
    return "127.1." + host.addr.split(".", 2)[2]


def write_machines(home: Path, tpus: TpuFleet, machines: dict[str, Any]) -> None:
    """A machines.json pointing at the fake API and the fleet's key, with these machines."""
    home.mkdir(parents=True, exist_ok=True)
    doc = {**tpus.machines_json(home), "machines": machines}
    (home / "machines.json").write_text(json.dumps(doc, indent=1))


def tpu_home(base: Path, tpus: TpuFleet, machines: dict[str, Any], **gcp: Any) -> Path:
    """`base/home` with these machines on the fake API (`gcp`: more keys of its gcp object, like a fast
    recreate_backoff), and a source folder `base/src` to submit."""
    home = base / "home"
    write_machines(home, tpus, machines)
    doc = json.loads((home / "machines.json").read_text())
    doc["gcp"].update(gcp)
    (home / "machines.json").write_text(json.dumps(doc))
    (base / "src").mkdir(exist_ok=True)
    (base / "src" / "noop.txt").write_text("x")
    return home

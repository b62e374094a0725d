"""What the Slurm benches share (bench/slurm_pass.py, bench/slurm_sweep.py): a real one-node Slurm on
loopback (tests/slurmcluster.py) whose login host is a real sshd (tests/sshfleet.py), a folder of code
to submit, the machines.json entry that reaches the cluster, and the floor's ssh to the login host.
Needs root, slurm-wlm and munge. Everything is cancelled and stopped on the way out."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.slurmcluster import SlurmCluster  # noqa: E402
from tests.sshfleet import FleetMachine, SshFleet  # noqa: E402


@dataclass
class Login:
    cluster: SlurmCluster
    fleet: SshFleet
    fm: FleetMachine
    base: Path  # the bench's own folder
    src: Path  # the code every job is submitted from
    known_hosts: Path

    def entry(self) -> dict[str, Any]:
        """The machines.json entry of the cluster, reached at its login host."""
        return {"kind": "slurm", "host": self.fm.hosts[0].address(), "user": self.fm.user,
                "identity_file": str(self.fleet.identity), "connect_timeout": 20}

    def ssh(self, command: str) -> None:
        """One ssh to the login host running `command` (the floor's Slurm call), its output dropped."""
        h = self.fm.hosts[0]
        subprocess.run(["ssh", "-i", str(self.fleet.identity), "-p", str(h.port), "-o", "BatchMode=yes",
                        "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={self.known_hosts}",
                        "-o", "StrictHostKeyChecking=yes", f"{h.user}@{h.addr}", command],
                       stdout=subprocess.DEVNULL, check=True)


@contextlib.contextmanager
def slurm_login(prefix: str) -> Iterator[Login]:
    cluster = SlurmCluster()
    base = Path(tempfile.mkdtemp(prefix=prefix))
    fleet = SshFleet(base / "fleet")
    fleet.extra_conf = f"SetEnv SLURM_CONF={cluster.conf}\n"
    try:
        fm = fleet.add_machine("hpc")
        src = base / "code"
        src.mkdir()
        (src / "train.py").write_text("print('hello')\n")
        known = base / "known_hosts"
        known.write_text(fm.hosts[0].known_hosts_line() + "\n")
        yield Login(cluster, fleet, fm, base, src, known)
    finally:
        try:
            cluster.cancel_all()  # an account whose jobs still run cannot be removed
            fleet.close()
        finally:
            cluster.close()

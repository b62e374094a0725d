from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_tpu import FakeTpuApi
from tests.sshfleet import SshFleet
from tests.tpufleet import TpuFleet


@pytest.fixture
def ssh_fleet(tmp_path: Path) -> Iterator[SshFleet]:
    """Real sshd servers on loopback; fails (never skips) unless root with openssh-server and rsync."""
    fleet = SshFleet(tmp_path / "sshfleet")
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def tpus(ssh_fleet: SshFleet) -> Iterator[TpuFleet]:
    """A fake TPU API whose nodes' workers are real sshd hosts of `ssh_fleet`."""
    api = FakeTpuApi(ready_after=0.3)
    fleet = TpuFleet(ssh_fleet, api)
    api.worker_hooks = fleet
    api.start()
    try:
        yield fleet
    finally:
        api.close()

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshfleet import SshFleet


@pytest.fixture
def ssh_fleet(tmp_path: Path) -> Iterator[SshFleet]:
    """Real sshd servers on loopback; fails (never skips) unless root with openssh-server and rsync."""
    fleet = SshFleet(tmp_path / "sshfleet")
    try:
        yield fleet
    finally:
        fleet.close()

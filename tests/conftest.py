import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.accounts import Team
from tests.fake_tpu import FakeTpuApi
from tests.sshfleet import SshFleet
from tests.tpufleet import TpuFleet

PYC_PREFIX = "PYTHONPYCACHEPREFIX"


def _share_compiled_modules() -> None:
    """The suite runs the CLI in thousands of fresh Python processes. Under $PYTHONDONTWRITEBYTECODE
    (and for the test accounts, who may not write into the checkout) each one compiled every jobtpu
    module again: about a third of a short command's CPU. So the children of one run keep their
    compiled modules in one folder of that run, outside the checkout; anyone may read it (the test
    accounts too, tests/accounts.py), only this user may write it. Nothing a test checks depends on
    where bytecode is kept. Set here, before pytest-xdist starts its workers, so they share it."""
    if os.environ.get(PYC_PREFIX):
        return  # a worker of this run, or a caller's own choice
    folder = tempfile.mkdtemp(prefix="jobtpu-tests-pyc-")
    os.chmod(folder, 0o755)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ[PYC_PREFIX] = folder
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_share_compiled_modules()

# Fixtures that need root, sshd or real accounts: a test marked `fast` (run by contributors as any
# user, `python3 -m pytest -m fast`) must not ask for one.
NEEDS_ROOT = frozenset({"ssh_fleet", "tpus", "team"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = [f"{item.nodeid} uses {', '.join(sorted(NEEDS_ROOT & set(getattr(item, 'fixturenames', ()))))}"
             for item in items
             if item.get_closest_marker("fast") and NEEDS_ROOT & set(getattr(item, "fixturenames", ()))]
    if wrong:
        raise pytest.UsageError("tests marked fast must need no root, sshd nor accounts: " + "; ".join(wrong))


@pytest.fixture
def ssh_fleet(tmp_path: Path) -> Iterator[SshFleet]:
    """Real sshd servers on loopback; fails (never skips) unless root with openssh-server and rsync."""
    fleet = SshFleet(tmp_path / "sshfleet")
    try:
        yield fleet
    finally:
        fleet.close()


@contextlib.contextmanager
def _host_tmp_turn(alone: bool) -> Iterator[None]:
    """The fake TPU workers share this host's /tmp, and a TPU launch removes /tmp/libtpu_lockfile:
    a test marked `alone_on_host_tmp` (that plants one) runs while no other TPU test does, even
    under `pytest -n`. A turnstile: it closes the gate, so no new TPU test starts, then waits for the
    running ones to end; the others pass the gate and share the room."""
    gate, room = (os.open(f"/tmp/jobtpu-tests-tpu-{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                  for name in ("gate", "room"))
    try:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(room)
        os.close(gate)


@pytest.fixture
def tpus(ssh_fleet: SshFleet, request: pytest.FixtureRequest) -> Iterator[TpuFleet]:
    """A fake TPU API whose nodes' workers are real sshd hosts of `ssh_fleet`."""
    with _host_tmp_turn(alone=request.node.get_closest_marker("alone_on_host_tmp") is not None):
        api = FakeTpuApi(ready_after=0.3)
        fleet = TpuFleet(ssh_fleet, api)
        api.worker_hooks = fleet
        api.start()
        try:
            yield fleet
        finally:
            api.close()


@pytest.fixture
def team() -> Iterator[Team]:
    """Two real Unix accounts in one group (tests/accounts.py), removed again after the test."""
    made = Team(2)
    try:
        yield made
    finally:
        made.close()

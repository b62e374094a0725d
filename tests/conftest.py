import contextlib
import fcntl
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.accounts import Team
from tests.fake_tpu import FakeTpuApi
from tests.podfleet import PodFleet
from tests.sshfleet import SshFleet
from tests.tpufleet import TpuFleet


def _keep_compiled_modules() -> None:
    """The suite runs the CLI in thousands of fresh Python processes. Under $PYTHONDONTWRITEBYTECODE
    each one compiled every jobtpu module again: about a third of a short command's CPU. Its
    children write bytecode as Python does by default (__pycache__, ignored by git), which the test
    accounts read too. Nothing a test checks depends on it. Set here, before pytest-xdist starts its
    workers, so they and every CLI they run inherit it."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False  # this process too: the test modules and what they import


_keep_compiled_modules()


def _let_ctrl_c_reach_the_cli() -> None:
    """Tests press Ctrl-C on the CLI (SIGINT to `run --follow`, `manage --loop`, `status --watch`).
    A suite started in the background of a non-interactive shell (`.ci/run &`) inherits SIGINT
    ignored, and so would every CLI it starts: Python installs no KeyboardInterrupt handler for an
    ignored SIGINT, and those tests would wait out their timeouts. A caught signal is reset to its
    default at exec, so children see SIGINT as a terminal gives it. Here, before xdist starts its
    workers (and again in each worker, which loads this file too)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_let_ctrl_c_reach_the_cli()

# Fixtures that need root, sshd or real accounts: a test marked `fast` (run by contributors as any
# user, `python3 -m pytest -m fast`) must not ask for one.
NEEDS_ROOT = frozenset({"ssh_fleet", "tpus", "tpu_pods", "team", "trio", "old_home_moved"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = [f"{item.nodeid} uses {', '.join(sorted(NEEDS_ROOT & set(getattr(item, 'fixturenames', ()))))}"
             for item in items
             if item.get_closest_marker("fast") and NEEDS_ROOT & set(getattr(item, "fixturenames", ()))]
    if wrong:
        raise pytest.UsageError("tests marked fast must need no root, sshd nor accounts: " + "; ".join(wrong))
    items.sort(key=_start_rank)


# The fixtures of the longest tests, longest first: a TPU test sits through passes that create nodes.
_SLOW_FIXTURES = ("tpus", "tpu_pods", "ssh_fleet", "team", "trio", "old_home_moved")


def _start_rank(item: pytest.Item) -> int:
    """Long tests start first (a stable sort: each file keeps its order within a rank). pytest-xdist
    hands tests out in this order, so the short ones fill the workers' ends instead of one worker
    starting a minute-long TPU test as the others run out of work. Without -n it changes nothing a
    test sees: none depends on another having run."""
    if item.get_closest_marker("starts_first"):
        return 0
    names = set(getattr(item, "fixturenames", ()))
    return next((rank for rank, name in enumerate(_SLOW_FIXTURES, 1) if name in names), len(_SLOW_FIXTURES) + 1)


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


@contextlib.contextmanager
def _tpu_fleet(ssh: SshFleet, request: pytest.FixtureRequest) -> Iterator[TpuFleet]:
    with _host_tmp_turn(alone=request.node.get_closest_marker("alone_on_host_tmp") is not None):
        api = FakeTpuApi(ready_after=0.3)
        fleet = TpuFleet(ssh, api)
        api.worker_hooks = fleet
        api.start()
        try:
            yield fleet
        finally:
            api.close()


@pytest.fixture
def tpus(ssh_fleet: SshFleet, request: pytest.FixtureRequest) -> Iterator[TpuFleet]:
    """A fake TPU API whose nodes' workers are real sshd hosts of `ssh_fleet`."""
    with _tpu_fleet(ssh_fleet, request) as fleet:
        yield fleet


@pytest.fixture
def tpu_pods(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TpuFleet]:
    """As `tpus`, over a PodFleet: a node added with own_disks=True has one disk per worker."""
    pods = PodFleet(tmp_path / "podfleet")
    try:
        with _tpu_fleet(pods, request) as fleet:
            yield fleet
    finally:
        pods.close()


@pytest.fixture
def team() -> Iterator[Team]:
    """Two real Unix accounts in one group (tests/accounts.py), removed again after the test."""
    yield from _accounts(2)


@pytest.fixture
def trio() -> Iterator[Team]:
    """Three: a runner, a hostile member and another member (tests/accounts.py)."""
    yield from _accounts(3)


def _accounts(n: int) -> Iterator[Team]:
    made = Team(n)
    try:
        yield made
    finally:
        made.close()

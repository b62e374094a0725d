"""fleet/drivers.py: what each kind of machine does differently, asked in one place (docs/design.md
§5.1): a table per question over the three kinds."""

from __future__ import annotations

import pytest

from jobtpu.decide.reach import Contact
from jobtpu.fleet.drivers import driver_for
from jobtpu.schema.fleet import Fleet, Machine, MachineKind
from jobtpu.schema.records import MachineRecord, MachineState
from jobtpu.schema.state import State
from jobtpu.transport.base import Endpoint

pytestmark = pytest.mark.fast

LOCAL = Machine(name="local", kind=MachineKind.LOCAL, zone="here")
SSH = Machine(name="box", kind=MachineKind.SSH, hosts=("10.0.0.1", "10.0.0.2:2222"), port=22, zone="lab")
TPU = Machine(name="v4", kind=MachineKind.TPU, zone="us-central2-b", zones=("us-central2-b", "europe-west4-a"),
              node="node-1", port=2200)
SLURM = Machine(name="cluster", kind=MachineKind.SLURM, hosts=("login",), port=22)
SLURM_HERE = Machine(name="cluster", kind=MachineKind.SLURM)  # no host: jobtpu runs on the login node


@pytest.mark.parametrize(("machine", "addresses", "expected"), [
    (LOCAL, ["1.2.3.4"], [Endpoint("local", 0, None)]),
    (SSH, None, [Endpoint("box", 0, "10.0.0.1", 22), Endpoint("box", 1, "10.0.0.2", 2222)]),
    (TPU, ["10.1.0.5", "10.1.0.6"], [Endpoint("v4", 0, "10.1.0.5", 2200), Endpoint("v4", 1, "10.1.0.6", 2200)]),
    (TPU, None, []),  # no address known yet: no worker to reach
])
def test_each_kind_finds_its_workers(machine: Machine, addresses: list[str] | None, expected: list[Endpoint]) -> None:
    """A TPU's addresses are where the API last said its workers are: its driver's own state in a
    session (tpu/runtime.py), made from the machine's record when the session starts."""
    driver = driver_for(machine)
    state = State()
    state.machine(machine.name).addresses = addresses
    assert driver.endpoints(machine, driver.new_runtime(Fleet(machines={machine.name: machine}), state)) == expected


@pytest.mark.parametrize(("machine", "remote", "this_account", "by_request", "frees", "ssh"), [
    (LOCAL, False, True, True, False, False),
    (SSH, True, False, False, False, True),
    (TPU, True, False, False, True, True),
    (SLURM, True, False, False, False, True),
    # sbatch on the login node hands the job over as this account: the local machine's rule holds, and
    # nothing goes over SSH (doctor asks for no rsync).
    (SLURM_HERE, True, True, False, False, False),
])
def test_how_a_launch_and_a_stop_go_on_each_kind(machine: Machine, remote: bool, this_account: bool,
                                                 by_request: bool, frees: bool, ssh: bool) -> None:
    driver = driver_for(machine)
    assert (driver.remote, machine.runs_as_this_account, driver.stops_by_request, driver.frees_accelerator,
            driver.reached_over_ssh(machine)) == (remote, this_account, by_request, frees, ssh)


@pytest.mark.parametrize(("machine", "reachable", "probes"), [
    (LOCAL, None, True), (SSH, False, True), (TPU, None, True), (TPU, True, True),
    (TPU, False, False),  # the API says its workers are gone: nothing to ask them
])
def test_whose_workers_a_pass_probes(machine: Machine, reachable: bool | None, probes: bool) -> None:
    assert driver_for(machine).probes(reachable) is probes


def test_only_an_ssh_machine_is_judged_by_its_contacts() -> None:
    """A failed contact makes an ssh machine unreachable (decide/reach.py); a TPU's state is the
    API's and the local machine is up, so their records are left as they are (none is made)."""
    state = State()
    failed = [Contact(0, "box[0]: connection refused")]
    assert driver_for(SSH).judge_reach(state, SSH, failed, 100.0) is False
    assert state.machines["box"].state == MachineState.UNREACHABLE
    for machine in (LOCAL, TPU):
        assert driver_for(machine).judge_reach(state, machine, failed, 100.0) is True
    assert sorted(state.machines) == ["box"]


@pytest.mark.parametrize(("machine", "record", "expected"), [
    (LOCAL, MachineRecord(), ("here", "")),
    (SSH, MachineRecord(zone="elsewhere"), ("lab", "")),
    (TPU, MachineRecord(), ("us-central2-b", "node-1")),
    (TPU, MachineRecord(zone="europe-west4-a"), ("europe-west4-a", "node-1")),  # capacity moved it
])
def test_where_a_job_sees_it_runs(machine: Machine, record: MachineRecord, expected: tuple[str, str]) -> None:
    assert driver_for(machine).zone_and_node(machine, record) == expected


@pytest.mark.parametrize(("machine", "record", "word"), [
    (LOCAL, MachineRecord(), "up"), (SSH, MachineRecord(), "unknown"), (TPU, MachineRecord(), "unknown"),
    (LOCAL, MachineRecord(state=MachineState.UP), "up"),
    (SSH, MachineRecord(state=MachineState.UNREACHABLE), "unreachable"),
])
def test_the_state_word_of_a_machine_no_pass_has_described(machine: Machine, record: MachineRecord,
                                                            word: str) -> None:
    assert driver_for(machine).state_word(record) == word


def test_a_machine_built_with_its_kind_as_a_word_has_a_driver() -> None:
    assert driver_for(Machine(name="box", kind="ssh")).kind is MachineKind.SSH


QUEUED_TPU = Machine(name="v5", kind=MachineKind.TPU, zone="z", node="n5", queued_resource={"tier": "spot"})


@pytest.mark.parametrize(("machine", "record", "said"), [
    (LOCAL, MachineRecord(), []),
    (SSH, MachineRecord(next_try=130.0, failures=1), []),  # an ssh machine's next_try is its short pause
    (TPU, MachineRecord(), ["node ?"]),
    (TPU, MachineRecord(tpu_state="READY", next_try=130.0, failures=2), ["node READY", "back-off 30 s after 2 failure(s)"]),
    (TPU, MachineRecord(tpu_state="READY", next_try=90.0, failures=2), ["node READY"]),  # the back-off is over
    (QUEUED_TPU, MachineRecord(), ["node ?", "queued resource none"]),
])
def test_what_the_live_view_says_of_the_provider_s_side(machine: Machine, record: MachineRecord,
                                                         said: list[str]) -> None:
    assert driver_for(machine).doing(machine, record, 100.0) == said


@pytest.mark.parametrize(("machine", "names", "zone", "retry", "checked"), [
    (LOCAL, (), "", None, False),
    (SSH, (), "", None, False),  # its zone is a label of machines.json, not a provider's placement
    (TPU, ("node-1",), "europe-west4-a", 130.0, True),
])
def test_what_only_a_provider_s_machine_has(machine: Machine, names: tuple[str, ...], zone: str,
                                            retry: float | None, checked: bool) -> None:
    driver = driver_for(machine)
    record = MachineRecord(zone="europe-west4-a", next_try=130.0)
    assert (driver.other_names(machine), driver.provider_zone(machine, record), driver.create_retry(record),
            driver.accelerator_checked) == (names, zone, retry, checked)
    assert (driver.provider_columns(machine, record) != {}) is checked

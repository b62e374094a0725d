"""Where a multi-worker job's workers meet (docs/reference/job-environment.md §8.2): JOBTPU_HOSTS and
JOBTPU_COORDINATOR name the addresses the workers reach each other at, never the external ones
jobtpu's own SSH may use. Pure: decide/placement.py."""

from __future__ import annotations

import pytest

from jobtpu.decide.placement import Place, coordinator_port, peer_hosts, place_env

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast

EXT = ("34.1.0.2", "34.1.0.3")  # a TPU's external addresses: jobtpu's SSH under use_external_ip
INT = ("10.1.0.2", "10.1.0.3")  # its internal ones, from the API's networkEndpoints


@pytest.mark.parametrize(("reached", "internal", "peer_addresses", "peers"), [
    (EXT, INT, (), INT),  # use_external_ip: the workers still meet on the VPC
    (INT, INT, (), INT),  # SSH over the VPC: one address for both
    (("gw", "gw"), (), ("192.168.0.5", "192.168.0.6"), ("192.168.0.5", "192.168.0.6")),  # behind a jump host
    (EXT, INT, ("172.16.0.1", "172.16.0.2"), ("172.16.0.1", "172.16.0.2")),  # peer_addresses win
    (EXT, INT, ("172.16.0.1",), INT),  # not one per worker: not used (the pass says so for the copy)
    (("box-a", "box-b"), (), (), ("box-a", "box-b")),  # an ssh machine: its hosts
    (EXT, INT[:1], (), (INT[0], EXT[1])),  # the API listed fewer endpoints: the rest as reached
    (("127.0.0.1",), (), (), ("127.0.0.1",)),
])
def test_peer_hosts(reached: tuple[str, ...], internal: tuple[str, ...], peer_addresses: tuple[str, ...],
                    peers: tuple[str, ...]) -> None:
    assert peer_hosts(reached, internal, peer_addresses) == peers


def test_the_coordinator_is_worker_0s_internal_address_and_the_node_name_stays_the_ssh_host() -> None:
    tpu = Place(zone="europe-west4-a", node="tpu-x", accelerator="v3-16", hosts=EXT, peers=INT)
    env = place_env(tpu, EXT[1], job_id=7, attempt=2)
    assert (env["JOBTPU_HOSTS"], env["JOBTPU_COORDINATOR"]) == (",".join(INT), f"{INT[0]}:{coordinator_port(7, 2)}")
    assert env["JOBTPU_NODE"] == "tpu-x"
    box = Place(zone="", node="", accelerator="", hosts=("gw", "gw"), peers=("192.168.0.5", "192.168.0.6"))
    env = place_env(box, "gw", job_id=7, attempt=2)
    assert (env["JOBTPU_NODE"], env["JOBTPU_COORDINATOR"]) == ("gw", f"192.168.0.5:{coordinator_port(7, 2)}")


def test_a_single_worker_has_no_peers_to_meet() -> None:
    alone = Place(zone="", node="", accelerator="", hosts=("box",), peers=("box",))
    assert not {"JOBTPU_HOSTS", "JOBTPU_COORDINATOR"} & set(place_env(alone, "box", 1, 0))

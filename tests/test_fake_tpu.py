"""The fake TPU API, driven only through the real google-cloud-tpu REST client."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.api_core.future.polling import DEFAULT_POLLING
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2

from tests.fake_tpu import FakeTpuApi

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


P, Z = "proj", "europe-west4-a"
PARENT = f"projects/{P}/locations/{Z}"
FAST = DEFAULT_POLLING.with_delay(initial=0.02, maximum=0.05)
State = tpu_v2.Node.State


class RecordingHooks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def _rec(self, what: str, name: str) -> None:
        with self.lock:
            self.calls.append((what, name))

    def workers_for(self, node_name: str, accelerator_type: str) -> list[tuple[str, str]]:
        self._rec("workers_for", node_name)
        return [("127.0.0.2", "127.0.0.2"), ("127.0.0.3", "127.0.0.3")]

    def on_preempt(self, node_name: str) -> None:
        self._rec("on_preempt", node_name)

    def on_create_ready(self, node_name: str) -> None:
        time.sleep(0.05)  # READY must not be visible before this returns
        self._rec("on_create_ready", node_name)

    def on_delete(self, node_name: str) -> None:
        self._rec("on_delete", node_name)

    def host_keys(self, node_name: str) -> list[str]:
        return ["ssh-ed25519 AAAAC3NzaW0 root@w0", "ssh-ed25519 AAAAC3NzaW1 root@w1"]


@pytest.fixture
def api() -> Iterator[FakeTpuApi]:
    with FakeTpuApi(ready_after=0.2, page_size=3) as fake:
        yield fake


def client_for(fake: FakeTpuApi) -> tpu_v2.TpuClient:
    return tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                            client_options=ClientOptions(api_endpoint=fake.url))


@pytest.fixture
def client(api: FakeTpuApi) -> tpu_v2.TpuClient:
    return client_for(api)


def new_node(accel: str = "v3-32") -> tpu_v2.Node:
    return tpu_v2.Node(accelerator_type=accel, runtime_version="tpu-ubuntu2204-base", labels={"owner": "kmh"},
                       scheduling_config=tpu_v2.SchedulingConfig(preemptible=True))


def test_get_node_fields(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    api.add_node(P, Z, "n1", accelerator_type="v3-16", preemptible=True, labels={"a": "b"},
                 workers=[("10.0.0.2", "34.0.0.2"), ("10.0.0.3", "34.0.0.3")])
    node = client.get_node(name=f"{PARENT}/nodes/n1")
    assert node.name == f"{PARENT}/nodes/n1"
    assert (node.accelerator_type, node.runtime_version) == ("v3-16", "tpu-ubuntu2204-base")
    assert node.state == State.READY and node.health == tpu_v2.Node.Health.HEALTHY
    assert node.scheduling_config.preemptible and not node.scheduling_config.spot
    assert dict(node.labels) == {"a": "b"}
    assert [(e.ip_address, e.port, e.access_config.external_ip) for e in node.network_endpoints] == [
        ("10.0.0.2", 8470, "34.0.0.2"), ("10.0.0.3", 8470, "34.0.0.3")]
    assert node.create_time.year >= 2024


def test_missing_node_is_not_found(client: tpu_v2.TpuClient) -> None:
    with pytest.raises(gexc.NotFound) as info:
        client.get_node(name=f"{PARENT}/nodes/nope")
    assert info.value.code == 404 and "not found" in info.value.message


def test_list_pages(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    for i in range(7):
        api.add_node(P, Z, f"n{i}")
    api.add_node(P, "us-central1-a", "other")
    api.add_node("proj2", Z, "foreign")
    names = [n.name.rsplit("/", 1)[1] for n in client.list_nodes(parent=PARENT)]
    assert names == [f"n{i}" for i in range(7)]
    assert api.list_calls(Z) == 3 and api.list_calls() == 3  # pages of 3, 3, 1
    request = tpu_v2.ListNodesRequest(parent=PARENT, page_size=5)
    assert len(list(client.list_nodes(request=request))) == 7
    assert api.list_calls(Z) == 5
    assert [n.name for n in client.list_nodes(parent="projects/proj/locations/us-central1-a")] == [
        "projects/proj/locations/us-central1-a/nodes/other"]


def test_create_then_ready_via_result(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    op = client.create_node(parent=PARENT, node_id="c1", node=new_node())
    assert client.get_node(name=f"{PARENT}/nodes/c1").state == State.CREATING
    node = op.result(timeout=5, polling=FAST)
    assert isinstance(node, tpu_v2.Node) and node.state == State.READY
    assert dict(node.labels) == {"owner": "kmh"} and node.scheduling_config.preemptible
    assert len(node.network_endpoints) == 4  # synthetic workers, v3-32 -> 4 hosts
    assert op.metadata.verb == "create" and op.metadata.target == f"{PARENT}/nodes/c1"
    assert api.count("POST", f"{PARENT}/nodes") == 1
    with pytest.raises(gexc.Conflict):  # 409 maps to Conflict (AlreadyExists is its subclass)
        client.create_node(parent=PARENT, node_id="c1", node=new_node())


def test_create_then_ready_via_get_operation(client: tpu_v2.TpuClient) -> None:
    op = client.create_node(parent=PARENT, node_id="c2", node=new_node("v3-8"))
    deadline = time.monotonic() + 5
    raw = client.get_operation(request={"name": op.operation.name})
    while not raw.done and time.monotonic() < deadline:
        time.sleep(0.05)
        raw = client.get_operation(request={"name": op.operation.name})
    assert raw.done and raw.WhichOneof("result") == "response"
    assert raw.response.type_url == "type.googleapis.com/google.cloud.tpu.v2.Node"
    node = tpu_v2.Node.deserialize(raw.response.value)
    assert node.state == State.READY and node.name == f"{PARENT}/nodes/c2"


def test_resource_exhausted_twice_then_ok(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    api.ready_after = 0.05
    api.fail_next_creates(2)
    for _ in range(2):
        op = client.create_node(parent=PARENT, node_id="c3", node=new_node())
        with pytest.raises(gexc.ResourceExhausted) as info:
            op.result(timeout=5, polling=FAST)
        assert info.value.grpc_status_code.name == "RESOURCE_EXHAUSTED"
        # Google's words: code 8, and a message that does not say RESOURCE_EXHAUSTED.
        assert info.value.message.startswith("There is no more capacity in the zone") and info.value.code == 429
        raw = client.get_operation(request={"name": op.operation.name})  # no exception here
        assert raw.done and raw.error.code == 8 and "RESOURCE_EXHAUSTED" not in raw.error.message
        assert api.node(Z, "c3") is None
    node = client.create_node(parent=PARENT, node_id="c3", node=new_node()).result(timeout=5, polling=FAST)
    assert node.state == State.READY


def test_delete(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    api.add_node(P, Z, "d1")
    client.delete_node(name=f"{PARENT}/nodes/d1").result(timeout=5, polling=FAST)
    with pytest.raises(gexc.NotFound):
        client.get_node(name=f"{PARENT}/nodes/d1")
    api.delete_after = 0.2
    api.add_node(P, Z, "d2")
    op = client.delete_node(name=f"{PARENT}/nodes/d2")
    assert client.get_node(name=f"{PARENT}/nodes/d2").state == State.DELETING
    op.result(timeout=5, polling=FAST)
    assert api.node(Z, "d2") is None and api.count("DELETE", "/nodes/d") == 2


def test_preempt_and_set_state(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    hooks = RecordingHooks()
    api.worker_hooks = hooks
    api.add_node(P, Z, "p1", preemptible=True)
    api.preempt(Z, "p1")
    assert client.get_node(name=f"{PARENT}/nodes/p1").state == State.PREEMPTED
    assert [n.state for n in client.list_nodes(parent=PARENT)] == [State.PREEMPTED]
    assert ("on_preempt", "p1") in hooks.calls
    api.set_state(Z, "p1", "TERMINATED")
    assert client.get_node(name=f"{PARENT}/nodes/p1").state == State.TERMINATED


def test_hold_creating(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    api.ready_after = 0.05
    api.hold_creating(Z, "h1")
    op = client.create_node(parent=PARENT, node_id="h1", node=new_node())
    time.sleep(0.2)
    assert client.get_node(name=f"{PARENT}/nodes/h1").state == State.CREATING
    assert not client.get_operation(request={"name": op.operation.name}).done
    api.hold_creating(Z, "h1", False)
    assert op.result(timeout=5, polling=FAST).state == State.READY


def test_state_change_aborts_operation(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    api.hold_creating(Z, "a1")
    op = client.create_node(parent=PARENT, node_id="a1", node=new_node())
    api.preempt(Z, "a1")
    with pytest.raises(gexc.Aborted):
        op.result(timeout=5, polling=FAST)
    assert api.node(Z, "a1")["state"] == "PREEMPTED"  # type: ignore[index]
    api.hold_creating(Z, "a2")
    op = client.create_node(parent=PARENT, node_id="a2", node=new_node())
    client.delete_node(name=f"{PARENT}/nodes/a2").result(timeout=5, polling=FAST)
    with pytest.raises(gexc.Aborted):
        op.result(timeout=5, polling=FAST)
    assert api.node(Z, "a2") is None


def test_hooks_and_guest_attributes(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    hooks = RecordingHooks()
    api.worker_hooks = hooks
    op = client.create_node(parent=PARENT, node_id="k1", node=new_node("v3-16"))
    node = op.result(timeout=5, polling=FAST)
    assert hooks.calls == [("workers_for", "k1"), ("on_create_ready", "k1")]
    assert [e.ip_address for e in node.network_endpoints] == ["127.0.0.2", "127.0.0.3"]
    attrs = client.get_guest_attributes(request={"name": f"{PARENT}/nodes/k1"}).guest_attributes
    assert [(a.query_path, [(i.namespace, i.key, i.value) for i in a.query_value.items]) for a in attrs] == [
        ("hostkeys/", [("hostkeys", "ssh-ed25519", "AAAAC3NzaW0")]),
        ("hostkeys/", [("hostkeys", "ssh-ed25519", "AAAAC3NzaW1")])]
    one = client.get_guest_attributes(request={"name": f"{PARENT}/nodes/k1", "worker_ids": ["1"]})
    assert [i.value for a in one.guest_attributes for i in a.query_value.items] == ["AAAAC3NzaW1"]
    client.delete_node(name=f"{PARENT}/nodes/k1").result(timeout=5, polling=FAST)
    assert hooks.calls[-1] == ("on_delete", "k1")


def test_stop_start(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    api.ready_after = 0.05
    api.add_node(P, Z, "s1")
    op = client.stop_node(request={"name": f"{PARENT}/nodes/s1"})
    assert client.get_node(name=f"{PARENT}/nodes/s1").state in (State.STOPPING, State.STOPPED)
    assert op.result(timeout=5, polling=FAST).state == State.STOPPED
    assert client.start_node(request={"name": f"{PARENT}/nodes/s1"}).result(timeout=5, polling=FAST).state == State.READY


def test_unknown_route_and_injected_error(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    req = urllib.request.Request(f"{api.url}/v1/whatever", data=b'{"x": 1}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 404
    assert json.loads(info.value.read())["error"]["status"] == "NOT_FOUND"
    api.inject_error("GET", "/nodes", "UNAVAILABLE")
    with pytest.raises(gexc.ServiceUnavailable):
        list(client.list_nodes(request=tpu_v2.ListNodesRequest(parent=PARENT), retry=None))
    assert list(client.list_nodes(parent=PARENT)) == []


def test_jobtpu_reads_a_404_as_an_answer_or_as_one_api_failure(api: FakeTpuApi) -> None:
    from jobtpu.errors import RemoteError
    from jobtpu.schema.fleet import Machine
    from jobtpu.tpu.api import TpuApi

    tpu = TpuApi({"project": P, "api_endpoint": api.url, "credentials": "anonymous"})
    gone = Machine(name="t", kind="tpu", node="nope", zone=Z, accelerator="v3-8")
    assert tpu.get_node(Z, "nope") is None and tpu.delete_node(gone) is None  # answers
    assert tpu.operation(f"{PARENT}/operations/nope").done
    # Elsewhere a 404 is a RemoteError like any other failure, which a pass survives (not google's type).
    with pytest.raises(RemoteError, match="TPU API host keys of nope: .*not found"):
        tpu.host_keys(gone)


def test_answers_like_google_enums_external_ips_runtime_and_the_token_endpoint(api: FakeTpuApi,
                                                                               client: tpu_v2.TpuClient) -> None:
    api.add_node(P, Z, "e1", networkConfig={"enableExternalIps": False})
    raw = urllib.request.urlopen(f"{api.url}/v2/{PARENT}/nodes/e1?%24alt=json%3Benum-encoding%3Dint", timeout=5)
    node = json.loads(raw.read())
    assert (node["state"], node["health"]) == (2, 1)  # the client asks for enums as numbers
    assert all("accessConfig" not in e for e in node["networkEndpoints"])  # none unless enabled
    assert client.get_node(name=f"{PARENT}/nodes/e1").state == State.READY
    bad = tpu_v2.Node(accelerator_type="v5p-8", runtime_version="tpu-ubuntu2204-base")
    with pytest.raises(gexc.BadRequest, match='Invalid runtime version "tpu-ubuntu2204-base"'):
        client.create_node(parent=PARENT, node_id="e2", node=bad)
    api.quota_exceeded_next_creates(1, Z)
    with pytest.raises(gexc.TooManyRequests, match="Quota limit"):
        client.create_node(parent=PARENT, node_id="e3", node=new_node())
    # A key file whose grant the token endpoint refuses: google-auth's RefreshError.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.auth import exceptions as auth_exc
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    creds = service_account.Credentials.from_service_account_info(
        {"private_key": pem, "client_email": "sa@p.iam.gserviceaccount.com", "token_uri": f"{api.url}/token"},
        scopes=["https://www.googleapis.com/auth/cloud-platform"])
    with pytest.raises(auth_exc.RefreshError, match="invalid_grant"):
        creds.refresh(Request())


def test_queued_resource_states(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    api.hold_queued(Z, "q1")
    resource = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(node_spec=[tpu_v2.QueuedResource.Tpu.NodeSpec(
            parent=PARENT, node_id="q1", node=new_node("v3-8"))]), spot=tpu_v2.QueuedResource.Spot())
    client.create_queued_resource(parent=PARENT, queued_resource_id="q1", queued_resource=resource).result(timeout=5)
    QState = tpu_v2.QueuedResourceState.State
    get = lambda: client.get_queued_resource(name=f"{PARENT}/queuedResources/q1")  # noqa: E731
    assert get().state.state == QState.WAITING_FOR_RESOURCES
    api.hold_queued(Z, "q1", False)
    wait = time.monotonic() + 5
    while get().state.state != QState.ACTIVE and time.monotonic() < wait:
        time.sleep(0.05)
    assert get().state.state == QState.ACTIVE
    assert client.get_node(name=f"{PARENT}/nodes/q1").scheduling_config.spot
    api.preempt(Z, "q1")
    assert get().state.state == QState.SUSPENDED
    client.delete_queued_resource(request={"name": f"{PARENT}/queuedResources/q1", "force": True})
    assert [n.name for n in client.list_nodes(parent=PARENT)] == []  # force: its node went with it
    assert [q.name for q in client.list_queued_resources(parent=PARENT)] == []


def multislice(count: int | None = 2, prefix: str = "ms", node_id: str = "") -> tpu_v2.QueuedResource:
    Spec = tpu_v2.QueuedResource.Tpu.NodeSpec
    params = Spec.MultisliceParams(node_count=count, node_id_prefix=prefix) if count is not None else None
    spec = Spec(parent=PARENT, node=new_node("v3-8"), **({"node_id": node_id} if node_id else {}))
    if params is not None:
        spec.multislice_params = params  # one of name_strategy: it clears node_id, as on Google's side
    return tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]), spot=tpu_v2.QueuedResource.Spot())


def test_a_multislice_queued_resource_makes_its_nodes_and_is_suspended_by_one_preemption(
        api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    """Google's v2 QueuedResource.Tpu.NodeSpec.MultisliceParams: nodeCount nodes named
    <nodeIdPrefix>-0 …, each with its own state; one preempted node suspends the queued resource."""
    api.hold_queued(Z, "ms")
    client.create_queued_resource(parent=PARENT, queued_resource_id="ms", queued_resource=multislice(3)).result(timeout=5)
    QState = tpu_v2.QueuedResourceState.State
    get = lambda: client.get_queued_resource(name=f"{PARENT}/queuedResources/ms")  # noqa: E731
    assert get().state.state == QState.WAITING_FOR_RESOURCES
    sent = get().tpu.node_spec[0]
    assert (sent.multislice_params.node_count, sent.multislice_params.node_id_prefix, sent.node_id) == (3, "ms", "")
    assert [n.name for n in client.list_nodes(parent=PARENT)] == []
    api.hold_queued(Z, "ms", False)
    wait = time.monotonic() + 5
    while get().state.state != QState.ACTIVE and time.monotonic() < wait:
        time.sleep(0.05)
    assert get().state.state == QState.ACTIVE  # only once every node is READY
    nodes = list(client.list_nodes(parent=PARENT))
    assert [n.name.rsplit("/", 1)[1] for n in nodes] == ["ms-0", "ms-1", "ms-2"]
    assert all(n.state == State.READY and n.multislice_node and n.scheduling_config.spot for n in nodes)
    assert {n.queued_resource for n in nodes} == {f"{PARENT}/queuedResources/ms"}
    api.preempt(Z, "ms-1")
    assert get().state.state == QState.SUSPENDED
    assert [n.state for n in client.list_nodes(parent=PARENT)] == [State.READY, State.PREEMPTED, State.READY]
    with pytest.raises(gexc.BadRequest, match="delete with force"):
        client.delete_queued_resource(request={"name": f"{PARENT}/queuedResources/ms"})
    client.delete_queued_resource(request={"name": f"{PARENT}/queuedResources/ms", "force": True})
    assert [n.name for n in client.list_nodes(parent=PARENT)] == []  # force: every node went with it
    assert [q.name for q in client.list_queued_resources(parent=PARENT)] == []


@pytest.mark.parametrize(("count", "prefix", "said"), [
    (1, "ms", "nodeCount must be > 1"), (2, "bad/prefix", "is not a valid id")])
def test_a_wrong_multislice_request_is_refused_as_google_does(
        client: tpu_v2.TpuClient, count: int, prefix: str, said: str) -> None:
    with pytest.raises(gexc.BadRequest, match=said):
        client.create_queued_resource(parent=PARENT, queued_resource_id="ms", queued_resource=multislice(count, prefix))
    assert [q.name for q in client.list_queued_resources(parent=PARENT)] == []


def test_a_multislice_prefix_defaults_to_the_queued_resources_id(api: FakeTpuApi, client: tpu_v2.TpuClient) -> None:
    client.create_queued_resource(parent=PARENT, queued_resource_id="qr", queued_resource=multislice(2, "")).result(timeout=5)
    wait = time.monotonic() + 5
    while len(list(client.list_nodes(parent=PARENT))) < 2 and time.monotonic() < wait:
        time.sleep(0.05)
    assert [n.name.rsplit("/", 1)[1] for n in client.list_nodes(parent=PARENT)] == ["qr-0", "qr-1"]

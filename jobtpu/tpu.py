"""The Cloud TPU API (google-cloud-tpu, v2, REST): the only module that imports google-cloud.

It turns API answers into plain values (NodeInfo, OpInfo) and API failures into RemoteError, and
holds the one table that maps a node's state to a machine's health."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, RemoteError
from .fleet import Machine

API_TIMEOUT = 30.0  # the client has no default timeout: a hung API must not hang a pass

# Node state → (machine health, why). The API decides preemption; SSH failures never do.
UP, PREEMPTED, TRANSIENT, DOWN = "up", "preempted", "transient", "down"
HEALTH: dict[str | None, tuple[str, str]] = {
    "READY": (UP, "the node is ready"),
    "PREEMPTED": (PREEMPTED, "Google preempted the node"),
    "TERMINATED": (PREEMPTED, "the node was terminated"),
    None: (PREEMPTED, "the node no longer exists"),
    "CREATING": (TRANSIENT, "the node is being created"),
    "STARTING": (TRANSIENT, "the node is starting"),
    "RESTARTING": (TRANSIENT, "the node is restarting"),
    "REPAIRING": (TRANSIENT, "the node is being repaired"),
    "REIMAGING": (TRANSIENT, "the node is being reimaged"),
    "DELETING": (TRANSIENT, "the node is being deleted"),
    "STOPPED": (DOWN, "someone stopped the node; jobtpu does not recreate it"),
    "STOPPING": (DOWN, "someone is stopping the node; jobtpu does not recreate it"),
}


def health_of(state: str | None) -> tuple[str, str]:
    return HEALTH.get(state, (TRANSIENT, f"the node is {state}"))


@dataclass(frozen=True)
class NodeInfo:
    name: str  # the short node id
    state: str
    health: str | None = None  # the API's own health word (HEALTHY, UNHEALTHY_TENSORFLOW, ...)
    health_description: str | None = None
    accelerator: str | None = None
    internal: tuple[str, ...] = ()
    external: tuple[str, ...] = ()
    create_time: str = ""

    def addresses(self, use_external_ip: bool) -> list[str]:
        return list(self.external if use_external_ip else self.internal)


@dataclass(frozen=True)
class OpInfo:
    name: str
    done: bool
    error_code: int | None = None  # google.rpc.Code: 8 is RESOURCE_EXHAUSTED
    error_message: str = ""

    @property
    def capacity(self) -> bool:
        return self.error_code == 8 or "RESOURCE_EXHAUSTED" in self.error_message


class ApiNotFound(RemoteError):
    """The API has no such node, operation or zone (404). A pass survives it like any API failure;
    get_node, delete_node and operation read it as an answer."""


@dataclass
class TpuApi:
    gcp: dict[str, Any]
    _client: Any = field(default=None, init=False)

    @property
    def project(self) -> str:
        project = self.gcp.get("project")
        if not project:
            raise ConfigError("machines.json: TPU machines need gcp.project", hint='add "gcp": {"project": "..."}')
        return str(project)

    def client(self) -> Any:
        if self._client is None:
            from google.api_core.client_options import ClientOptions
            from google.cloud import tpu_v2

            options = ClientOptions(api_endpoint=self.gcp["api_endpoint"]) if self.gcp.get("api_endpoint") else None
            self._client = tpu_v2.TpuClient(transport="rest", credentials=self._credentials(),
                                            client_options=options)
        return self._client

    def _credentials(self) -> Any:
        kind = self.gcp.get("credentials") or "default"
        try:
            if kind == "anonymous":
                from google.auth.credentials import AnonymousCredentials
                return AnonymousCredentials()
            if kind == "default":
                import google.auth
                return google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])[0]
            from google.oauth2 import service_account
            return service_account.Credentials.from_service_account_file(
                kind, scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except Exception as e:  # google.auth raises several unrelated types for missing/bad credentials
            raise ConfigError(f"gcp.credentials {kind!r}: {e}".splitlines()[0],
                              hint="run `gcloud auth application-default login`, or set gcp.credentials "
                                   "to a service-account key file") from None

    def _parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        from google.api_core import exceptions as gexc

        try:
            return fn(**kwargs, timeout=API_TIMEOUT)
        except gexc.NotFound as e:  # a RemoteError like any other, unless the caller expects it
            raise ApiNotFound(f"TPU API {what}: {getattr(e, 'message', e)}".splitlines()[0]) from None
        except gexc.GoogleAPIError as e:
            raise RemoteError(f"TPU API {what}: {getattr(e, 'message', e)}".splitlines()[0]) from None
        except (OSError, ValueError) as e:
            raise RemoteError(f"TPU API {what}: {network_reason(str(e))}") from None

    def list_nodes(self, zone: str) -> dict[str, NodeInfo]:
        """Every node in the zone, in one paged listing."""
        pages = self._call(f"list nodes in {zone}", self.client().list_nodes,
                           request={"parent": self._parent(zone)})
        return {info.name: info for info in map(_node_info, pages)}

    def get_node(self, zone: str, name: str) -> NodeInfo | None:
        try:
            node = self._call(f"get {name}", self.client().get_node,
                              request={"name": f"{self._parent(zone)}/nodes/{name}"})
        except ApiNotFound:
            return None
        return _node_info(node)

    def create_node(self, machine: Machine) -> str:
        from google.cloud import tpu_v2

        node = tpu_v2.Node(
            accelerator_type=machine.accelerator, runtime_version=machine.runtime_version or "tpu-ubuntu2204-base",
            labels=dict(machine.labels), network_config=tpu_v2.NetworkConfig(enable_external_ips=machine.use_external_ip),
            scheduling_config=tpu_v2.SchedulingConfig(preemptible=machine.preemptible))
        op = self._call(f"create {machine.node}", self.client().create_node,
                        request={"parent": self._parent(str(machine.zone)), "node_id": machine.node, "node": node})
        return str(op.operation.name)

    def delete_node(self, machine: Machine) -> str | None:
        """Start deleting the node; None when it is already gone."""
        try:
            op = self._call(f"delete {machine.node}", self.client().delete_node,
                            request={"name": f"{self._parent(str(machine.zone))}/nodes/{machine.node}"})
        except ApiNotFound:
            return None
        return str(op.operation.name)

    def operation(self, name: str) -> OpInfo:
        try:
            op = self._call(f"operation {name}", self.client().get_operation, request={"name": name})
        except ApiNotFound:
            return OpInfo(name, True, 5, "the operation is gone")
        error = op.error if op.HasField("error") else None
        return OpInfo(name, bool(op.done), error.code if error else None, error.message if error else "")

    def host_keys(self, machine: Machine) -> list[list[str]]:
        """Per worker, the `type base64` host keys the node publishes through guest attributes."""
        response = self._call(f"host keys of {machine.node}", self.client().get_guest_attributes,
                              request={"name": f"{self._parent(str(machine.zone))}/nodes/{machine.node}",
                                       "query_path": "hostkeys/"})
        # The v2 message carries no worker id: entries come in worker order.
        return [[f"{item.key} {item.value}" for item in attrs.query_value.items]
                for attrs in response.guest_attributes]


# What a connection failure means, out of urllib3's long chain of wrapped exceptions.
_REASONS = (("Failed to resolve", "cannot resolve {host} (DNS)"), ("Name or service not known", "cannot resolve {host} (DNS)"),
            ("Connection refused", "{host} refused the connection"), ("timed out", "{host} did not answer in time"),
            ("Network is unreachable", "no network route to {host}"), ("SSL", "TLS handshake with {host} failed"))


def network_reason(text: str) -> str:
    """One short line for a connection error (`machines` shows it; cron mails it)."""
    found = re.search(r"host='([^']+)'", text)
    host = found.group(1) if found else "the TPU API"
    for needle, reason in _REASONS:
        if needle in text:
            return reason.format(host=host)
    line = text.splitlines()[0] if text else "connection failed"
    return line if len(line) <= 200 else line[:199] + "…"


def _node_info(node: Any) -> NodeInfo:
    state = node.state.name if hasattr(node.state, "name") else str(node.state)
    health = node.health.name if node.health and hasattr(node.health, "name") else None
    endpoints = list(node.network_endpoints)
    return NodeInfo(
        name=node.name.rsplit("/", 1)[-1], state=state, health=health if health != "HEALTH_UNSPECIFIED" else None,
        health_description=node.health_description or None, accelerator=node.accelerator_type or None,
        internal=tuple(e.ip_address for e in endpoints),
        external=tuple(e.access_config.external_ip for e in endpoints if e.access_config.external_ip),
        create_time=node.create_time.isoformat() if node.create_time else "")

"""The Cloud TPU API (google-cloud-tpu, v2, REST): the only module that imports google-cloud.

It turns API answers into the plain values and errors of schema/tpu_answers.py (NodeInfo, OpInfo,
ApiRefused, ...)."""

from __future__ import annotations

import json
import re
from typing import Any

from jobtpu import timing
from jobtpu.errors import REFUSED_BY_GOOGLE, ConfigError, RemoteError, credentials_line, credentials_message
from jobtpu.schema.fleet import Machine
from jobtpu.schema.nodespec import create_body, recordable
from jobtpu.schema.tpu_answers import (
    ApiCapacity,
    ApiNotFound,
    ApiRefused,
    CredentialsFailed,
    NodeInfo,
    OpInfo,
    QueuedInfo,
    reservation_gone,
)


class TpuApi:
    """The TPU API of machines.json's `gcp` settings; its client is made on first use."""

    def __init__(self, gcp: dict[str, Any]) -> None:
        self.gcp = gcp
        self._client: Any = None

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
        scopes = ["https://www.googleapis.com/auth/cloud-platform"]
        project = self.project  # a missing gcp.project is machines.json's fault, not the credentials'
        try:
            if kind == "anonymous":
                from google.auth.credentials import AnonymousCredentials
                return AnonymousCredentials()
            import google.auth
            if kind == "default":
                # The project pays the quota: user ADC without a quota project warns on every pass.
                return google.auth.default(scopes=scopes, quota_project_id=project)[0]
            # A service-account key, or a user's ADC file: whatever `gcloud` wrote.
            return google.auth.load_credentials_from_file(kind, scopes=scopes, quota_project_id=project)[0]
        except Exception as e:  # google.auth raises several unrelated types for missing/bad credentials
            raise CredentialsFailed(credentials_message("TPU API", "gcp.credentials", kind, e)) from None

    def _parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def _call(self, what: str, method: str, **kwargs: Any) -> Any:
        """One API call (a listing is read to its last page inside), its failure classified."""
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        try:
            result = getattr(self.client(), method)(**kwargs, timeout=timing.current().api_timeout)
            return list(result) if method.startswith("list_") else result
        except auth_exc.GoogleAuthError as e:  # RefreshError, TransportError, DefaultCredentialsError...
            kind = self.gcp.get("credentials") or "default"
            if not isinstance(e, auth_exc.TransportError):
                raise CredentialsFailed(credentials_message("TPU API", "gcp.credentials", kind, e)) from None
            # The token endpoint could not be reached: the network's fault, not the key's.
            raise CredentialsFailed(credentials_line("TPU API", kind, f"no token: {network_reason(str(e))}",
                                                     "check this machine's network")) from None
        except gexc.GoogleAPICallError as e:
            message = f"TPU API {what}: {api_message(e)}"
            status = getattr(e, "code", None)
            if status == 401 or isinstance(e, gexc.Unauthenticated):  # a revoked key signing its own tokens
                kind = self.gcp.get("credentials") or "default"
                raise CredentialsFailed(credentials_message("TPU API", "gcp.credentials", kind, e,
                                                            cause=REFUSED_BY_GOOGLE)) from None
            if isinstance(e, gexc.NotFound) and reservation_gone(message):
                raise ApiCapacity(message) from None  # spot capacity gone, not a wrong request
            if isinstance(e, gexc.NotFound):  # a RemoteError like any other, unless the caller expects it
                raise ApiNotFound(message) from None
            if status == 403 or isinstance(e, gexc.PermissionDenied):
                said, hint = forbidden(api_message(e), str(self.gcp.get("project") or "?"))
                raise ApiRefused(f"TPU API {what}: {said}", hint=hint) from None
            if status in (400, 404) or isinstance(e, gexc.InvalidArgument):
                raise ApiRefused(message) from None
            if status == 429 or isinstance(e, gexc.ResourceExhausted):
                raise ApiCapacity(message) from None
            raise RemoteError(message) from None
        except gexc.GoogleAPIError as e:
            raise RemoteError(f"TPU API {what}: {_first_line(e)}") from None
        except (OSError, ValueError) as e:
            raise RemoteError(f"TPU API {what}: {network_reason(str(e))}") from None

    def list_nodes(self, zone: str) -> dict[str, NodeInfo]:
        """Every node in the zone, in one paged listing."""
        nodes = self._call(f"list nodes in {zone}", "list_nodes", request={"parent": self._parent(zone)})
        return {info.name: info for info in map(_node_info, nodes)}

    def get_node(self, zone: str, name: str) -> NodeInfo | None:
        try:
            node = self._call(f"get {name}", "get_node",
                              request={"name": f"{self._parent(zone)}/nodes/{name}"})
        except ApiNotFound:
            return None
        return _node_info(node)

    def create_node(self, machine: Machine, recorded: dict[str, Any] | None = None) -> str:
        """Create the node from its recorded spec with machines.json's overrides (nodespec)."""
        from google.cloud import tpu_v2

        body = create_body(recorded or {}, machine.node_overrides)
        try:
            node = tpu_v2.Node.from_json(json.dumps(body))
        except Exception as e:  # a recorded or overridden value the client cannot encode
            raise ApiRefused(f"TPU API create {machine.node}: bad node spec: {_first_line(e)}") from None
        op = self._call(f"create {machine.node}", "create_node",
                        request={"parent": self._parent(str(machine.zone)), "node_id": machine.node, "node": node})
        return str(op.operation.name)

    def list_queued(self, zone: str) -> dict[str, QueuedInfo]:
        """Every queued resource in the zone."""
        found = self._call(f"list queued resources in {zone}", "list_queued_resources",
                           request={"parent": self._parent(zone)})
        return {info.name: info for info in map(_queued_info, found)}

    def create_queued(self, machine: Machine, recorded: dict[str, Any] | None = None) -> str:
        """Ask for the node through a queued resource of the same name, in the machine's tier; for a
        slice, every slice of its group through one queued resource (docs/reference/machines-json.md §3.11)."""
        from google.cloud import tpu_v2

        body = create_body(recorded or {}, machine.node_overrides)
        queued = dict(machine.queued_resource or {})
        # A spot queued resource makes a spot node: the node itself names no scheduling then.
        body.pop("schedulingConfig", None)
        qid = machine.queued_resource_id
        spec: dict[str, Any] = {"parent": self._parent(str(machine.zone)), "nodeId": machine.node, "node": body}
        if machine.slice_group:  # every slice of the entry, as one: Cloud TPU names them <qid>-0, <qid>-1…
            spec = {"parent": spec["parent"], "multisliceParams": {"nodeCount": machine.slices, "nodeIdPrefix": qid},
                    "node": body}
        request: dict[str, Any] = {"tpu": {"nodeSpec": [spec]}}
        if queued.get("tier") == "spot":
            request["spot"] = {}
        elif queued.get("tier") == "guaranteed":
            request["guaranteed"] = {}
        # best-effort: the v2 API has no field for it; a queued resource without a tier waits for
        # on-demand capacity.
        if queued.get("valid_for"):
            request["queueingPolicy"] = {"validUntilDuration": f"{int(queued['valid_for'])}s"}
        try:
            resource = tpu_v2.QueuedResource.from_json(json.dumps(request))
        except Exception as e:
            raise ApiRefused(f"TPU API queue {qid}: bad node spec: {_first_line(e)}") from None
        op = self._call(f"queue {qid}", "create_queued_resource",
                        request={"parent": self._parent(str(machine.zone)), "queued_resource_id": qid,
                                 "queued_resource": resource})
        return str(op.operation.name)

    def delete_queued(self, machine: Machine) -> str | None:
        """Delete the queued resource and its nodes (force); None when it is already gone."""
        qid = machine.queued_resource_id
        try:
            op = self._call(f"delete queued resource {qid}", "delete_queued_resource",
                            request={"name": f"{self._parent(str(machine.zone))}/queuedResources/{qid}",
                                     "force": True})
        except ApiNotFound:
            return None
        return str(op.operation.name)

    def delete_node(self, machine: Machine) -> str | None:
        """Start deleting the node; None when it is already gone."""
        try:
            op = self._call(f"delete {machine.node}", "delete_node",
                            request={"name": f"{self._parent(str(machine.zone))}/nodes/{machine.node}"})
        except ApiNotFound:
            return None
        return str(op.operation.name)

    def stop_node(self, machine: Machine) -> str:
        """Start stopping the node (its VM and disk are kept); the operation's name."""
        op = self._call(f"stop {machine.node}", "stop_node",
                        request={"name": f"{self._parent(str(machine.zone))}/nodes/{machine.node}"})
        return str(op.operation.name)

    def start_node(self, machine: Machine) -> str:
        op = self._call(f"start {machine.node}", "start_node",
                        request={"name": f"{self._parent(str(machine.zone))}/nodes/{machine.node}"})
        return str(op.operation.name)

    def operation(self, name: str) -> OpInfo:
        try:
            op = self._call(f"operation {name}", "get_operation", request={"name": name})
        except ApiNotFound:
            return OpInfo(name, True, 2, "the operation is gone")  # the node's existence tells the rest
        error = op.error if op.HasField("error") else None
        return OpInfo(name, bool(op.done), error.code if error else None, error.message if error else "")

    def host_keys(self, machine: Machine) -> list[list[str]]:
        """Per worker, the `type base64` host keys the node publishes through guest attributes."""
        response = self._call(f"host keys of {machine.node}", "get_guest_attributes",
                              request={"name": f"{self._parent(str(machine.zone))}/nodes/{machine.node}",
                                       "query_path": "hostkeys/"})
        # The v2 message carries no worker id: entries come in worker order.
        return [[f"{item.key} {item.value}" for item in attrs.query_value.items]
                for attrs in response.guest_attributes]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300].rstrip(".") if text else type(e).__name__


def forbidden(text: str, project: str) -> tuple[str, str]:
    """Pure: Google's 403 paragraph as one short line and what to do. Its two common causes are an
    API not enabled in the project and a role without the permission; anything else is Google's own
    first sentence."""
    if "has not been used in project" in text or "it is disabled" in text or "SERVICE_DISABLED" in text:
        return (f"the Cloud TPU API is not enabled in project {project} (Google answered 403)",
                f"gcloud services enable tpu.googleapis.com --project {project}; passes retry after a few minutes")
    found = re.search(r"Permission '([\w.]+)' denied", text)
    if found:
        return (f"its credentials lack the permission '{found.group(1)}' in project {project} (Google answered 403)",
                "give its account roles/tpu.admin (or a role with that permission), or set gcp.credentials "
                "to a key that has it")
    first = re.split(r"(?<=\.) ", text, maxsplit=1)[0]
    return (f"{first if len(first) <= 120 else first[:119] + '…'} (Google answered 403)",
            "check the project, zone and the credentials' roles in machines.json's gcp")


def api_message(e: Any) -> str:
    """The API's own message, one line, without the request URL and its query string."""
    text = str(getattr(e, "message", "") or e)
    text = re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", text.strip())
    text = re.sub(r"https?://\S*/v2/\S*", "", text)  # a request URL quoted inside; docs links stay
    line = " ".join(text.split()) or type(e).__name__
    return line if len(line) <= 240 else line[:239] + "…"


# What a connection failure means, out of urllib3's long chain of wrapped exceptions.
_REASONS = (("Unable to connect to proxy", "cannot reach the proxy on the way to {host}"),
            ("Failed to resolve", "cannot resolve {host} (DNS)"), ("Name or service not known", "cannot resolve {host} (DNS)"),
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
        create_time=node.create_time.isoformat() if node.create_time else "", spec=_spec_of(node))


def _queued_info(resource: Any) -> QueuedInfo:
    state = resource.state.state
    name = state.name if hasattr(state, "name") else str(state)
    failed = resource.state.failed_data.error.message if resource.state.failed_data else ""
    return QueuedInfo(resource.name.rsplit("/", 1)[-1], name, failed or "")


def _spec_of(node: Any) -> dict[str, Any]:
    try:
        as_json = type(node).to_dict(node, use_integers_for_enums=False, preserving_proto_field_name=False)
    except Exception:  # an enum value this client does not know, say: the spec then stays as recorded
        return {}
    return recordable(as_json)

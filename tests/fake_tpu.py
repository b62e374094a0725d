"""A fake Cloud TPU v2 REST API on 127.0.0.1, driven by the real ``tpu_v2.TpuClient`` (REST transport).

Standard library only. State changes are lazy: every request (and every Python-side query) first
advances pending transitions whose time has come, so there are no timer threads. Node names given
to hooks and to the Python API are the short node ids; nodes are keyed by ``(zone, name)``.

Synthetic worker addresses (10.x / 34.x) are only data in JSON: never connect to them.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlencode, urlsplit

NODE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.Node"
EMPTY_TYPE = "type.googleapis.com/google.protobuf.Empty"
METADATA_TYPE = "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
QUEUED_TYPE = "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"
# google.rpc.Code numbers, and the HTTP status each maps to.
RPC_CODES: dict[str, tuple[int, int]] = {
    "CANCELLED": (1, 499), "UNKNOWN": (2, 500), "INVALID_ARGUMENT": (3, 400),
    "DEADLINE_EXCEEDED": (4, 504), "NOT_FOUND": (5, 404), "ALREADY_EXISTS": (6, 409),
    "PERMISSION_DENIED": (7, 403), "RESOURCE_EXHAUSTED": (8, 429), "FAILED_PRECONDITION": (9, 400),
    "ABORTED": (10, 409), "OUT_OF_RANGE": (11, 400), "UNIMPLEMENTED": (12, 501), "INTERNAL": (13, 500),
    "UNAVAILABLE": (14, 503), "UNAUTHENTICATED": (16, 401),
}
_OUTPUT_ONLY = ("name", "state", "health", "healthDescription", "networkEndpoints", "createTime", "id")
# The client asks for `$alt=json;enum-encoding=int`: enums travel as numbers both ways.
ENUMS: dict[str, dict[str, int]] = {
    "state": {"STATE_UNSPECIFIED": 0, "CREATING": 1, "READY": 2, "RESTARTING": 3, "REIMAGING": 4, "DELETING": 5,
              "REPAIRING": 6, "STOPPED": 8, "STOPPING": 9, "STARTING": 10, "PREEMPTED": 11, "TERMINATED": 12,
              "HIDING": 13, "HIDDEN": 14, "UNHIDING": 15, "UNKNOWN": 16},
    "health": {"HEALTH_UNSPECIFIED": 0, "HEALTHY": 1, "TIMEOUT": 3, "UNHEALTHY_TENSORFLOW": 4,
               "UNHEALTHY_MAINTENANCE": 5},
    "type": {"TYPE_UNSPECIFIED": 0, "V2": 2, "V3": 4, "V4": 7, "V5LITE_POD": 9, "V5P": 10, "V6E": 11},
    "mode": {"DISK_MODE_UNSPECIFIED": 0, "READ_WRITE": 1, "READ_ONLY": 2},
    "apiVersion": {"API_VERSION_UNSPECIFIED": 0, "V1_ALPHA1": 1, "V1": 2, "V2_ALPHA1": 3, "V2": 4},
}
QUEUED_ENUMS: dict[str, dict[str, int]] = {  # inside a queued resource's `state` object
    "state": {"STATE_UNSPECIFIED": 0, "CREATING": 1, "ACCEPTED": 2, "PROVISIONING": 3, "FAILED": 4, "DELETING": 5,
              "ACTIVE": 6, "SUSPENDING": 7, "SUSPENDED": 8, "WAITING_FOR_RESOURCES": 9},
    "stateInitiator": {"STATE_INITIATOR_UNSPECIFIED": 0, "USER": 1, "SERVICE": 2},
}
# Google's own words for a create it cannot serve now.
CAPACITY_MESSAGE = ('There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud TPU '
                    "Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x6a1c8fd2e47a0b91]")
FAILED_CREATE_MESSAGES = {"RESOURCE_EXHAUSTED": CAPACITY_MESSAGE,  # code 8
                          "NOT_FOUND": "Reservation not found"}  # code 5: spot capacity that went away
# A queued resource whose queueingPolicy ran out before capacity came (in a no-capacity zone).
QUEUED_EXPIRED_MESSAGE = ('The queued resource could not be provisioned in zone "{zone}" before its valid until time; '
                          "there was not enough capacity.")
QUOTA_MESSAGE = ("Quota limit 'TPUV3sPreemptiblePodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 32 in "
                 "zone {zone}.")


def runtime_fits(accelerator: str, runtime: str) -> bool:
    """Which runtime versions a generation boots, as the API checks on create."""
    generation = accelerator.split("-", 1)[0].lower()
    if "tpuv6e" in runtime:
        return generation == "v6e"
    if "tpuv5-lite" in runtime:
        return generation in ("v5litepod", "v5e")
    if "tpuv5" in runtime:
        return generation == "v5p"
    return generation in ("v2", "v3", "v4")


def encode_enums(value: Any, as_int: bool) -> Any:
    """Names → numbers (as_int) or numbers → names, for every enum field in a JSON document."""
    if isinstance(value, list):
        return [encode_enums(v, as_int) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        table = QUEUED_ENUMS.get(key) if "stateInitiator" in value else ENUMS.get(key)
        if table is not None and isinstance(item, str | int) and not isinstance(item, bool):
            if as_int and isinstance(item, str):
                item = table.get(item, item)
            elif not as_int and isinstance(item, int):
                item = next((name for name, number in table.items() if number == item), item)
        out[key] = encode_enums(item, as_int)
    return out


class WorkerHooks(Protocol):
    def workers_for(self, node_name: str, accelerator_type: str) -> list[tuple[str, str]]: ...
    def on_preempt(self, node_name: str) -> None: ...
    def on_create_ready(self, node_name: str) -> None: ...
    def on_delete(self, node_name: str) -> None: ...
    def host_keys(self, node_name: str) -> list[str]: ...


# Google's own answer to a token it does not accept (a deleted key's self-signed JWT), word for word.
# Google's 403s, as the API answers them: an API not enabled in the project, and a role that lacks a permission.
SERVICE_DISABLED_MESSAGE = ("Cloud TPU API has not been used in project 123456789012 before or it is disabled. Enable "
                            "it by visiting https://console.developers.google.com/apis/api/tpu.googleapis.com/overview?"
                            "project=123456789012 then retry. If you enabled this API recently, wait a few minutes for "
                            "the action to propagate to our systems and retry.")
PERMISSION_MESSAGE = ("Permission 'tpu.nodes.list' denied on resource '//tpu.googleapis.com/projects/{project}/locations/"
                      "{zone}' (or it may not exist).")
UNAUTHENTICATED_MESSAGE = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login "
                           "cookie or other valid authentication credential. "
                           "See https://developers.google.com/identity/sign-in/web/devconsole-project.")


class ApiError(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Pending:
    """A transition in flight: at ``due`` the node goes to ``target`` (None: it disappears)."""

    kind: str  # create | delete | stop | start
    target: str | None
    due: float
    op: str
    error: tuple[str, str] | None = None  # (code name, message) for a failing create
    busy: bool = False  # a thread is running its hook


@dataclass
class _Op:
    name: str
    kind: str
    target: str  # full node name
    created: str
    done: bool = False
    response: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def _now_str() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _type_of_config(config: Any) -> str | None:
    """An acceleratorConfig's type name, as the type string's generation (V5P → "v5p-8")."""
    if not isinstance(config, dict) or not config.get("type"):
        return None
    generation = {"V5LITE_POD": "v5litepod"}.get(str(config["type"]), str(config["type"]).lower())
    chips = 1
    for part in str(config.get("topology") or "2x2").split("x"):
        chips *= int(part) if part.isdigit() else 1
    return f"{generation}-{chips * 2 if generation in ('v2', 'v3', 'v4', 'v5p') else chips}"


def _check_node_body(body: dict[str, Any]) -> None:
    """What the API refuses in a node to create: one way to name the accelerator, a runtime version
    that fits it."""
    if body.get("acceleratorType") and body.get("acceleratorConfig"):
        raise ApiError("INVALID_ARGUMENT", "Only one of Node.accelerator_type and Node.accelerator_config may be set")
    accel = str(body.get("acceleratorType") or _type_of_config(body.get("acceleratorConfig")) or "")
    runtime = str(body.get("runtimeVersion") or "")
    if not accel:
        raise ApiError("INVALID_ARGUMENT", "Node.accelerator_type or Node.accelerator_config is required")
    if not runtime:
        raise ApiError("INVALID_ARGUMENT", "Node.runtime_version is required")
    if not runtime_fits(accel, runtime):
        raise ApiError("INVALID_ARGUMENT", f'Invalid runtime version "{runtime}" for accelerator type "{accel}"')


def _check_multislice(spec: dict[str, Any], params: dict[str, Any]) -> None:
    """A multislice nodeSpec as Google's API description has it: multisliceParams instead of nodeId
    (one of `name_strategy`), nodeCount > 1, a prefix of node id characters."""
    if spec.get("nodeId"):
        raise ApiError("INVALID_ARGUMENT", "tpu.nodeSpec[0]: node_id and multislice_params are mutually exclusive")
    count = params.get("nodeCount")
    if not isinstance(count, int) or count < 2:
        raise ApiError("INVALID_ARGUMENT", f"tpu.nodeSpec[0].multisliceParams.nodeCount must be > 1 (got {count!r})")
    prefix = params.get("nodeIdPrefix", "")
    if prefix and not re.fullmatch(r"[A-Za-z0-9_.~+%-]+", str(prefix)):
        raise ApiError("INVALID_ARGUMENT", f"tpu.nodeSpec[0].multisliceParams.nodeIdPrefix {prefix!r} is not a valid id")


def synthetic_workers(accelerator_type: str, seed: int = 0) -> list[tuple[str, str]]:
    """One (internal, external) pair per host: N//8 hosts for an ``vX-N`` type (at least one)."""
    try:
        hosts = max(1, int(accelerator_type.rsplit("-", 1)[1]) // 8)
    except (IndexError, ValueError):
        hosts = 1
    return [(f"10.{seed % 250}.{i // 250}.{i % 250 + 2}", f"34.{seed % 250}.{i // 250}.{i % 250 + 2}")
            for i in range(hosts)]


class FakeTpuApi:
    """The fake API server. ``requests`` logs (method, path without query) of every request served."""

    def __init__(self, *, ready_after: float = 0.5, page_size: int = 50,
                 worker_hooks: WorkerHooks | None = None, delete_after: float = 0.0) -> None:
        self.ready_after = ready_after  # seconds CREATING/STOPPING/STARTING last (0: done at next request)
        self.page_size = page_size  # list page size when the client sends no pageSize
        self.worker_hooks = worker_hooks
        self.delete_after = delete_after  # seconds a node stays DELETING
        self.requests: list[tuple[str, str]] = []
        self.url = ""
        self._lock = threading.RLock()
        self._nodes: dict[tuple[str, str], dict[str, Any]] = {}
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._ops: dict[str, _Op] = {}
        self._held: set[tuple[str, str]] = set()
        self._host_keys: dict[tuple[str, str], list[str]] = {}
        self._fail_creates: list[str] = []
        self._queued: dict[tuple[str, str], dict[str, Any]] = {}  # queued resources, keyed like nodes
        self._queue_held: set[tuple[str, str]] = set()
        self._queued_until: dict[tuple[str, str], float] = {}  # a queueingPolicy's end, on the monotonic clock
        self.no_capacity_zones: set[str] = set()  # every create there ends in error code 8
        self.revoked_keys: set[str] = set()  # private_key_id of service-account keys deleted since
        self.create_bodies: list[dict[str, Any]] = []  # every create request's node, as sent (enums by name)
        self._injected: list[list[Any]] = []  # [method, path_contains, code, left, message, serve]
        self._stalls: list[tuple[str, str, threading.Event]] = []  # requests whose answer waits for the event
        self._seq = 0
        self._server: ThreadingHTTPServer | None = None

    # ----- lifecycle -----
    def start(self) -> FakeTpuApi:
        api = self

        class Handler(_Handler):
            fake = api

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-tpu", daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeTpuApi:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- test controls -----
    def add_node(self, project: str, zone: str, name: str, *, accelerator_type: str = "v3-8",
                 state: str = "READY", preemptible: bool = False, spot: bool = False,
                 workers: Sequence[tuple[str, str]] | None = None,
                 runtime_version: str = "tpu-ubuntu2204-base",
                 labels: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
        """A node made out of band (as gcloud would: external IPs unless networkConfig says no);
        `fields` are more create fields by their API names (metadata, tags, serviceAccount, ...)."""
        body = {"acceleratorType": accelerator_type, "runtimeVersion": runtime_version,
                "schedulingConfig": {"preemptible": preemptible, "spot": spot}, "labels": dict(labels or {}),
                "networkConfig": {"enableExternalIps": True}, **fields}
        with self._lock:
            node = self._new_node(project, zone, name, body, state, workers)
            self._nodes[(zone, name)] = node
            return json.loads(json.dumps(node))

    def hold_queued(self, zone: str, name: str, hold: bool = True) -> None:
        """Keep the queued resource (existing or future) WAITING_FOR_RESOURCES until released."""
        with self._lock:
            (self._queue_held.add if hold else self._queue_held.discard)((zone, name))

    def queued_state(self, zone: str, name: str) -> str | None:
        self._advance()
        with self._lock:
            found = self._queued_view((zone, name))
            return None if found is None else str(found["state"]["state"])

    def queued(self, zone: str, name: str) -> dict[str, Any] | None:
        """The queued resource as the API shows it (enums by name), or None."""
        self._advance()
        with self._lock:
            found = self._queued_view((zone, name))
            return None if found is None else json.loads(json.dumps(found))

    def remove_node(self, zone: str, name: str) -> None:
        """The node is gone at once, without an operation (deleted long ago)."""
        with self._lock:
            self._abort((zone, name), "node removed")
            self._nodes.pop((zone, name), None)

    def preempt(self, zone: str, name: str) -> None:
        """Google takes the node; a queued resource owning it is SUSPENDED (and keeps its quota). One
        node of a multislice queued resource: the queued resource is SUSPENDED, its other nodes stay."""
        self.set_state(zone, name, "PREEMPTED")
        with self._lock:
            owner = str(self._nodes[(zone, name)].get("queuedResource") or "").rpartition("/")[2] or name
            if (zone, owner) in self._queued:
                self._queued[(zone, owner)]["state"] = {"state": "SUSPENDED", "stateInitiator": "SERVICE"}
        if self.worker_hooks is not None:
            self.worker_hooks.on_preempt(name)

    def set_state(self, zone: str, name: str, state: str, *, health: str | None = None,
                  health_description: str | None = None) -> None:
        with self._lock:
            node = self._nodes[(zone, name)]
            self._abort((zone, name), f"node went {state}")
            node["state"] = state
            if health is not None:
                node["health"] = health
            if health_description is not None:
                node["healthDescription"] = health_description

    def fail_next_creates(self, n: int, code: str = "RESOURCE_EXHAUSTED") -> None:
        """The next n creates are accepted, and their operations end in error (code 8, Google's
        capacity message, for RESOURCE_EXHAUSTED)."""
        with self._lock:
            self._fail_creates.extend([code] * n)

    def hold_creating(self, zone: str, name: str, hold: bool = True) -> None:
        """Keep the node (existing or future) in CREATING until released."""
        with self._lock:
            (self._held.add if hold else self._held.discard)((zone, name))

    def set_host_keys(self, zone: str, name: str, keys: list[str]) -> None:
        """Guest-attribute host keys ("ssh-ed25519 AAAA...", one per worker) when there are no hooks."""
        with self._lock:
            self._host_keys[(zone, name)] = list(keys)

    def inject_error(self, method: str, path_contains: str, code: str = "UNAVAILABLE", n: int = 1,
                     message: str | None = None, serve: bool = False) -> None:
        """The next n requests whose method matches and whose path (with its sorted query string, like
        "pageToken=1") contains path_contains answer with that error. `serve`: the request is carried out
        all the same and only its answer is lost (a timeout or 503 after Google did the work)."""
        with self._lock:
            self._injected.append([method, path_contains, code, n, message, serve])

    def stall_answers(self, method: str, path_contains: str) -> threading.Event:
        """Requests that match (like inject_error) are carried out, but their answer waits until the
        returned event is set: a caller killed meanwhile never learns what it did."""
        release = threading.Event()
        with self._lock:
            self._stalls.append((method, path_contains, release))
        return release

    def quota_exceeded_next_creates(self, n: int, zone: str) -> None:
        """The next n creates answer HTTP 429 with Google's quota text."""
        self.inject_error("POST", "/nodes", "RESOURCE_EXHAUSTED", n, QUOTA_MESSAGE.format(zone=zone))

    def node(self, zone: str, name: str) -> dict[str, Any] | None:
        self._advance()
        with self._lock:
            node = self._nodes.get((zone, name))
            return None if node is None else json.loads(json.dumps(node))

    def count(self, method: str, path_contains: str) -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and path_contains in p)

    def list_calls(self, zone: str | None = None) -> int:
        """Number of list-nodes requests (optionally for one zone)."""
        with self._lock:
            return sum(1 for m, p in self.requests if m == "GET" and p.endswith("/nodes")
                       and (zone is None or f"/locations/{zone}/" in p))

    # ----- internals -----
    def _new_node(self, project: str, zone: str, name: str, body: dict[str, Any], state: str,
                  workers: Sequence[tuple[str, str]] | None) -> dict[str, Any]:
        accel = str(body.get("acceleratorType") or _type_of_config(body.get("acceleratorConfig")) or "v3-8")
        if not workers:
            if self.worker_hooks is not None:
                workers = self.worker_hooks.workers_for(name, accel)
            else:
                self._seq += 1
                workers = synthetic_workers(accel, self._seq)
        node = {k: v for k, v in body.items() if k not in _OUTPUT_ONLY}
        node["schedulingConfig"] = {"preemptible": False, "spot": False, **node.get("schedulingConfig", {})}
        network = node["networkConfig"] = {"network": "default", "subnetwork": "default",
                                           "enableExternalIps": False, **node.get("networkConfig", {})}
        node.setdefault("labels", {})
        external = bool(network["enableExternalIps"])  # the raw API gives none unless asked
        node.update({
            "name": f"projects/{project}/locations/{zone}/nodes/{name}", "acceleratorType": accel,
            "state": state, "health": "HEALTHY", "healthDescription": "", "createTime": _now_str(),
            "networkEndpoints": [{"ipAddress": i, "port": 8470, **({"accessConfig": {"externalIp": e}} if external
                                                                  else {})} for i, e in workers],
        })
        return node

    def _new_op(self, kind: str, node_name: str) -> _Op:
        self._seq += 1
        parent = node_name.split("/nodes/")[0]
        op = _Op(f"{parent}/operations/operation-{self._seq}-{time.time_ns():x}", kind, node_name, _now_str())
        self._ops[op.name] = op
        return op

    def _advance(self) -> None:
        """Apply every transition that is due; hooks run outside the lock, before the state is visible."""
        with self._lock:
            for key, queued in self._queued.items():
                if queued["state"]["state"] != "WAITING_FOR_RESOURCES" or key in self._queue_held:
                    continue
                if key[0] not in self.no_capacity_zones:
                    self._provision(key, queued)
                elif time.monotonic() > self._queued_until.get(key, float("inf")):
                    queued["state"] = {"state": "FAILED", "stateInitiator": "SERVICE", "failedData": {"error": {
                        "code": 4, "message": QUEUED_EXPIRED_MESSAGE.format(zone=key[0])}}}
        while True:
            with self._lock:
                now = time.monotonic()
                due = [(k, p) for k, p in self._pending.items() if not p.busy and now >= p.due
                       and not (p.kind == "create" and k in self._held)]
                if not due:
                    return
                key, pend = due[0]
                pend.busy = True
            hook: Callable[[str], None] | None = None
            if self.worker_hooks is not None and pend.error is None:
                hook = {"create": self.worker_hooks.on_create_ready,
                        "delete": self.worker_hooks.on_delete,
                        # A stopped VM keeps its disk and host keys (hooks a fleet may lack).
                        "stop": getattr(self.worker_hooks, "on_stop", None),
                        "start": getattr(self.worker_hooks, "on_start", None)}.get(pend.kind)
            try:
                if hook is not None:
                    hook(key[1])
            finally:
                with self._lock:
                    self._finish(key, pend)

    def _finish(self, key: tuple[str, str], pend: _Pending) -> None:
        if self._pending.get(key) is not pend:
            return  # overridden meanwhile (set_state, preempt)
        del self._pending[key]
        op = self._ops[pend.op]
        op.done = True
        if pend.error is not None:
            self._nodes.pop(key, None)
            code, message = pend.error
            op.error = {"code": RPC_CODES.get(code, (2, 500))[0], "message": message}
        elif pend.target is None:
            self._nodes.pop(key, None)
            op.response = {"@type": EMPTY_TYPE}
        else:
            node = self._nodes[key]
            node["state"] = pend.target
            op.response = {"@type": NODE_TYPE, **json.loads(json.dumps(node))}

    def _abort(self, key: tuple[str, str], why: str) -> None:
        """An operation in flight on this node ends in error ABORTED."""
        pend = self._pending.pop(key, None)
        if pend is not None:
            op = self._ops[pend.op]
            op.done, op.error = True, {"code": 10, "message": f"ABORTED: {why}"}

    def _start_transition(self, kind: str, key: tuple[str, str], during: str, target: str | None,
                          delay: float, error: tuple[str, str] | None = None) -> dict[str, Any]:
        node = self._nodes[key]
        self._abort(key, f"superseded by {kind}")
        node["state"] = during
        op = self._new_op(kind, node["name"])
        self._pending[key] = _Pending(kind, target, time.monotonic() + delay, op.name, error)
        return self._op_json(op)

    def _op_json(self, op: _Op) -> dict[str, Any]:
        out: dict[str, Any] = {"name": op.name, "done": op.done, "metadata": {
            "@type": METADATA_TYPE, "createTime": op.created, "target": op.target, "verb": op.kind,
            "apiVersion": "v2"}}
        if op.error is not None:
            out["error"] = op.error
        elif op.response is not None:
            out["response"] = op.response
        return out

    def check_token(self, authorization: str) -> None:
        """A self-signed JWT (what the client makes of a service-account key) from a revoked key is
        refused, as Google does; no token at all is served (tests use anonymous credentials)."""
        token = authorization.removeprefix("Bearer ").strip()
        if token.count(".") != 2:
            return
        try:
            header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
        except ValueError:
            header = {}
        if header.get("kid") in self.revoked_keys:
            raise ApiError("UNAUTHENTICATED", UNAUTHENTICATED_MESSAGE)

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        """Serve one request; raise ApiError for an error answer."""
        lost: ApiError | None = None
        with self._lock:
            self.requests.append((method, path))
            for inj in self._injected:
                if inj[3] > 0 and inj[0] == method and inj[1] in f"{path}?{urlencode(sorted(query.items()))}":
                    inj[3] -= 1
                    error = ApiError(inj[2], inj[4] or f"injected {inj[2]}")
                    if not inj[5]:
                        raise error
                    lost = error
                    break
        self._advance()
        as_int = "enum-encoding=int" in query.get("$alt", "")
        with self._lock:  # answer a copy, serialised outside the lock
            answer = json.loads(json.dumps(self._route(method, path, query, encode_enums(body, False))))
        where = f"{path}?{urlencode(sorted(query.items()))}"
        for stall_method, contains, release in list(self._stalls):
            if stall_method == method and contains in where:
                release.wait(timeout=120)
        if lost is not None:
            raise lost
        return encode_enums(answer, as_int)

    def _route(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        parts = path.strip("/").split("/")
        if len(parts) < 6 or parts[:2] != ["v2", "projects"] or parts[3] != "locations":
            raise ApiError("NOT_FOUND", f"no route for {method} {path}")
        project, zone, rest = parts[2], parts[4], parts[5:]
        if rest[0] == "operations" and len(rest) == 2 and method == "GET":
            op = self._ops.get("/".join(parts[1:]))
            if op is None:
                raise ApiError("NOT_FOUND", f"operation {'/'.join(parts[1:])} not found")
            return self._op_json(op)
        if rest[0] == "queuedResources":
            return self._route_queued(method, project, zone, rest, query, body)
        if rest == ["nodes"] and method == "GET":
            return self._list(project, zone, query)
        if rest == ["nodes"] and method == "POST":
            return self._create(project, zone, query.get("nodeId", ""), body)
        if rest[0] != "nodes" or len(rest) != 2:
            raise ApiError("NOT_FOUND", f"no route for {method} {path}")
        name, _, verb = rest[1].partition(":")
        key = (zone, name)
        node = self._nodes.get(key)
        if node is None or not node["name"].startswith(f"projects/{project}/"):
            raise ApiError("NOT_FOUND", f"node projects/{project}/locations/{zone}/nodes/{name} not found")
        if method == "GET" and not verb:
            return node
        if method == "DELETE" and not verb:
            return self._start_transition("delete", key, "DELETING", None, self.delete_after)
        if method == "POST" and verb == "getGuestAttributes":
            return self._guest_attributes(key, node, body)
        if method == "POST" and verb == "stop":
            return self._start_transition("stop", key, "STOPPING", "STOPPED", self.ready_after)
        if method == "POST" and verb == "start":
            return self._start_transition("start", key, "STARTING", "READY", self.ready_after)
        raise ApiError("NOT_FOUND", f"no route for {method} {path}")

    def _list(self, project: str, zone: str, query: dict[str, str]) -> dict[str, Any]:
        prefix = f"projects/{project}/locations/{zone}/nodes/"
        nodes = sorted((n for n in self._nodes.values() if n["name"].startswith(prefix)),
                       key=lambda n: n["name"])
        size = int(query.get("pageSize") or 0) or self.page_size
        try:
            start = int(query.get("pageToken") or 0)
        except ValueError:
            raise ApiError("INVALID_ARGUMENT", "bad pageToken") from None
        out: dict[str, Any] = {"nodes": nodes[start:start + size]}
        if start + size < len(nodes):
            out["nextPageToken"] = str(start + size)
        return out

    def _create(self, project: str, zone: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if not name:
            raise ApiError("INVALID_ARGUMENT", "nodeId is required")
        if (zone, name) in self._nodes:
            raise ApiError("ALREADY_EXISTS", f"node projects/{project}/locations/{zone}/nodes/{name} already exists")
        self.create_bodies.append(json.loads(json.dumps(body)))
        _check_node_body(body)
        self._nodes[(zone, name)] = self._new_node(project, zone, name, body, "CREATING", None)
        error = None
        if self._fail_creates or zone in self.no_capacity_zones:
            code = self._fail_creates.pop(0) if zone not in self.no_capacity_zones else "RESOURCE_EXHAUSTED"
            error = (code, FAILED_CREATE_MESSAGES.get(code, "{code}: refused").format(zone=zone, code=code))
        return self._start_transition("create", (zone, name), "CREATING", "READY", self.ready_after, error)

    # ----- queued resources -----
    def _route_queued(self, method: str, project: str, zone: str, rest: list[str], query: dict[str, str],
                      body: dict[str, Any]) -> dict[str, Any]:
        parent = f"projects/{project}/locations/{zone}"
        if rest == ["queuedResources"] and method == "GET":
            found = [v for k in sorted(self._queued) if k[0] == zone and (v := self._queued_view(k)) is not None]
            return {"queuedResources": found}
        if rest == ["queuedResources"] and method == "POST":
            return self._create_queued(project, zone, query.get("queuedResourceId", ""), body)
        key = (zone, rest[1] if len(rest) == 2 else "")
        queued = self._queued_view(key)
        if queued is None:
            raise ApiError("NOT_FOUND", f"queued resource {parent}/queuedResources/{key[1]} not found")
        if method == "GET":
            return queued
        if method == "DELETE":
            owned = [k for k in self._owned(key) if k in self._nodes]
            if owned and query.get("force") != "true":
                raise ApiError("FAILED_PRECONDITION", "the queued resource still has a node; delete with force")
            self._queued[key]["state"] = {"state": "DELETING", "stateInitiator": "USER"}
            for owned_key in owned:
                self._start_transition("delete", owned_key, "DELETING", None, self.delete_after)
            op = self._new_op("delete", f"{parent}/queuedResources/{key[1]}")
            op.done, op.response = True, {"@type": EMPTY_TYPE}
            return self._op_json(op)
        raise ApiError("NOT_FOUND", f"no route for {method} queuedResources")

    def _create_queued(self, project: str, zone: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        parent = f"projects/{project}/locations/{zone}"
        if not name:
            raise ApiError("INVALID_ARGUMENT", "queuedResourceId is required")
        if (zone, name) in self._queued:
            raise ApiError("ALREADY_EXISTS", f"queued resource {parent}/queuedResources/{name} already exists")
        specs = (body.get("tpu") or {}).get("nodeSpec") or []
        multislice = specs[0].get("multisliceParams") if len(specs) == 1 else None
        if multislice is not None:
            _check_multislice(specs[0], multislice)
            if any(k in self._nodes for k in self._owned((zone, name), specs[0])):
                raise ApiError("ALREADY_EXISTS", f"a node named {multislice.get('nodeIdPrefix') or name}-<n> "
                                                 f"already exists in {parent}")
        elif len(specs) != 1 or specs[0].get("nodeId") != name or (zone, name) in self._nodes:
            raise ApiError("INVALID_ARGUMENT", "tpu.nodeSpec must name one node that does not exist yet")
        node = specs[0].get("node") or {}
        self.create_bodies.append(json.loads(json.dumps(node)))
        _check_node_body(node)
        self._queued[(zone, name)] = {
            "name": f"{parent}/queuedResources/{name}", "createTime": _now_str(),
            **{k: v for k, v in body.items() if k in ("tpu", "spot", "guaranteed", "queueingPolicy")},
            "state": {"state": "WAITING_FOR_RESOURCES", "stateInitiator": "USER"}}
        valid_for = str((body.get("queueingPolicy") or {}).get("validUntilDuration") or "")
        if valid_for.endswith("s"):
            self._queued_until[(zone, name)] = time.monotonic() + float(valid_for[:-1])
        op = self._new_op("create", f"{parent}/queuedResources/{name}")
        op.done, op.response = True, {"@type": QUEUED_TYPE, **json.loads(json.dumps(self._queued[(zone, name)]))}
        return self._op_json(op)

    def _owned(self, key: tuple[str, str], spec: dict[str, Any] | None = None) -> list[tuple[str, str]]:
        """The nodes a queued resource makes: its nodeId, or for multislice <nodeIdPrefix>-0 … -(nodeCount-1)
        (the queued resource's id when no prefix is given, as Google's API description says)."""
        if spec is None:
            spec = self._queued[key]["tpu"]["nodeSpec"][0]
        multislice = spec.get("multisliceParams")
        if multislice is None:
            return [key]
        prefix = multislice.get("nodeIdPrefix") or key[1]
        return [(key[0], f"{prefix}-{i}") for i in range(int(multislice["nodeCount"]))]

    def _provision(self, key: tuple[str, str], queued: dict[str, Any]) -> None:
        """Capacity came: the nodes are created, owned by their queued resource (called under the lock)."""
        spec = queued["tpu"]["nodeSpec"][0]
        project = spec["parent"].split("/")[1]
        body = {**spec.get("node", {}), "queuedResource": queued["name"]}
        if "multisliceParams" in spec:
            body["multisliceNode"] = True
        if "spot" in queued:
            body["schedulingConfig"] = {"spot": True}
        for node_key in self._owned(key):
            self._nodes[node_key] = self._new_node(project, key[0], node_key[1], body, "CREATING", None)
            self._start_transition("create", node_key, "CREATING", "READY", self.ready_after)
        queued["state"] = {"state": "PROVISIONING", "stateInitiator": "SERVICE"}

    def _queued_view(self, key: tuple[str, str]) -> dict[str, Any] | None:
        """The queued resource as the API shows it now: ACTIVE once every node is ready; gone once a
        deleted one's nodes are gone."""
        queued = self._queued.get(key)
        if queued is None:
            return None
        nodes = [self._nodes.get(k) for k in self._owned(key)]
        state = queued["state"]["state"]
        if state == "DELETING" and all(node is None for node in nodes):
            del self._queued[key]
            self._queued_until.pop(key, None)
            return None
        if state == "PROVISIONING" and all(node is not None and node["state"] == "READY" for node in nodes):
            queued["state"] = {"state": "ACTIVE", "stateInitiator": "SERVICE"}
        return queued

    def _guest_attributes(self, key: tuple[str, str], node: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        n = len(node["networkEndpoints"])
        keys = self.worker_hooks.host_keys(key[1]) if self.worker_hooks else self._host_keys.get(key, [])
        query_path = str(body.get("queryPath") or "")
        wanted = [int(w) for w in body.get("workerIds") or []] or list(range(n))
        out = []
        for w in wanted:
            if not 0 <= w < n:
                raise ApiError("INVALID_ARGUMENT", f"worker {w} out of range")
            items = []
            ktype, _, value = (keys[w] if w < len(keys) else "").strip().partition(" ")
            if ktype and (query_path.rstrip("/") in ("", "hostkeys") or query_path == f"hostkeys/{ktype}"):
                items.append({"namespace": "hostkeys", "key": ktype, "value": value.split(" ")[0]})
            out.append({"queryPath": query_path or "hostkeys/", "queryValue": {"items": items},
                        "workerId": str(w)})
        return {"guestAttributes": out}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else keep-alive answers wait ~40 ms on delayed ACKs
    fake: FakeTpuApi

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path == "/token":  # OAuth token endpoint: it refuses every key and refresh token (revoked)
            revoked = ("Token has been expired or revoked." if b"grant_type=refresh_token" in raw
                       else "Invalid JWT Signature.")
            self._answer(400, {"error": "invalid_grant", "error_description": revoked})
            return
        try:
            try:
                body = json.loads(raw) if raw.strip() else {}
            except ValueError:
                raise ApiError("INVALID_ARGUMENT", "request body is not JSON") from None
            self.fake.check_token(self.headers.get("Authorization") or "")
            status, payload = 200, self.fake.handle(self.command, url.path, query, body)
        except ApiError as e:
            status = RPC_CODES.get(e.status, (2, 500))[1]
            payload = {"error": {"code": status, "message": e.message, "status": e.status}}
        except Exception as e:  # a bug or a failing hook: answer 500 rather than drop the connection
            status, payload = 500, {"error": {"code": 500, "message": repr(e), "status": "INTERNAL"}}
        self._answer(status, payload)

    def _answer(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

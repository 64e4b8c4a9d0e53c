"""An HTTP-level fake Kubernetes API server for tests (threaded http.server on 127.0.0.1).

It speaks the wire protocol the real `kubernetes` client uses: discovery (/api, /apis, group
versions, /version, /openapi/v3), create / get / list (label selectors, limit, metadata-only lists
as PartialObjectMetadataList) / update (PUT) / delete of Jobs,
Services, ConfigMaps, Leases, PyTorchJobs, TrainJobs and ClusterTrainingRuntimes; Pods, Events and Kueue
Workloads as their controllers write them (test helpers), pods/log with container, previous,
tailLines, limitBytes and follow (a chunked stream that ends when the container ends), dryRun=All,
SelfSubjectAccessReviews,
fieldValidation=Strict, bearer-token auth, RBAC denials, and `Status` error bodies as a real server writes them.
An update is the generic registry's: the resourceVersion read, else 409 Conflict (a Lease allows no update
without one: 422; a PUT to a Lease that does not exist creates it); a delete's preconditions (uid,
resourceVersion) are checked (409). The garbage collector deletes an object's dependents with it (a dependent
with another owner left keeps that one), and, a moment after it is written, an object none of whose owners exists
(`collected` lists what it deleted so). Custom resources are validated
against the real CRD schemas (crd_schema), native objects by the `kubernetes` models plus the
API server's own rules for what is used here, and the operators' admission webhooks are emulated
for the rules the plugin must respect.

Faults are injected per request (method and resource, optionally one object's name), once, a number of
times or always (`times=None`): an error answer (`fail`, with `Retry-After` if asked: 429, 500 once, 500
always), no answer at all (`drop`, `reset`: the connection closed or reset before the request is done), an
answer lost after the request was done (`drop(..., after=True)`, `reset(..., after=True)`: the object is
created, the client never hears of it), an answer late (`delay`: done, answered after some seconds —
past the client's timeout, say), and a request done late (`slow`: an overloaded server, which writes the object
seconds after it was asked, when the client may have given up). Dry runs are never faulted (they change nothing).
"""

from __future__ import annotations

import copy
import json
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from datetime import timezone
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from urllib.parse import urlsplit

import yaml

from tests.support import crd_schema
from tests.support.loopback_http import serve
from tests.support.native import micro_time_problem
from tests.support.native import native_errors

TOKEN = "fake-token"
USER = "tester"


@dataclass
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool = True
    schema: Any = None  # crd_schema.CRDSchema for custom resources
    model: str | None = None  # kubernetes client model for native objects
    # The kind's registry strategy (AllowUnconditionalUpdate, AllowCreateOnUpdate): an update (PUT) without a
    # resourceVersion is done or refused with 422; a PUT to a name that does not exist creates it or is a 404.
    unconditional_update: bool = True
    create_on_update: bool = False

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


DROP = 0  # a Fault status: no answer, the connection is closed
# What a fault does (Fault.mode)
ANSWER = "answer"  # answer `status` instead of doing the request
CLOSE = "close"  # close the connection without an answer (FIN)
RESET = "reset"  # reset the connection (RST) without an answer
LATE = "late"  # answer `delay` seconds late
SLOW = "slow"  # do the request `delay` seconds late, then answer (an overloaded server: commits after the client left)


@dataclass
class Fault:
    method: str
    plural: str  # "pods", or a subresource: "pods/log"
    status: int
    reason: str
    message: str
    times: int | None = 1  # None: always
    mode: str = ANSWER
    after: bool = False  # CLOSE / RESET once the request was done (its answer lost)
    delay: float = 0.0  # LATE: seconds
    retry_after: int | None = None  # ANSWER: a Retry-After header
    name: str | None = None  # only requests on this object
    served: int = 0  # how often it struck

    def matches(self, method: str, plural: str, name: str | None, query: dict) -> bool:
        return (
            self.method == method
            and self.plural == plural
            and (self.times is None or self.times > 0)
            and (self.name is None or self.name == name)
            and query.get("dryRun") != "All"
        )

    def strike(self) -> None:
        self.served += 1
        if self.times is not None:
            self.times -= 1


@dataclass
class Faulted:
    """What `_route` answers when a fault struck: the real answer (when the request was done) and the fault."""

    fault: Fault
    code: int = 0
    payload: Any = None


@dataclass
class FakeKube:
    """Configure what the cluster serves, then `start()`; `kubeconfig(path)` writes a kubeconfig."""

    pytorchjob: bool = False
    trainer_mechanism: str | None = None  # None: Trainer v2 not installed
    torch_runtime: bool = True
    trainer_version: str | None = None  # kubeflow-trainer-public ConfigMap; None: absent
    publish_openapi: bool = True
    namespaces: tuple[str, ...] = ("default", "ml")
    kueue: bool = False  # serve kueue.x-k8s.io/v1beta1 Workloads
    forbidden: set = field(default_factory=set)  # {(verb, plural)}
    denied: set = field(default_factory=set)  # {(user, verb, plural[/sub], namespace)}: SubjectAccessReviews' denials
    faults: list = field(default_factory=list)
    objects: dict = field(default_factory=dict)  # (group_version, plural, namespace, name) -> obj
    requests: list = field(default_factory=list)  # (method, path, query)
    logs: dict = field(default_factory=dict)  # (namespace, pod, container, previous) -> text
    # Runs the pods created through the API (kubelet.py), if set: kubelet(fake, pod, namespace).
    kubelet: Any = None

    def __post_init__(self):
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._rv = 0
        self.collected: list[str] = []  # `Kind/name` of what the garbage collector deleted: its owners were gone
        self.kinds = [
            Kind("Namespace", "", "v1", "namespaces", namespaced=False),
            Kind("Service", "", "v1", "services", model="V1Service"),
            Kind("ConfigMap", "", "v1", "configmaps", model="V1ConfigMap"),
            Kind("Job", "batch", "v1", "jobs", model="V1Job"),
            Kind("CronJob", "batch", "v1", "cronjobs", model="V1CronJob"),
            Kind("Pod", "", "v1", "pods", model="V1Pod"),
            Kind("Event", "", "v1", "events"),
            Kind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", model="V1PersistentVolumeClaim"),
            Kind("Secret", "", "v1", "secrets", model="V1Secret"),
            Kind(
                "Lease",
                "coordination.k8s.io",
                "v1",
                "leases",
                model="V1Lease",
                unconditional_update=False,  # pkg/registry/coordination/lease/strategy.go
                create_on_update=True,
            ),
        ]
        if self.kueue:
            self.kinds.append(Kind("Workload", "kueue.x-k8s.io", "v1beta1", "workloads"))
        if self.pytorchjob:
            self.kinds.append(
                Kind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", schema=crd_schema.pytorchjob_schema())
            )
        if self.trainer_mechanism:
            self.kinds.append(
                Kind(
                    "TrainJob",
                    "trainer.kubeflow.org",
                    "v1alpha1",
                    "trainjobs",
                    schema=crd_schema.trainjob_schema(self.trainer_mechanism),
                )
            )
            self.kinds.append(
                Kind(
                    "ClusterTrainingRuntime",
                    "trainer.kubeflow.org",
                    "v1alpha1",
                    "clustertrainingruntimes",
                    namespaced=False,
                )
            )
            self.kinds.append(
                Kind(
                    "CustomResourceDefinition",
                    "apiextensions.k8s.io",
                    "v1",
                    "customresourcedefinitions",
                    namespaced=False,
                )
            )
            if self.torch_runtime:
                self._store(
                    self.kind("clustertrainingruntimes"), None, {"metadata": {"name": "torch-distributed"}, "spec": {}}
                )
            if self.trainer_version:
                self._store(
                    self.kind("configmaps"),
                    "kubeflow-system",
                    {
                        "metadata": {"name": "kubeflow-trainer-public"},
                        "data": {"kubeflow_trainer_version": self.trainer_version},
                    },
                )
        for ns in self.namespaces:
            self._store(self.kind("namespaces"), None, {"metadata": {"name": ns}})

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeKube:
        fake = self

        class Handler(_Handler):
            server_state = fake

        self._server = serve(Handler, poll_interval=0.05)
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self, path: Path, namespace: str = "ml", token: str = TOKEN, server: str | None = None) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": server or self.url}}],
            "users": [{"name": USER, "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": USER, "namespace": namespace}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # --- test helpers ------------------------------------------------------------------------

    def kind(self, plural: str) -> Kind:
        return next(k for k in self.kinds if k.plural == plural)

    def stored(self, plural: str, namespace: str | None = "ml") -> list[dict]:
        kind = self.kind(plural)
        with self._lock:
            return [
                copy.deepcopy(o)
                for (gv, p, ns, _), o in sorted(self.objects.items())
                if gv == kind.group_version and p == plural and ns == (namespace if kind.namespaced else None)
            ]

    def run_objects(self, namespace: str = "ml") -> list[str]:
        """`Kind/name` of every object the plugin created (managed-by label), sorted."""
        with self._lock:
            return sorted(
                f"{o['kind']}/{o['metadata']['name']}"
                for (_, _, ns, _), o in self.objects.items()
                if ns == namespace
                and (o["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "vdk-ml-training"
            )

    def fail(
        self,
        method: str,
        plural: str,
        status: int,
        reason: str,
        message: str,
        times: int | None = 1,
        retry_after: int | None = None,
        name: str | None = None,
    ) -> Fault:
        """Answer `status` (a Status body with `reason` and `message`) instead of doing the request; `times`
        None: always."""
        fault = Fault(method, plural, status, reason, message, times, retry_after=retry_after, name=name)
        self.faults.append(fault)
        return fault

    def drop(
        self, method: str, plural: str, times: int | None = 1, after: bool = False, name: str | None = None
    ) -> Fault:
        """Close the connection instead of answering (as a server does with an idle kept-alive one); `after`:
        once the request was done (the object is created, its answer lost)."""
        fault = Fault(method, plural, DROP, "", "", times, mode=CLOSE, after=after, name=name)
        self.faults.append(fault)
        return fault

    def reset(
        self, method: str, plural: str, times: int | None = 1, after: bool = False, name: str | None = None
    ) -> Fault:
        """Reset the connection (RST) instead of answering; `after`: once the request was done."""
        fault = Fault(method, plural, DROP, "", "", times, mode=RESET, after=after, name=name)
        self.faults.append(fault)
        return fault

    def delay(self, method: str, plural: str, seconds: float, times: int | None = 1, name: str | None = None) -> Fault:
        """Do the request, then answer `seconds` late (past the client's timeout, the answer is lost)."""
        fault = Fault(method, plural, 200, "", "", times, mode=LATE, after=True, delay=seconds, name=name)
        self.faults.append(fault)
        return fault

    def slow(self, method: str, plural: str, seconds: float, times: int | None = 1, name: str | None = None) -> Fault:
        """Take `seconds` before doing the request, then answer: an overloaded API server, which commits a create
        after the client gave up waiting (its timeout, a signal) — the object appears then, whoever still listens."""
        fault = Fault(method, plural, 200, "", "", times, mode=SLOW, delay=seconds, name=name)
        self.faults.append(fault)
        return fault

    def backdate(self, plural: str, name: str, seconds: float, namespace: str = "ml") -> None:
        """Make an object look `seconds` older (its creationTimestamp), as one left by an earlier command."""
        kind = self.kind(plural)
        with self._lock:
            meta = self.objects[(kind.group_version, plural, namespace if kind.namespaced else None, name)]["metadata"]
            then = datetime.now(timezone.utc).timestamp() - seconds
            meta["creationTimestamp"] = datetime.fromtimestamp(then, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def requests_to(self, method: str, path_end: str, dry_run: bool = False) -> int:
        """How many requests `method` to a path ending with `path_end` the server got (dry runs aside)."""
        return len(
            [
                1
                for m, p, q in self.requests
                if m == method and p.endswith(path_end) and (q.get("dryRun") == "All") == dry_run
            ]
        )

    def set_status(self, plural: str, name: str, status: dict, namespace: str = "ml") -> None:
        kind = self.kind(plural)
        with self._lock:
            self.objects[(kind.group_version, plural, namespace, name)]["status"] = status

    def add(self, plural: str, obj: dict, namespace: str = "ml") -> dict:
        """Store an object as its controller would (pods, events, workloads): no validation."""
        kind = self.kind(plural)
        with self._lock:
            stored = self._store(kind, namespace if kind.namespaced else None, obj)
            created = obj.get("metadata", {}).get("creationTimestamp")
            if created:  # keep the test's timestamp (pod order, ages)
                self.objects[(kind.group_version, plural, namespace, stored["metadata"]["name"])]["metadata"][
                    "creationTimestamp"
                ] = created
            return stored

    def add_claim(
        self, name: str, access_modes: tuple[str, ...] = ("ReadWriteMany",), namespace: str = "ml", size: str = "10Gi"
    ) -> dict:
        """A bound PersistentVolumeClaim, as an administrator (or a StorageClass) made it."""
        return self.add(
            "persistentvolumeclaims",
            {
                "metadata": {"name": name},
                "spec": {"accessModes": list(access_modes), "resources": {"requests": {"storage": size}}},
                "status": {"phase": "Bound", "accessModes": list(access_modes), "capacity": {"storage": size}},
            },
            namespace,
        )

    def add_secret(self, name: str, values: dict[str, str], namespace: str = "ml") -> dict:
        """A Secret as `kubectl create secret generic NAME --from-literal=KEY=VALUE` makes it."""
        import base64

        data = {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}
        return self.add("secrets", {"metadata": {"name": name}, "type": "Opaque", "data": data}, namespace)

    def set_log(self, pod: str, container: str, text: str, previous: bool = False, namespace: str = "ml") -> None:
        with self._lock:
            self.logs[(namespace, pod, container, previous)] = text

    def append_log(self, pod: str, container: str, text: str, namespace: str = "ml") -> None:
        with self._lock:
            key = (namespace, pod, container, False)
            self.logs[key] = self.logs.get(key, "") + text

    # --- store -------------------------------------------------------------------------------

    def _store(self, kind: Kind, namespace: str | None, obj: dict) -> dict:
        with self._lock:
            self._rv += 1
            obj = copy.deepcopy(obj)
            obj["apiVersion"] = kind.group_version
            obj["kind"] = kind.kind
            meta = obj.setdefault("metadata", {})
            if kind.namespaced:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = str(self._rv)
            meta["creationTimestamp"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["generation"] = 1
            key = (kind.group_version, kind.plural, namespace if kind.namespaced else None, meta["name"])
            self.objects[key] = obj
            self._collect_soon(key)
            return copy.deepcopy(obj)

    # --- the garbage collector: a dependent none of whose owners exists is deleted, a moment later ------------

    GC_SECONDS = 0.1  # how long after a change the collector looks (kube-controller-manager's is as quick)

    def _collect_soon(self, key: tuple) -> None:
        refs = self.objects[key]["metadata"].get("ownerReferences")
        if refs:
            uid = self.objects[key]["metadata"]["uid"]
            timer = threading.Timer(self.GC_SECONDS, self._collect, (key, uid))
            timer.daemon = True
            timer.start()

    def _solid(self, ref: dict, namespace: str | None) -> bool:
        """Whether the owner an ownerReference names exists (its uid, in the dependent's namespace or cluster-wide)."""
        return any(
            o["metadata"]["uid"] == ref.get("uid") and o["kind"] == ref.get("kind") and ns in (namespace, None)
            for (_, _, ns, _), o in self.objects.items()
        )

    def _collect(self, key: tuple, uid: str) -> None:
        with self._lock:
            obj = self.objects.get(key)
            if obj is None or obj["metadata"]["uid"] != uid:
                return
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(self._solid(ref, key[2]) for ref in refs):
                self.collected.append(f"{obj['kind']}/{obj['metadata']['name']}")
                self._delete(key)

    def _delete(self, key: tuple) -> dict:
        """Delete one object and, as the garbage collector would (background propagation), everything it owned
        that has no other owner left; a dependent with another owner loses the reference to this one."""
        with self._lock:
            obj = self.objects.pop(key)
            uid = obj["metadata"]["uid"]
            owned = [
                k
                for k, o in self.objects.items()
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences", []))
            ]
            for k in owned:
                if k not in self.objects:
                    continue
                meta = self.objects[k]["metadata"]
                others = [r for r in meta["ownerReferences"] if r.get("uid") != uid]
                if others and any(self._solid(r, k[2]) for r in others):
                    meta["ownerReferences"] = others
                else:
                    self._delete(k)
            return obj


# --- HTTP ------------------------------------------------------------------------------------


def status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+)(?=/))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


@dataclass
class Stream:
    """A chunked response: text pieces as they come."""

    chunks: Any  # iterator of str


class _Handler(BaseHTTPRequestHandler):
    server_state: FakeKube
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    def do_PUT(self):
        self._handle("PUT")

    def _handle(self, method: str) -> None:
        fake = self.server_state
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        fake.requests.append((method, url.path, query))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(401, status(401, "Unauthorized", "Unauthorized"))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return self._send(400, status(400, "BadRequest", "the request body is not JSON"))
        answer = _route(fake, method, url.path, query, body)
        headers: dict[str, str] = {}
        if isinstance(answer, Faulted):
            fault = answer.fault
            if fault.mode == CLOSE:
                self.close_connection = True
                return
            if fault.mode == RESET:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                return
            if fault.mode == LATE:
                time.sleep(fault.delay)
                code, payload = answer.code, answer.payload
            elif fault.mode == SLOW:
                time.sleep(fault.delay)
                code, payload = _answer(fake, method, url.path, query, body)
            else:
                code, payload = fault.status, status(fault.status, fault.reason, fault.message)
                if fault.retry_after is not None:
                    headers["Retry-After"] = str(fault.retry_after)
        else:
            code, payload = answer
        if code == 200 and _wants_metadata_only(self.headers.get("Accept") or "") and isinstance(payload, dict):
            payload = _partial_metadata(payload)
        try:
            self._send(code, payload, headers)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a late answer)
            self.close_connection = True

    def _send(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        if isinstance(payload, Stream):
            return self._send_stream(code, payload)
        if isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, code: int, stream: Stream) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in stream.chunks:
                data = chunk.encode()
                if data:
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


def _route(fake: FakeKube, method: str, path: str, query: dict, body: Any) -> tuple[int, Any] | Faulted:
    """The answer to a request, or what a fault made of it."""
    m = _PATH.match(path)
    if m:
        plural = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
        with fake._lock:
            fault = next((f for f in fake.faults if f.matches(method, plural, m["name"], query)), None)
            if fault is not None:
                fault.strike()
        if fault is not None:
            if not fault.after:
                return Faulted(fault)
            code, payload = _answer(fake, method, path, query, body)
            return Faulted(fault, code, payload)
    return _answer(fake, method, path, query, body)


def _answer(fake: FakeKube, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
    if (method, path) == ("POST", SELF_SUBJECT_ACCESS_REVIEWS):
        return _access_review(fake, body)
    if (method, path) == ("POST", SUBJECT_ACCESS_REVIEWS):
        return _subject_access_review(fake, body)
    if method == "GET":
        discovery = _discovery(fake, path)
        if discovery is not None:
            return 200, discovery
    m = _PATH.match(path)
    kind = None
    if m:
        group_version = m["core"] or f"{m['group']}/{m['version']}"
        kind = next((k for k in fake.kinds if k.group_version == group_version and k.plural == m["plural"]), None)
    if (
        kind is None
        or (kind.namespaced and not m["ns"] and kind.plural != "namespaces")
        or (not kind.namespaced and m["ns"])
    ):
        return 404, "404 page not found"
    ns, name = m["ns"], m["name"]
    verb = {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete", "PUT": "update"}[method]
    if m["sub"]:
        if (kind.plural, m["sub"], method) != ("pods", "log", "GET"):
            return 404, "404 page not found"
        if ("get", "pods/log") in fake.forbidden:
            return 403, status(
                403,
                "Forbidden",
                f'pods "{name}" is forbidden: User "{USER}" cannot get resource "pods/log" '
                f'in API group "" in the namespace "{ns}"',
                {"name": name, "kind": "pods"},
            )
        return _pod_log(fake, ns, name, query)
    if (verb, kind.plural) in fake.forbidden:
        where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
        return 403, status(
            403,
            "Forbidden",
            f'{kind.resource} is forbidden: User "{USER}" cannot {verb} resource "{kind.plural}" '
            f'in API group "{kind.group}"{where}',
            {"group": kind.group, "kind": kind.plural, **({"name": name} if name else {})},
        )
    key_ns = ns if kind.namespaced else None
    if method == "GET" and name:
        obj = fake.objects.get((kind.group_version, kind.plural, key_ns, name))
        if obj is None:
            return 404, _not_found(kind, name)
        return 200, copy.deepcopy(obj)
    if method == "GET":
        items = [o for o in fake.stored(kind.plural, key_ns) if _selected(o, query.get("labelSelector", ""))]
        meta = {"resourceVersion": "1"}
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            items, meta["continue"] = items[:limit], "more"
        return 200, {"kind": f"{kind.kind}List", "apiVersion": kind.group_version, "metadata": meta, "items": items}
    if method == "PUT":
        return _replace(fake, kind, key_ns, name, body)
    if method == "DELETE":
        key = (kind.group_version, kind.plural, key_ns, name)
        with fake._lock:
            if key not in fake.objects:
                return 404, _not_found(kind, name)
            failed = _precondition_failed(kind, name, fake.objects[key], body)
            if failed is not None:
                return 409, failed
            fake._delete(key)
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": kind.group, "kind": kind.plural},
        }
    return _create(fake, kind, ns, query, body)


SELF_SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _access_review(fake: FakeKube, body: Any) -> tuple[int, Any]:
    """`kubectl auth can-i` for the user: allowed unless `forbidden` says otherwise (RBAC denies nothing
    else here), with the authorizer's empty reason for a denial, as RBAC gives it."""
    if not isinstance(body, dict) or body.get("kind") != "SelfSubjectAccessReview":
        return 400, status(400, "BadRequest", "expected a SelfSubjectAccessReview")
    attributes = (body.get("spec") or {}).get("resourceAttributes") or {}
    verb, plural = attributes.get("verb"), attributes.get("resource")
    if not verb or not plural:
        return 422, status(422, "Invalid", "spec.resourceAttributes: verb and resource are required")
    allowed = (verb, plural) not in fake.forbidden
    review = copy.deepcopy(body)
    review["status"] = {"allowed": allowed, **({} if allowed else {"reason": ""})}
    return 201, review


SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def _subject_access_review(fake: FakeKube, body: Any) -> tuple[int, Any]:
    """Whether another user (a service account) may: allowed unless `denied` holds (user, verb, resource,
    namespace); the asking user needs `create subjectaccessreviews` (`forbidden` may deny it)."""
    if ("create", "subjectaccessreviews") in fake.forbidden:
        return 403, status(403, "Forbidden", f'User "{USER}" cannot create resource "subjectaccessreviews"')
    if not isinstance(body, dict) or body.get("kind") != "SubjectAccessReview":
        return 400, status(400, "BadRequest", "expected a SubjectAccessReview")
    spec = body.get("spec") or {}
    attributes = spec.get("resourceAttributes") or {}
    resource = attributes.get("resource", "")
    if attributes.get("subresource"):
        resource = f"{resource}/{attributes['subresource']}"
    allowed = (spec.get("user"), attributes.get("verb"), resource, attributes.get("namespace")) not in fake.denied
    review = copy.deepcopy(body)
    review["status"] = {"allowed": allowed, **({} if allowed else {"reason": ""})}
    return 201, review


def _pod_log(fake: FakeKube, ns: str, name: str, query: dict) -> tuple[int, Any]:
    """pods/log as the API server and kubelet answer it, including their 400s."""
    pod = fake.objects.get(("v1", "pods", ns, name))
    if pod is None:
        return 404, _not_found(fake.kind("pods"), name)
    containers = [c["name"] for c in pod["spec"]["containers"]]
    container = query.get("container")
    if not container:
        if len(containers) != 1:
            return 400, status(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]",
            )
        container = containers[0]
    if container not in containers:
        return 400, status(400, "BadRequest", f"container {container} is not valid for pod {name}")
    if not pod["spec"].get("nodeName"):
        return 400, status(400, "BadRequest", f"pod {name} does not have a host assigned")
    previous = go_bool(query.get("previous"))
    if previous:
        if (ns, name, container, True) not in fake.logs:
            return 400, status(
                400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" not found'
            )
    else:
        waiting = _container_state(pod, container).get("waiting")
        if waiting is not None:
            return 400, status(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: '
                f"{waiting.get('reason', 'ContainerCreating')}",
            )
    key = (ns, name, container, previous)

    def text() -> str:
        with fake._lock:
            return fake.logs.get(key, "")

    def cut(body: str) -> str:
        if query.get("tailLines") is not None:
            lines = body.splitlines(keepends=True)
            body = "".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else ""
        if query.get("limitBytes"):
            body = body.encode()[: int(query["limitBytes"])].decode("utf-8", "ignore")
        return body

    if not go_bool(query.get("follow")) or previous:
        return 200, cut(text())

    def follow():
        first = text()
        yield cut(first)
        sent_len = len(first)
        while True:
            with fake._lock:
                current = fake.objects.get(("v1", "pods", ns, name))
                body = fake.logs.get(key, "")
            if len(body) > sent_len:
                yield body[sent_len:]
                sent_len = len(body)
                continue
            if current is None or "running" not in _container_state(current, container):
                return
            threading.Event().wait(0.02)

    return 200, Stream(follow())


def go_bool(value: str | None) -> bool:
    """A query parameter read as the API server (Go's strconv.ParseBool) reads it."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _container_state(pod: dict, container: str) -> dict:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return cs.get("state") or {}
    return {"waiting": {"reason": "ContainerCreating"}}


def _not_found(kind: Kind, name: str) -> dict:
    return status(
        404, "NotFound", f'{kind.resource} "{name}" not found', {"name": name, "group": kind.group, "kind": kind.plural}
    )


def _create(fake: FakeKube, kind: Kind, ns: str | None, query: dict, body: Any) -> tuple[int, Any]:
    if not isinstance(body, dict):
        return 400, status(400, "BadRequest", "the body must be an object")
    if kind.namespaced and ("v1", "namespaces", None, ns) not in fake.objects:
        return 404, status(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
    meta = body.get("metadata") or {}
    name = meta.get("name", "")
    if kind.namespaced and meta.get("namespace") not in (None, ns):
        return 400, status(
            400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request"
        )
    if body.get("apiVersion") != kind.group_version or body.get("kind") != kind.kind:
        return 400, status(
            400,
            "BadRequest",
            f"expected {kind.group_version} {kind.kind}, got {body.get('apiVersion')} {body.get('kind')}",
        )
    undecodable = _undecodable(kind, body)
    if undecodable:
        return 400, status(400, "BadRequest", undecodable)
    errors = _validate(kind, body)
    unknown = [e for e in errors if e.unknown]
    if unknown and query.get("fieldValidation") == "Strict":
        fields = ", ".join(f'unknown field "{e.field}"' for e in unknown)
        return 400, status(
            400,
            "BadRequest",
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
            f"strict decoding error: {fields}",
        )
    invalid = [e for e in errors if not e.unknown]
    if invalid:
        return 422, _invalid(kind, name, invalid)
    denied = admission(fake, kind, body)
    if denied:
        webhook, problems = denied
        st = _invalid(kind, name, problems)
        st["message"] = f'admission webhook "{webhook}" denied the request: {st["message"]}'
        return 422, st
    if (kind.group_version, kind.plural, ns if kind.namespaced else None, name) in fake.objects:
        return 409, status(
            409,
            "AlreadyExists",
            f'{kind.resource} "{name}" already exists',
            {"name": name, "group": kind.group, "kind": kind.plural},
        )
    if query.get("dryRun") == "All":
        obj = copy.deepcopy(body)
        obj.setdefault("metadata", {})["namespace"] = ns
        return 201, obj
    stored = fake._store(kind, ns, body)
    if kind.plural == "pods" and fake.kubelet is not None:
        fake.kubelet(fake, stored, ns)
    return 201, stored


# What an update (PUT) cannot change of an object's metadata: the server keeps its own.
_SYSTEM_METADATA = ("name", "namespace", "uid", "creationTimestamp", "generation")


def _conflict(kind: Kind, name: str, why: str) -> dict:
    return status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {kind.resource} "{name}": {why}',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def _replace(fake: FakeKube, kind: Kind, ns: str | None, name: str, body: Any) -> tuple[int, Any]:
    """An update (PUT), as the API server's generic registry does it (store.go Update): the body replaces the
    object's spec, data, labels, annotations and ownerReferences; its resourceVersion must be the stored one (409
    Conflict), or may be left out where the kind allows an unconditional update (else 422); a name that does not
    exist is a 404, or a create where the kind allows it (a Lease)."""
    if not isinstance(body, dict):
        return 400, status(400, "BadRequest", "the body must be an object")
    meta = body.get("metadata") or {}
    if meta.get("name") != name:
        return 400, status(
            400,
            "BadRequest",
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
        )
    key = (kind.group_version, kind.plural, ns, name)
    with fake._lock:
        current = fake.objects.get(key)
        sent = meta.get("resourceVersion")
        if current is None:
            if not kind.create_on_update:
                return 404, _not_found(kind, name)
            if sent:
                return 409, _conflict(kind, name, "the object has been deleted")
            return _create(fake, kind, ns, {}, body)
        if not sent and not kind.unconditional_update:
            return 422, _invalid(
                kind,
                name,
                [
                    crd_schema.FieldError(
                        "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update"
                    )
                ],
            )
        if sent and sent != current["metadata"].get("resourceVersion"):
            return 409, _conflict(
                kind,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        undecodable = _undecodable(kind, body)
        if undecodable:
            return 400, status(400, "BadRequest", undecodable)
        # validated as a create is: the server's own metadata (timestamps) is the server's to read
        checked = {**body, "metadata": {k: v for k, v in meta.items() if k != "creationTimestamp"}}
        errors = [e for e in _validate(kind, checked) if not e.unknown]
        if errors:
            return 422, _invalid(kind, name, errors)
        fake._rv += 1
        replaced = copy.deepcopy(body)
        kept = {k: current["metadata"][k] for k in _SYSTEM_METADATA if k in current["metadata"]}
        replaced["metadata"] = {**copy.deepcopy(meta), **kept, "resourceVersion": str(fake._rv)}
        replaced["apiVersion"], replaced["kind"] = kind.group_version, kind.kind
        if "status" in current and kind.schema is not None:
            replaced["status"] = current["status"]  # a custom resource's status is its subresource's
        fake.objects[key] = replaced
        fake._collect_soon(key)
        return 200, copy.deepcopy(replaced)


def _precondition_failed(kind: Kind, name: str, current: dict, body: Any) -> dict | None:
    """The 409 of a delete whose DeleteOptions.preconditions (uid, resourceVersion) the object no longer meets."""
    preconditions = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
    for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        wanted = preconditions.get(field_name)
        have = current["metadata"].get(field_name)
        if wanted is not None and wanted != have:
            return _conflict(
                kind, name, f"Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {have}"
            )
    return None


def _validate(kind: Kind, body: dict) -> list:
    if kind.schema:
        return kind.schema.errors(body)
    if kind.model:
        return native_errors(body, kind.model)
    return crd_schema.metadata_errors(body.get("metadata"))


def _undecodable(kind: Kind, body: dict) -> str | None:
    """The 400 of a body the server cannot even decode into its type (a Lease's times that are not MicroTimes)."""
    return micro_time_problem(body) if kind.kind == "Lease" else None


def _invalid(kind: Kind, name: str, errors: list) -> dict:
    group = f".{kind.group}" if kind.group else ""
    return status(
        422,
        "Invalid",
        f'{kind.kind}{group} "{name}" is invalid: ' + ", ".join(str(e) for e in errors),
        {
            "name": name,
            "group": kind.group,
            "kind": kind.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": e.message, "field": e.field} for e in errors],
        },
    )


def _wants_metadata_only(accept: str) -> bool:
    """`Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` (the first type offered)."""
    first = accept.split(",")[0]
    return "as=PartialObjectMetadataList" in first and "g=meta.k8s.io" in first


def _partial_metadata(listing: dict) -> dict:
    """A list as the API server answers a client that asked for the objects' metadata only."""
    if not listing.get("kind", "").endswith("List"):
        return listing
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": listing.get("metadata") or {},
        "items": [
            {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item.get("metadata") or {}}
            for item in listing.get("items") or []
        ],
    }


def _selected(obj: dict, selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


# --- discovery -------------------------------------------------------------------------------


def _discovery(fake: FakeKube, path: str) -> Any:
    if path == "/version":
        return {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        }
    if path == "/apis":
        groups: dict[str, list[str]] = {}
        for k in fake.kinds:
            if k.group and k.version not in groups.setdefault(k.group, []):
                groups[k.group].append(k.version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                    "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                }
                for g, vs in groups.items()
            ],
        }
    m = re.fullmatch(r"/api/(v1)|/apis/([^/]+/[^/]+)", path)
    if m:
        gv = m.group(1) or m.group(2)
        kinds = [k for k in fake.kinds if k.group_version == gv]
        if not kinds:
            return None
        resources = []
        for k in kinds:
            resources.append(
                {
                    "name": k.plural,
                    "singularName": k.kind.lower(),
                    "namespaced": k.namespaced,
                    "kind": k.kind,
                    "verbs": ["create", "delete", "get", "list"],
                }
            )
            if k.schema:
                resources.append(
                    {
                        "name": f"{k.plural}/status",
                        "singularName": "",
                        "namespaced": k.namespaced,
                        "kind": k.kind,
                        "verbs": ["get"],
                    }
                )
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
    m = re.fullmatch(r"/openapi/v3/apis/([^/]+)/([^/]+)", path)
    if m and fake.publish_openapi:
        kinds = [k for k in fake.kinds if k.group == m.group(1) and k.version == m.group(2) and k.schema]
        if not kinds:
            return None
        schemas = {}
        for k in kinds:
            schema = copy.deepcopy(k.schema.openapi)
            schema["x-kubernetes-group-version-kind"] = [{"group": k.group, "version": k.version, "kind": k.kind}]
            schemas[f"org.kubeflow.{k.group.split('.')[0]}.{k.version}.{k.kind}"] = schema
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
            "paths": {},
            "components": {"schemas": schemas},
        }
    m = re.fullmatch(
        r"/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/trainjobs\.trainer\.kubeflow\.org", path
    )
    if m and fake.trainer_mechanism:
        schema = fake.kind("trainjobs").schema
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
            "spec": {
                "group": schema.group,
                "versions": [{"name": schema.version, "served": True, "schema": {"openAPIV3Schema": schema.openapi}}],
            },
        }
    return None


# --- the operators' admission webhooks, for the rules the plugin relies on --------------------

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_PET = re.compile(r"^PET_")


def admission(fake: FakeKube, kind: Kind, obj: dict) -> tuple[str, list] | None:
    if kind.kind == "PyTorchJob":
        problems = _pytorchjob_rules(obj)
        return ("validator.pytorchjob.training-operator.kubeflow.org", problems) if problems else None
    if kind.kind == "TrainJob":
        problems = _trainjob_rules(fake, obj)
        return ("validator.trainjob.trainer.kubeflow.org", problems) if problems else None
    return None


def _pytorchjob_rules(obj: dict) -> list:
    FE = crd_schema.FieldError
    problems = []
    name = obj["metadata"].get("name", "")
    if not _DNS_1035.match(name) or len(name) > 63:
        problems.append(FE("metadata.name", f"Invalid value: {name!r}: a DNS-1035 label is required"))
    specs = obj.get("spec", {}).get("pytorchReplicaSpecs", {})
    master = specs.get("Master")
    if master is not None and master.get("replicas") != 1:
        problems.append(FE("spec.pytorchReplicaSpecs[Master].replicas", "Forbidden: must be 1, and set explicitly"))
    worker = specs.get("Worker")
    if worker is not None and (worker.get("replicas") or 0) < 1:
        problems.append(
            FE("spec.pytorchReplicaSpecs[Worker].replicas", "Invalid value: must be at least 1 (omit Worker instead)")
        )
    for rtype, rspec in specs.items():
        containers = rspec.get("template", {}).get("spec", {}).get("containers", [])
        if not any(c.get("name") == "pytorch" for c in containers):
            problems.append(
                FE(
                    f"spec.pytorchReplicaSpecs[{rtype}].template.spec.containers",
                    "Required value: a container named pytorch",
                )
            )
    if obj.get("spec", {}).get("elasticPolicy") and worker is None:
        problems.append(FE("spec.elasticPolicy", "Forbidden: elastic training needs a Worker replica spec"))
    return problems


def _trainjob_rules(fake: FakeKube, obj: dict) -> list:
    FE = crd_schema.FieldError
    problems = []
    spec = obj.get("spec", {})
    ref = spec.get("runtimeRef", {})
    if (ref.get("kind") or "ClusterTrainingRuntime") == "ClusterTrainingRuntime":
        if ("trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes", None, ref.get("name")) not in fake.objects:
            problems.append(
                FE("spec.runtimeRef", f"Invalid value: ClusterTrainingRuntime {ref.get('name')!r} not found")
            )
    for i, env in enumerate(spec.get("trainer", {}).get("env", [])):
        if _PET.match(env.get("name", "")):
            problems.append(
                FE(f"spec.trainer.env[{i}].name", f"Invalid value: {env.get('name')!r}: set by the torch runtime")
            )
    for override in _container_overrides(spec):
        if override.get("name") in ("node", "dataset-initializer", "model-initializer") and override.get("env"):
            problems.append(
                FE(
                    "spec.podChanges.containers",
                    f"Forbidden: env of container {override['name']} is set through spec.trainer",
                )
            )
        if override.get("name") not in ("node",):
            problems.append(
                FE(
                    "spec.podChanges.containers",
                    f"Invalid value: the runtime has no container {override.get('name')!r}",
                )
            )
    for target in _target_jobs(spec):
        if target != "node":
            problems.append(
                FE("spec.podChanges.targetJobs", f"Invalid value: the runtime has no replicated job {target!r}")
            )
    return problems


def _container_overrides(spec: dict) -> list[dict]:
    out = []
    for o in spec.get("podSpecOverrides", []):
        out += o.get("containers", [])
    for o in spec.get("podTemplateOverrides", []):
        out += (o.get("spec") or {}).get("containers", [])
    for p in spec.get("runtimePatches", []):
        jobs = p.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
        for j in jobs:
            out += j.get("template", {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    return out


def _target_jobs(spec: dict) -> list[str]:
    out = []
    for o in spec.get("podSpecOverrides", []) + spec.get("podTemplateOverrides", []):
        out += [t.get("name") for t in o.get("targetJobs", [])]
    for p in spec.get("runtimePatches", []):
        jobs = p.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
        out += [j.get("name") for j in jobs]
    return out

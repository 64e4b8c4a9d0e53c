"""Kubernetes API failures as errors a user can act on (`MLTrainingError(problem, fix)`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.keys import variable

# KubeApiError.reason of a request that reached the server but got no (complete, timely) answer: it may
# have been done (k8s/retries.py sends such a request again only when that is safe).
RESET = "ConnectionReset"
TIMED_OUT = "Timeout"
UNREACHABLE = "Unreachable"

RBAC_HINT = 'the minimal Role is in the documentation: docs/deploy.md, "Minimal RBAC"'
NOT_SERVED_FIX = "install the operator that serves it"


@dataclass(frozen=True)
class Action:
    """What the client was doing, for messages: `create` `jobs` (batch) `ml/run-1`."""

    verb: str
    plural: str
    group: str = ""
    kind: str = ""
    namespace: str | None = None
    name: str | None = None
    version: str = ""
    not_served_fix: str | None = None  # what to install when the type is not served (its backend knows)

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def what(self) -> str:
        kind = self.kind or self.plural
        return f"{kind} {self.name}" if self.name else kind

    @property
    def where(self) -> str:
        return f" in namespace {self.namespace}" if self.namespace else ""


class KubeApiError(MLTrainingError):
    """An API request failed; `status` is the HTTP code (0 when the server was not reached)."""

    def __init__(self, problem: str, fix: str, status: int, reason: str = "", not_served: bool = False):
        self.status = status
        self.reason = reason
        self.not_served = not_served  # 404 because the resource type itself is not served
        self.detail = ""  # the server's own message
        self.retry_after: float | None = None  # seconds, when the server said when to come back (429, 503)
        self.not_created = False  # the answer of a create that certainly did not create the object (k8s.creation)
        super().__init__(problem, fix)


def brief(error: KubeApiError) -> str:
    """What went wrong, to follow "... could not be read": " (500): etcdserver: request timed out", or for a
    request without an answer ": the Kubernetes API server ... did not answer within 60 s ..." """
    if error.status:
        return f" ({error.status}): {error.detail or error.reason}"
    return f": {error.problem}"


def status_body(body: Any) -> dict | None:
    """The Kubernetes `Status` object in a response body, if it is one."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return body
    return None


def from_api_exception(
    status: int, reason: str, body: Any, action: Action, context: str | None, headers: Any = None
) -> KubeApiError:
    """Translate an HTTP error answer of the API server (`headers`: its headers, for `Retry-After`)."""
    st = status_body(body) or {}
    message = st.get("message") or (_text(body).strip() if body else "") or reason
    error = _translate(status, reason, st, message, action, context)
    error.detail = message
    error.retry_after = retry_after(headers)
    return error


def retry_after(headers: Any) -> float | None:
    """The seconds of a `Retry-After` header (the API server sends seconds, never a date), if any."""
    try:
        value = headers.get("Retry-After") if headers is not None else None
    except AttributeError:
        return None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 86400 else None


def _text(body: Any) -> str:
    return body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)


def _translate(status: int, reason: str, st: dict, message: str, action: Action, context: str | None) -> KubeApiError:
    st_reason = st.get("reason", "")
    details = st.get("details") or {}
    ctx = f" --context {context}" if context else ""

    if status == 401:
        return KubeApiError(
            f"the Kubernetes API server did not accept your credentials (401 Unauthorized){_in_context(context)}",
            f"log in to the cluster again (your token or certificate expired or is wrong), then check with "
            f"`kubectl{ctx} auth whoami`",
            status,
            st_reason,
        )
    if status == 403 and "admission webhook" not in message:
        return KubeApiError(
            f"you are not allowed to {action.verb} {action.resource}{action.where} (403 Forbidden): {message}",
            f"ask a cluster admin for a Role that allows `{action.verb}` on `{action.resource}`{action.where} "
            f"({RBAC_HINT}); check with `kubectl{ctx} auth can-i {action.verb} {action.resource}"
            f"{' -n ' + action.namespace if action.namespace else ''}`",
            status,
            st_reason,
        )
    if status == 404:
        return _not_found(action, st, message, details, context)
    if status == 409:
        name = details.get("name") or action.name
        return KubeApiError(
            f"a {action.kind or action.plural} named {name} already exists{action.where} (409 AlreadyExists)",
            "every deploy makes a new run name, so it is left from an earlier attempt: remove it with "
            f"`kubectl{ctx} delete {action.resource} {name}{' -n ' + action.namespace if action.namespace else ''}` "
            "(or `vdk delete`) and deploy again",
            status,
            st_reason,
        )
    if status == 422 or (status in (400, 403) and "admission webhook" in message):
        webhook = re.search(r'admission webhook "([^"]+)"', message)
        by = f"; admission webhook {webhook.group(1)}" if webhook else ""
        return KubeApiError(
            f"the cluster rejected {action.what}{action.where} ({status} {st_reason or reason}{by}): "
            f"{_causes(details, message)}",
            "the rendered manifest does not fit what this cluster's API server or operator accepts "
            "(an operator version this plugin does not know, or a cluster policy). Look at it with "
            "`vdk deploy --dry-run`; if the cluster is at a supported version, report it as a bug",
            status,
            st_reason,
        )
    if status == 400 and ("unknown field" in message or "strict decoding" in message):
        return KubeApiError(
            f"the cluster's {action.kind or action.plural} does not know some fields vdk-ml-training sets "
            f"(400 BadRequest): {message}",
            "the installed operator is a version the plugin does not render for; check which version the "
            "cluster runs and that it is supported (docs/deploy.md), or choose another backend",
            status,
            st_reason,
        )
    return KubeApiError(
        f"the Kubernetes API server failed to {action.verb} {action.what}{action.where}: {status} "
        f"{st_reason or reason}: {message}",
        f"retry in a moment; if it persists, check the cluster's health with `kubectl{ctx} get --raw /readyz?verbose`",
        status,
        st_reason,
    )


def missing_namespace(namespace: str, context: str | None) -> KubeApiError:
    ctx = f" --context {context}" if context else ""
    where = f" in kube context {context}" if context else ""
    return KubeApiError(
        f"the namespace {namespace} does not exist{where} (404 NotFound)",
        f"create it (`kubectl{ctx} create namespace {namespace}`) or set another namespace "
        f"({variable('namespace')}, or `namespace` in [ml-training])",
        404,
        "NotFound",
    )


def _not_found(action: Action, st: dict, message: str, details: dict, context: str | None) -> KubeApiError:
    if details.get("kind") == "namespaces":
        return missing_namespace(details.get("name") or action.namespace or "?", context)
    ctx = f" --context {context}" if context else ""
    if (not st or not details) and action.group and "/" not in action.plural:
        # A path the server does not route: the resource type itself is not served. Never so for the core
        # group's types (pods, events, ...) and subresources (pods/log): their 404 means the object is gone.
        install = action.not_served_fix or NOT_SERVED_FIX
        gv = f"{action.group}/{action.version}" if action.group else action.version or "v1"
        return KubeApiError(
            f"the cluster does not serve {action.kind or action.plural} ({gv} {action.plural}): "
            f"its CustomResourceDefinition is not installed",
            install,
            404,
            "NotFound",
            not_served=True,
        )
    return KubeApiError(
        f"{action.what} was not found{action.where} (404 NotFound)",
        f"list what exists with `vdk list` or `kubectl{ctx} get {action.resource}"
        f"{' -n ' + action.namespace if action.namespace else ''}`",
        404,
        "NotFound",
    )


def _causes(details: dict, message: str) -> str:
    causes = details.get("causes") or []
    parts = [
        f"{c.get('field')}: {c.get('message')}" if c.get("field") else str(c.get("message"))
        for c in causes
        if c.get("message")
    ]
    return "; ".join(parts) if parts else message


def _in_context(context: str | None) -> str:
    return f" (kube context {context})" if context else ""


def unreachable(server: str | None, context: str | None, error: Exception) -> KubeApiError:
    """The API server could not be reached at all (refused, DNS, TLS, timeout)."""
    cause = _root_cause(error)
    ctx = f" --context {context}" if context else ""
    return KubeApiError(
        f"cannot reach the Kubernetes API server at {server or '?'}{_in_context(context)}: {cause}",
        f"check that the cluster is running and that this is the right context (`kubectl{ctx} cluster-info`); "
        f"choose another with {variable('kube_context')} or `kube_context` in [ml-training]",
        0,
        UNREACHABLE,
    )


def no_answer(server: str | None, context: str | None, action: Action, timed_out: bool, seconds: float) -> KubeApiError:
    """The request reached the API server, but its answer was lost (the connection was reset or closed) or
    late (`timed_out` after `seconds`): what it asked may have been done."""
    ctx = f" --context {context}" if context else ""
    how = f"did not answer within {seconds:g} s" if timed_out else "closed the connection without an answer"
    return KubeApiError(
        f"the Kubernetes API server at {server or '?'}{_in_context(context)} {how} to {action.verb} "
        f"{action.what}{action.where}",
        f"run the command again in a moment; if it persists, check the cluster's health with "
        f"`kubectl{ctx} get --raw /readyz?verbose`",
        0,
        TIMED_OUT if timed_out else RESET,
    )


def _root_cause(error: Exception) -> str:
    seen = error
    for _ in range(5):
        inner = getattr(seen, "reason", None)
        if isinstance(inner, Exception):
            seen = inner
            continue
        break
    text = str(seen)
    if "Connection refused" in text or "ConnectionRefused" in type(seen).__name__:
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    return text.splitlines()[0] if text else type(seen).__name__


def no_cluster_configured(kubeconfigs: list[str]) -> MLTrainingError:
    """Neither a kubeconfig nor a pod's service account: no cluster to talk to."""
    return MLTrainingError(
        f"no Kubernetes cluster is configured for ml-training runs: no kubeconfig at {', '.join(kubeconfigs)} "
        "and not running in a pod",
        "point KUBECONFIG at your cluster's kubeconfig (your cloud CLI's get-credentials command writes one), and "
        f"choose its context with {variable('kube_context')} if it is not the current one",
    )

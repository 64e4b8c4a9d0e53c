"""How the plugin talks to a Kubernetes API server, through the official `kubernetes` client: the
connection (kubeconfig or in-cluster), one request shim for both client generations (<= 36 and the
pydantic-based 37+), a GET that tolerates what may be forbidden or absent, and pods/log streams.

Requests go through the client's ApiClient (its kubeconfig / in-cluster configuration, auth plugins
and transport) on generic resource paths, which behave the same on every client generation. Every
API failure becomes a `KubeApiError` that says what to do (see `api_errors`); a request that may be
sent twice is sent again after a failure worth it (`retries`), each retry said in one line.
"""

from __future__ import annotations

import contextvars
import http.client
import json
import logging
import os
from collections.abc import Collection
from contextlib import contextmanager
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from kubernetes.config import incluster_config
from kubernetes.config import kube_config

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.k8s import kubeconfig
from vdk.plugin.ml_training.k8s import retries
from vdk.plugin.ml_training.k8s.api_errors import Action
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.api_errors import from_api_exception
from vdk.plugin.ml_training.k8s.api_errors import no_answer
from vdk.plugin.ml_training.k8s.api_errors import no_cluster_configured
from vdk.plugin.ml_training.k8s.api_errors import unreachable
from vdk.plugin.ml_training.k8s.retries import RetryPolicy
from vdk.plugin.ml_training.k8s.retries import Say

Timeout = tuple[float, float]
REQUEST_TIMEOUT = (10, 60)  # connect, read (seconds)


class _StaleConnectionRetry(urllib3.Retry):
    """urllib3's own retries: only a GET/DELETE whose pooled connection the server had closed meanwhile is
    sent again, silently; a server that cannot be reached is reported at once (retrying it three times, as
    urllib3 does by default, only makes the user wait longer for the same error), and a read that timed out
    is not sent again here. Answers worth another attempt (429 and its Retry-After, 5xx, a reset, a timeout)
    are retried above urllib3, by `retries`, bounded in time and said."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
        if isinstance(error, urllib3.exceptions.ReadTimeoutError):
            raise error
        return super().increment(method, url, response, error, _pool, _stacktrace)


RETRIES = _StaleConnectionRetry(total=1, connect=0, read=1, status=0, other=0, respect_retry_after_header=False)
# Answers of a GET that only make what is read less complete: forbidden, or not there.
TOLERATED = (403, 404)
JSON = "application/json"
# A list of the objects' metadata only (labels, names, times): what an index needs, without the objects' bodies.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


_OWN_REQUEST = contextvars.ContextVar("vdk_ml_training_kube_request", default=False)


class _QuietRetries(logging.Filter):
    """Drops urllib3's "Retrying ..." warnings about the plugin's requests: it reports a failure
    itself, once, with what to do; a retry that succeeds is nothing to report."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_OWN_REQUEST.get() and str(record.msg).startswith("Retrying"))


_QUIET_RETRIES = _QuietRetries()
logging.getLogger("urllib3.connectionpool").addFilter(_QUIET_RETRIES)


@contextmanager
def _own_request():
    token = _OWN_REQUEST.set(True)
    try:
        yield
    finally:
        _OWN_REQUEST.reset(token)


class Transport:
    """A connection to one cluster: the kube context's (or the pod's) server and credentials. `say` gets
    the one-line notes of retries (default stderr); `policy` bounds them (default `retries.DEFAULT_POLICY`)."""

    def __init__(
        self,
        context: str | None = None,
        config_file: str | None = None,
        say: Say = retries.to_stderr,
        policy: RetryPolicy | None = None,
    ):
        self.api_client, self.context, self.default_namespace, self.server = connect(context, config_file)
        self.say = say
        self._policy = policy
        self.timeout: Timeout = REQUEST_TIMEOUT  # of each attempt, unless a request names its own

    @property
    def policy(self) -> RetryPolicy:
        return self._policy or retries.DEFAULT_POLICY

    def request(
        self,
        method: str,
        path: str,
        *,
        action: Action,
        query: dict | None = None,
        body: Any = None,
        timeout: Timeout | None = None,
        accept: str = JSON,
        retry: bool | None = None,
    ) -> Any:
        """One request; with `retry` sent again after a failure worth it (default: when it may be sent twice:
        GET, DELETE, a dry run, an access review; a create is sent once, `KubeClient.create` looks first)."""
        query = query or {}
        timeout = timeout or self.timeout

        def once() -> Any:
            return self.send(method, path, action=action, query=query, body=body, timeout=timeout, accept=accept)

        if not (may_repeat(method, path, query) if retry is None else retry):
            return once()
        return retries.call(once, self.policy, describe(action), self.say)

    def send(
        self,
        method: str,
        path: str,
        *,
        action: Action,
        query: dict | None = None,
        body: Any = None,
        timeout: Timeout | None = None,
        accept: str = JSON,
    ) -> Any:
        """One attempt of a request; every failure a KubeApiError."""
        timeout = timeout or self.timeout
        try:
            with _own_request():
                return _call(self.api_client, method, path, query or {}, body, timeout, accept)
        except ApiException as e:
            if not e.status:  # the client's own wrapping of TLS failures
                raise unreachable(self.server, self.context, e) from None
            raise from_api_exception(e.status, e.reason or "", e.body, action, self.context, e.headers) from None
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
            raise self.failure(e, action, timeout) from None

    def get_tolerant(
        self, path: str, action: Action, tolerate: Collection[int] = TOLERATED
    ) -> tuple[Any, KubeApiError | None]:
        """(answer, None) of a GET, or (None, the error) when the server answered with a status in
        `tolerate` (403, 404: a part of what is read that the user may not see, or that is not there)."""
        try:
            return self.request("GET", path, action=action), None
        except KubeApiError as e:
            if e.status not in tolerate:
                raise
            return None, e

    def log_response(self, namespace: str, pod: str, options: dict[str, Any], timeout: Timeout) -> Any:
        """The raw (urllib3) response of a pods/log request; the same call on every client generation.
        The caller releases its connection."""
        api = k8s_client.CoreV1Api(self.api_client)
        options = {k: v for k, v in options.items() if v is not None}
        action = Action("get", "pods/log", "", "Pod", namespace, pod, "v1")

        def once() -> Any:
            try:
                with _own_request():
                    return api.read_namespaced_pod_log(
                        pod, namespace, _preload_content=False, _request_timeout=timeout, **options
                    )
            except ApiException as e:
                if not e.status:
                    raise unreachable(self.server, self.context, e) from None
                raise from_api_exception(e.status, e.reason or "", e.body, action, self.context, e.headers) from None
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
                raise self.failure(e, action, timeout) from None

        return retries.call(once, self.policy, describe(action), self.say)

    def failure(self, error: Exception, action: Action, timeout: Timeout) -> KubeApiError:
        """A request that got no answer: the server was not reached (refused, DNS, TLS, connect timeout), or
        it was and its answer was lost (a reset, a closed connection) or late (the read timed out)."""
        cause = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) else error
        if isinstance(cause, (urllib3.exceptions.ReadTimeoutError, TimeoutError)) and not isinstance(
            cause, urllib3.exceptions.ConnectTimeoutError
        ):
            return no_answer(self.server, self.context, action, True, timeout[1])
        if isinstance(
            cause, (urllib3.exceptions.ProtocolError, http.client.HTTPException, ConnectionResetError, BrokenPipeError)
        ):
            return no_answer(self.server, self.context, action, False, timeout[1])
        return unreachable(self.server, self.context, error)


def may_repeat(method: str, path: str, query: dict) -> bool:
    """Whether a request may be sent twice: reads and deletes, dry runs and access reviews change nothing
    that a second one would change again."""
    return method in ("GET", "DELETE") or query.get("dryRun") == "All" or path.endswith("selfsubjectaccessreviews")


def describe(action: Action) -> str:
    """ "list pods in namespace ml", "create ConfigMap mnist-ab12cd34-record in namespace ml" """
    return f"{action.verb} {action.what if action.name else action.resource}{action.where}"


def _call(
    api_client: Any,
    method: str,
    path: str,
    query: dict,
    body: Any,
    timeout: Timeout = REQUEST_TIMEOUT,
    accept: str = "application/json",
) -> Any:
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if hasattr(api_client, "param_serialize"):  # kubernetes >= 37
        params = api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query.items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(*params, _request_timeout=timeout)
        response.read()
        text = response.data.decode("utf-8", "replace") if response.data else ""
        if not 200 <= response.status <= 299:
            error = ApiException(status=response.status, reason=response.reason, body=text)
            error.headers = response.headers
            raise error
        return json.loads(text) if text else None
    # kubernetes <= 36: the raw urllib3 response (the deserialization arguments changed between
    # those generations); non-2xx answers raise ApiException in its REST layer.
    response = api_client.call_api(
        path,
        method,
        query_params=list(query.items()),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
        _request_timeout=timeout,
    )
    try:
        text = response.data.decode("utf-8", "replace") if response.data else ""
    finally:
        response.release_conn()
    return json.loads(text) if text else None


def connect(context: str | None, config_file: str | None) -> tuple[Any, str | None, str, str | None]:
    """(ApiClient, context name, default namespace, server URL) from kubeconfig, else in-cluster."""
    configuration = k8s_client.Configuration()
    configuration.retries = RETRIES
    files = kubeconfig.kubeconfig_files(config_file)
    paths = kubeconfig.kubeconfig_paths(config_file)
    if any(os.path.isfile(p) for p in paths):
        try:
            contexts, active = kube_config.list_kube_config_contexts(config_file=files)
        except (ConfigException, OSError, ValueError, yaml.YAMLError) as e:
            raise MLTrainingError(
                f"the kubeconfig {files} cannot be read: {e}",
                "fix it, or point KUBECONFIG at a working one (`kubectl config view` shows what kubectl sees)",
            ) from None
        names = [c["name"] for c in contexts or []]
        name = context or (active or {}).get("name")
        if not name or name not in names:
            problem = f"the kube context {name!r} is not in {files}" if name else f"{files} has no current context"
            raise MLTrainingError(
                problem,
                f"use one of: {', '.join(names) or '(none defined)'} — set {variable('kube_context')} or "
                "`kube_context` in [ml-training]",
            )
        try:
            kube_config.load_kube_config(
                config_file=files, context=name, client_configuration=configuration, persist_config=False
            )
        except (ConfigException, OSError, ValueError, yaml.YAMLError) as e:
            raise MLTrainingError(
                f"the kube context {name} in {files} cannot be used: {e}",
                f"check it with `kubectl --context {name} cluster-info`",
            ) from None
        namespace = next(c for c in contexts if c["name"] == name).get("context", {}).get("namespace") or "default"
        return k8s_client.ApiClient(configuration), name, namespace, configuration.host
    if kubeconfig.in_a_pod():
        account = kubeconfig.SERVICE_ACCOUNT_DIR
        loader = incluster_config.InClusterConfigLoader(
            token_filename=str(account / "token"), cert_filename=str(account / "ca.crt")
        )
        try:
            loader.load_and_set(configuration)
        except ConfigException as e:
            raise MLTrainingError(
                f"running in a pod, but its service account cannot be used: {e}",
                "mount a service account token into the pod, or provide a kubeconfig (KUBECONFIG)",
            ) from None
        try:
            namespace = (account / "namespace").read_text().strip() or "default"
        except OSError:
            namespace = "default"
        return k8s_client.ApiClient(configuration), None, namespace, configuration.host
    raise no_cluster_configured(paths)

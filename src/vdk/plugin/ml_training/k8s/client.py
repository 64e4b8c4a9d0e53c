"""Run-level operations on a cluster, for the verbs: apply a run's manifests (all or nothing), list,
read and delete runs, read run records, and what their pods say (pods, logs, events, Kueue).

Manifests go in and objects come out as plain dicts; the requests go through `transport`, and what
the cluster serves is read by `discovery`. Every API failure is an `MLTrainingError` that says what
to do (see `api_errors`).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from collections.abc import Iterator
from typing import Any

import urllib3

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s import creation
from vdk.plugin.ml_training.k8s import retries
from vdk.plugin.ml_training.k8s.api_errors import Action
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.api_errors import brief
from vdk.plugin.ml_training.k8s.api_errors import from_api_exception
from vdk.plugin.ml_training.k8s.api_errors import missing_namespace
from vdk.plugin.ml_training.k8s.backends import Discovery
from vdk.plugin.ml_training.k8s.discovery import discover
from vdk.plugin.ml_training.k8s.resources import CONFIG_MAP
from vdk.plugin.ml_training.k8s.resources import EVENT
from vdk.plugin.ml_training.k8s.resources import KUEUE_JOB_UID_LABEL
from vdk.plugin.ml_training.k8s.resources import KUEUE_WORKLOADS
from vdk.plugin.ml_training.k8s.resources import NAMESPACE
from vdk.plugin.ml_training.k8s.resources import POD
from vdk.plugin.ml_training.k8s.resources import SERVICE
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.retries import Say
from vdk.plugin.ml_training.k8s.runs import record as run_record
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_BACKEND
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_JOB
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_MANAGED_BY
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_RUN
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_TEAM
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_USAGE_OF
from vdk.plugin.ml_training.k8s.runs.identity import MANAGED_BY
from vdk.plugin.ml_training.k8s.runs.identity import label_value
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.k8s.runs.summary import summarize
from vdk.plugin.ml_training.k8s.transport import METADATA_ONLY
from vdk.plugin.ml_training.k8s.transport import Timeout
from vdk.plugin.ml_training.k8s.transport import Transport

# `has_runs` decides whether a data-job command is meant for ML: an unreachable cluster must not stall it.
PROBE_TIMEOUT = (3, 5)
# A followed log may stay silent for as long as an evaluation or a checkpoint takes.
FOLLOW_TIMEOUT = (10, 3600)
SELF_SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

# What the client creates: the backends' objects and the run record.
RESOURCE_TYPES = {(t.api_version, t.kind): t for t in (*backends.created_types(), CONFIG_MAP)}
# The main object of a run, by backend.
RUN_TYPES = {backend.name: backend.main for backend in backends.REGISTRY}


def resource_type(manifest: dict) -> ResourceType:
    key = (manifest.get("apiVersion"), manifest.get("kind"))
    if key not in RESOURCE_TYPES:
        raise ValueError(f"the client does not create {key[1]} ({key[0]})")
    return RESOURCE_TYPES[key]


class KubeClient:
    """A connection to one cluster and namespace.

    `context` and `namespace` come from VDK configuration / the job's config; unset, the
    kubeconfig's current context and its namespace are used (in a pod: the service account's)."""

    def __init__(
        self,
        context: str | None = None,
        namespace: str | None = None,
        config_file: str | None = None,
        say: Say | None = None,
    ):
        self.transport = Transport(context, config_file, say=say if say is not None else retries.to_stderr)
        self.context = self.transport.context
        self.server = self.transport.server
        self.namespace: str = namespace or self.transport.default_namespace
        self._job_backends: dict[str, frozenset[str]] = {}
        self._job_records: dict[str, dict] = {}  # job -> its records' metadata-only list

    def discover(self) -> Discovery:
        """What the cluster serves of the backends' APIs, and what each served backend needs to know."""
        return discover(self.transport)

    def check_namespace(self) -> None:
        """Raise an error that says what to do when the client's namespace does not exist.

        Users may lack the right to read namespaces (a namespaced Role cannot grant it): a 403
        proves nothing, so it passes, and a missing namespace shows up at the first create."""
        try:
            self.transport.request(
                "GET", NAMESPACE.path(name=self.namespace), action=NAMESPACE.action("get", name=self.namespace)
            )
        except KubeApiError as e:
            if e.status == 403:
                return
            if e.status == 404 and not e.not_served:
                raise missing_namespace(self.namespace, self.context) from None
            raise

    # --- apply ----------------------------------------------------------------------------------

    def apply(self, manifests: list[dict], say: Say | None = None) -> list[dict]:
        """Create `manifests` in order, all or nothing, each exactly once (k8s/creation.py): every object
        after the first is owned by the first; if any create fails, or the call is interrupted, what it
        created is deleted again and the error names what could not be."""
        return creation.apply(self, manifests, say)

    def create(self, rtype: ResourceType, body: dict) -> dict:
        """Create one object (named) exactly once, adopting it when the answer to its create was lost."""
        return creation.create(self, rtype, body)

    def check_access(self, manifests: list[dict], verbs: tuple[str, ...] = ("get", "list")) -> None:
        """What `apply` of `manifests` needs, without creating anything: every manifest through the server's
        dry run (permission to create, schema, admission webhooks), and permission for `verbs` on each of
        their resources, and to update the run's record (its run comes to own it) (SelfSubjectAccessReviews; a
        server that cannot answer them is not blamed)."""
        prepared = [self.prepare(m) for m in manifests]
        for rtype, body in prepared:
            creation.create(self, rtype, body, dry_run=True)
        for rtype in dict.fromkeys(rtype for rtype, _ in prepared):
            for verb in verbs + (("update",) if rtype == CONFIG_MAP else ()):
                self._check_allowed(rtype.action(verb, self.namespace if rtype.namespaced else None))

    def _check_allowed(self, action: Action) -> None:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "verb": action.verb,
                    "group": action.group,
                    "resource": action.plural,
                    **({"namespace": action.namespace} if action.namespace else {}),
                }
            },
        }
        try:
            answer = self.transport.request(
                "POST", SELF_SUBJECT_ACCESS_REVIEWS, body=review, action=Action("create", "selfsubjectaccessreviews")
            )
        except KubeApiError as e:
            if e.status in (403, 404):
                return  # reviews not served or not allowed: the first real request will tell
            raise
        status = (answer or {}).get("status") or {}
        if status.get("allowed") or not isinstance(answer, dict):
            return
        why = status.get("reason") or status.get("evaluationError") or "no rule allows it"
        message = f"SelfSubjectAccessReview: {why}"
        raise from_api_exception(403, "Forbidden", {"kind": "Status", "message": message}, action, self.context)

    def prepare(self, manifest: dict) -> tuple[ResourceType, dict]:
        """The type of `manifest` and a copy of it to send, in the client's namespace unless it names one."""
        rtype = resource_type(manifest)
        body = json.loads(json.dumps(manifest))  # a deep copy that is certainly plain JSON
        metadata = body.setdefault("metadata", {})
        if rtype.namespaced:
            metadata.setdefault("namespace", self.namespace)
        return rtype, body

    @staticmethod
    def resource_type(manifest: dict) -> ResourceType:
        return resource_type(manifest)

    def delete(self, rtype: ResourceType, name: str, namespace: str | None) -> bool:
        """Delete one object (its pods and what it owns go with it); False if it was already gone."""
        try:
            self.transport.request(
                "DELETE",
                rtype.path(namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
                action=rtype.action("delete", namespace, name),
            )
        except KubeApiError as e:
            if e.status == 404 and not e.not_served:
                return False
            raise
        return True

    # --- reading and deleting runs --------------------------------------------------------------

    def get(self, kind: str, name: str, api_version: str | None = None) -> dict | None:
        """One object of a kind the client creates (`ConfigMap`, a backend's kinds) in the namespace; None if absent."""
        matches = [t for (v, k), t in RESOURCE_TYPES.items() if k == kind and (api_version in (None, v))]
        if not matches:
            raise ValueError(f"unknown kind {kind!r}")
        return self._get(matches[0], name)

    def _get(self, rtype: ResourceType, name: str) -> dict | None:
        try:
            return self.transport.request(
                "GET", rtype.path(self.namespace, name), action=rtype.action("get", self.namespace, name)
            )
        except KubeApiError as e:
            if e.status == 404 and not e.not_served:
                return None
            raise

    def list_runs(
        self,
        job_name: str | None = None,
        team: str | None = None,
        unteamed: bool = False,
        notes: list[str] | None = None,
    ) -> list[RunSummary]:
        """Runs in the namespace (newest first), of every backend the cluster serves; only those
        of `job_name` and of the team label value `team` when given, only those without a team
        label with `unteamed`. One labelled list per backend, whatever the number of runs.
        With `notes` (a view), a backend whose list fails costs only its runs: a line in `notes` says
        so (unless every list failed: then its error is raised)."""
        kinds = None
        if job_name:
            try:
                kinds = self.job_backends(job_name)
            except KubeApiError:
                if notes is None:
                    raise
                kinds = None  # the records only narrow the lists: every backend's is read instead
        found = self._run_objects(job_name=job_name, team=team, unteamed=unteamed, backends=kinds or None, notes=notes)
        runs = [summarize(obj) for obj in found]
        return sorted(runs, key=lambda r: (r.created or "", r.name), reverse=True)

    def job_backends(self, job_name: str, timeout: Timeout | None = None) -> frozenset[str]:
        """The backends of the runs of `job_name`, from the labels of their run records (every run has one):
        one metadata-only list, read once per client. A job's runs are then one list per backend it uses,
        not one per backend the cluster serves."""
        if job_name not in self._job_backends:
            self._job_records[job_name] = (
                self.transport.request(
                    "GET",
                    CONFIG_MAP.path(self.namespace),
                    query={"labelSelector": f"{LABEL_JOB}={job_name},{LABEL_RUN},{LABEL_MANAGED_BY}={MANAGED_BY}"},
                    action=CONFIG_MAP.action("list", self.namespace),
                    timeout=timeout,
                    accept=METADATA_ONLY,
                    retry=timeout != PROBE_TIMEOUT,  # the probe of a data-job command must not wait for retries
                )
                or {}
            )
            items = self._job_records[job_name].get("items", [])
            labels = [(item.get("metadata") or {}).get("labels") or {} for item in items]
            self._job_backends[job_name] = frozenset(filter(None, (lab.get(LABEL_BACKEND) for lab in labels)))
        return self._job_backends[job_name]

    def job_records(self, job_name: str) -> list[dict]:
        """The metadata of the run records of `job_name` (labels, owners, when each was made), read once with
        its backends (`job_backends`)."""
        self.job_backends(job_name)
        return [item.get("metadata") or {} for item in self._job_records[job_name].get("items", [])]

    def forget_job(self, job_name: str) -> None:
        """Read the records of `job_name` again when next asked (another command may have started a run since)."""
        self._job_backends.pop(job_name, None)

    def has_runs(self, job_name: str) -> bool:
        """Whether a run of `job_name` exists: one quick list of its run records. Decides whether `vdk
        show/delete/execute -n NAME` is meant for an ML job (and is what those verbs read first anyway)."""
        if label_value(job_name) != job_name:
            return False  # not a possible label value, so no run carries it
        return bool(self.job_backends(job_name, timeout=PROBE_TIMEOUT))

    def get_run(self, run_name: str, backend: str | None = None) -> dict:
        """The main object of a run (of `backend`, when known)."""
        objects = self._main_objects(run_name, backend)
        if not objects:
            raise self._no_such_run(run_name)
        return objects[0]

    def delete_run(self, run_name: str, backend: str | None = None) -> list[str]:
        """Delete every object of a run (main object, Service, record); returns `Kind/name`s. A failure part
        way says what was deleted and what remains (the main object goes first: what it owns follows it)."""
        found = self._main_objects(run_name, backend)
        if not found:
            raise self._no_such_run(run_name)
        selector = f"{LABEL_RUN}={run_name}"
        for rtype in (SERVICE, CONFIG_MAP):
            found += self._list(rtype, selector)
        deleted: list[str] = []
        for i, obj in enumerate(found):
            rtype = resource_type(obj)
            try:
                # False: already removed by the garbage collector along with its owner.
                self.delete(rtype, obj["metadata"]["name"], obj["metadata"].get("namespace"))
            except MLTrainingError as e:
                left = found[i:]
                done = f"deleted {', '.join(deleted)}" if deleted else "nothing of it was deleted"
                owned = f" (owned by {deleted[0]}: Kubernetes deletes them with it)" if deleted else ""
                raise MLTrainingError(
                    f"deleting run {run_name} stopped part way: {e.problem}; {done}; still there: "
                    + ", ".join(f"{resource_type(o).kind}/{o['metadata']['name']}" for o in left)
                    + owned,
                    f"{e.fix}; then delete what remains (the same command again, or "
                    f"`{creation.delete_command(self, left)}`)",
                ) from e
            deleted.append(f"{rtype.kind}/{obj['metadata']['name']}")
        return deleted

    def read_run_record(self, run_name: str) -> run_record.RunRecord:
        """The record of a run: image, rendered manifests, spec and provenance (to run it again)."""
        name = run_record.record_name(run_name)
        configmap = self.get("ConfigMap", name)
        if configmap is None:
            raise MLTrainingError(
                f"run {run_name} has no record ({name}) in namespace {self.namespace}",
                "the run was deleted, or deployed by another tool; `vdk list` shows the runs that exist",
            )
        return run_record.parse(configmap)

    # --- usage records of deleted runs (k8s/gpu_hours.py) -------------------------------------------------

    def usage_records(self, team: str | None = None, unteamed: bool = False) -> list[dict]:
        """The usage records deleted runs left in the namespace (of the team label value `team`)."""
        return self._list(CONFIG_MAP, LABEL_USAGE_OF + team_selector(team, unteamed))

    def keep_usage_record(self, configmap: dict) -> None:
        """Create a deleted run's usage record (one already there is kept: the run was counted)."""
        rtype, body = self.prepare(configmap)
        try:
            self.create(rtype, body)
        except KubeApiError as e:
            if e.status != 409:
                raise

    def delete_usage_record(self, name: str) -> bool:
        return self.delete(CONFIG_MAP, name, self.namespace)

    # --- what runs are doing: pods, logs, events, Kueue ---------------------------------------------

    def list_pods(self, selector: str) -> list[dict]:
        """Pods in the namespace matching a label selector (see `manifests.pod_selector`)."""
        return self._list(POD, selector)

    def list_events(self) -> list[dict]:
        """The namespace's events (kept about an hour by the API server). One request: a run's
        events concern its object, its pods and Kueue's Workload, all named after the run."""
        return self._list(EVENT, "")

    def kueue_workloads(self, owner_uid: str) -> list[dict]:
        """Kueue's Workloads of the object with `owner_uid`; [] when Kueue is not installed or
        reading them is not allowed (they only explain, they are never needed)."""
        for rtype in KUEUE_WORKLOADS:
            try:
                return self._list(rtype, f"{KUEUE_JOB_UID_LABEL}={owner_uid}")
            except KubeApiError as e:
                if e.status not in (403, 404):
                    raise
        return []

    def pod_log(
        self,
        pod: str,
        container: str | None = None,
        previous: bool = False,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> tuple[str | None, str | None]:
        """(log text, None), or (None, why there is none) when the container has not started,
        has no earlier instance (`previous`) or the pod is gone."""
        options: dict[str, Any] = {"container": container, "previous": previous or None}
        if tail_lines is not None:
            options["tail_lines"] = tail_lines
        if limit_bytes is not None:
            options["limit_bytes"] = limit_bytes
        try:
            response = self.transport.log_response(self.namespace, pod, options, self.transport.timeout)
        except KubeApiError as e:
            if e.status in (400, 404) and not e.not_served:
                return None, e.detail
            raise
        try:
            return response.data.decode("utf-8", "replace"), None
        except (urllib3.exceptions.HTTPError, OSError) as e:  # the answer cut short
            raise self.transport.failure(e, _log_action(self.namespace, pod), self.transport.timeout) from None
        finally:
            response.release_conn()

    def follow_pod_log(self, pod: str, container: str | None = None, tail_lines: int | None = None) -> Iterator[str]:
        """The log's lines as they are written, until the container ends; KubeApiError (400)
        when it has not started."""
        options: dict[str, Any] = {"container": container, "follow": True}
        if tail_lines is not None:
            options["tail_lines"] = tail_lines
        response = self.transport.log_response(self.namespace, pod, options, FOLLOW_TIMEOUT)
        try:
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
            if buffer:
                yield buffer.decode("utf-8", "replace")
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise self.transport.failure(e, _log_action(self.namespace, pod), FOLLOW_TIMEOUT) from None
        finally:
            response.release_conn()

    def _main_objects(self, run_name: str, backend: str | None) -> list[dict]:
        """A run's main object: one GET when its backend is known, else a labelled list per backend."""
        rtype = RUN_TYPES.get(backend or "")
        if rtype is None:
            return self._run_objects(run_name=run_name)
        found = self._get(rtype, run_name)
        return [found] if found is not None else []

    def _run_objects(
        self,
        run_name: str | None = None,
        job_name: str | None = None,
        team: str | None = None,
        unteamed: bool = False,
        backends: Collection[str] | None = None,
        notes: list[str] | None = None,
    ) -> list[dict]:
        """The main objects of the runs the labels select: one list per backend (of `backends` when given).
        With `notes`, a list that fails becomes a line there, unless all of them failed."""
        selector = f"{LABEL_RUN}={run_name}" if run_name else LABEL_RUN
        if job_name:
            selector += f",{LABEL_JOB}={job_name}"
        selector += team_selector(team, unteamed)
        found: list[dict] = []
        failed: list[KubeApiError] = []
        for backend, rtype in RUN_TYPES.items():
            if backends is None or backend in backends:
                try:
                    found += self._list(rtype, f"{selector},{LABEL_BACKEND}={backend}", skip_unserved=True)
                except KubeApiError as e:
                    if notes is None:
                        raise
                    failed.append(e)
                    notes.append(f"runs of backend {backend} ({rtype.kind}) could not be listed{brief(e)}")
        if failed and len(failed) == len([b for b in RUN_TYPES if backends is None or b in backends]):
            raise failed[0]
        return found

    def _list(self, rtype: ResourceType, selector: str, skip_unserved: bool = False) -> list[dict]:
        try:
            listing = self.transport.request(
                "GET",
                rtype.path(self.namespace),
                query={"labelSelector": selector} if selector else {},
                action=rtype.action("list", self.namespace),
            )
        except KubeApiError as e:
            if skip_unserved and e.not_served:
                return []
            raise
        items = (listing or {}).get("items", [])
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", rtype.api_version)
            item.setdefault("kind", rtype.kind)
        return items

    def _no_such_run(self, run_name: str) -> MLTrainingError:
        return KubeApiError(
            f"there is no run named {run_name} in namespace {self.namespace}",
            f"`vdk list` shows the runs of this namespace (set another with {variable('namespace')})",
            404,
            "NotFound",
        )


def _log_action(namespace: str, pod: str) -> Action:
    return Action("get", "pods/log", "", "Pod", namespace, pod, "v1")


def team_selector(team: str | None, unteamed: bool = False) -> str:
    """The part of a label selector (",..." or "") that keeps the runs of the team label value `team`,
    or with `unteamed` those without a team label."""
    if unteamed:
        return f",!{LABEL_TEAM}"
    return f",{LABEL_TEAM}={team}" if team else ""

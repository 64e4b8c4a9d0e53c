"""What the cluster says of the VDK Control Service's set-up for the launcher (ops/cs_setup.py asks it for an
operator's `vdk deploy --dry-run`): the job's CronJob, which the service renders from its data-job template (the
pod's service account, whether its token is mounted, the launcher's switch among its variables, the deadline and the
retries), and whether that service account may do what the launcher does (SubjectAccessReviews, which the operator
may create and the launcher's account need not)."""

from __future__ import annotations

from dataclasses import dataclass

from vdk.plugin.ml_training.k8s.api_errors import Action
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.resources import ResourceType

CRON_JOB = ResourceType("CronJob", "batch", "v1", "cronjobs")
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Template:
    """The data-job template as the job's CronJob has it."""

    namespace: str
    service_account: str | None  # None: the namespace's `default`
    token_mounted: bool  # automountServiceAccountToken is not false
    environment: dict[str, str]  # of the job's container: vdkOptions' variables among them
    deadline_seconds: int | None
    backoff_limit: int | None
    image: str | None

    @property
    def account_user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account or 'default'}"


def read_template(client: KubeClient, job: str) -> Template | None:
    """The job's CronJob in the client's namespace, None when there is none. Raises KubeApiError."""
    try:
        cronjob = client.transport.request(
            "GET", CRON_JOB.path(client.namespace, job), action=CRON_JOB.action("get", client.namespace, job)
        )
    except KubeApiError as e:
        if e.status == 404 and not e.not_served:
            return None
        raise
    return parse_template(cronjob, client.namespace, job)


def parse_template(cronjob: dict, namespace: str, job: str) -> Template:
    job_spec = (((cronjob.get("spec") or {}).get("jobTemplate") or {}).get("spec")) or {}
    pod = (job_spec.get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    main = next((c for c in containers if c.get("name") == job), containers[0] if containers else {})
    environment = {e["name"]: str(e.get("value", "")) for e in main.get("env") or [] if "name" in e and "value" in e}
    deadline = job_spec.get("activeDeadlineSeconds")
    backoff = job_spec.get("backoffLimit")
    return Template(
        namespace=namespace,
        service_account=pod.get("serviceAccountName") or pod.get("serviceAccount") or None,
        token_mounted=pod.get("automountServiceAccountToken") is not False,
        environment=environment,
        deadline_seconds=int(deadline) if deadline is not None else None,
        backoff_limit=int(backoff) if backoff is not None else None,
        image=main.get("image"),
    )


def may(client: KubeClient, user: str, verb: str, rtype: ResourceType, namespace: str, sub: str = "") -> bool | None:
    """Whether `user` may `verb` the resource in `namespace` (a SubjectAccessReview); None when it cannot be asked
    (reviews not served, or not allowed to the asking user)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "resourceAttributes": {
                "verb": verb,
                "group": rtype.group,
                "resource": rtype.plural,
                "namespace": namespace,
                **({"subresource": sub} if sub else {}),
            },
        },
    }
    try:
        answer = client.transport.request(
            "POST", SUBJECT_ACCESS_REVIEWS, body=review, action=Action("create", "subjectaccessreviews")
        )
    except KubeApiError as e:
        if e.status in (403, 404):
            return None
        raise
    return bool(((answer or {}).get("status") or {}).get("allowed"))

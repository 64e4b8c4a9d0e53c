"""What a VDK Control Service needs for ml-training jobs, checked for `vdk deploy -p JOB --dry-run` (an operator's
check, docs/control-service-operator.md): each item is ok, missing (with its fix) or unknown (with how to know).

From the Control Service's API, as any user: its URL, that it answers and takes the credentials, and that its
supported Python versions list the ml-training entry (the API names no images). With a kube context on the
service's data-jobs namespace, from the job's CronJob (which the service renders from its data-job template, once
the job was deployed through it): the launcher's switch among the pod's variables (vdkOptions), its service
account and whether its token is mounted, the deadline and retries (what a run costs); and, by SubjectAccessReview,
whether that account may do what the launcher does in the training namespace and in its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.ops.cs_deploy import ENTRY
from vdk.plugin.ml_training.ops.cs_deploy import ServiceRoute
from vdk.plugin.ml_training.ops.cs_deploy import check_for_service
from vdk.plugin.ml_training.ops.typed_calls import checked

ROLE_FIX = 'give it the Role of docs/control-service-operator.md ("The launcher\'s service account") there'


@dataclass(frozen=True)
class SetupCheck:
    what: str
    ok: bool | None  # None: could not be checked (the fix says how to)
    detail: str = ""
    fix: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@checked
def check_setup(spec: MLJobSpec, route: ServiceRoute) -> list[SetupCheck]:
    """Every check that can be made from here, in order."""
    checks = _service_checks(spec, route)
    if route.through:
        checks += _cluster_checks(spec)
    return checks


def _service_checks(spec: MLJobSpec, route: ServiceRoute) -> list[SetupCheck]:
    endpoint = route.endpoint
    checks = [
        SetupCheck(
            "the Control Service's URL",
            endpoint is not None,
            f"{endpoint.url} (from {endpoint.origin})" if endpoint else "",
            "set it with `vdk set-default -u URL` or VDK_CONTROL_SERVICE_REST_API_URL",
        )
    ]
    try:
        check_for_service(spec)
        checks.append(SetupCheck("the job's name and team for the Control Service", True, f"{spec.name}, {spec.team}"))
    except MLTrainingError as e:
        checks.append(SetupCheck("the job's name and team for the Control Service", False, e.problem, e.fix))
    if endpoint is None:
        return checks
    answered = route.answered
    checks.append(
        SetupCheck(
            "the Control Service answers",
            answered,
            "" if answered else route.why,
            "check the URL and that this machine reaches it; `vdk info -u URL` asks the same",
        )
    )
    if answered:
        checks.append(
            SetupCheck(
                f"the ml-training entry `{route.entry}` among its supported Python versions",
                route.through,
                f"it has {', '.join(route.supported) or 'none'}",
                f"add `{route.entry}` to the Helm value deploymentSupportedPythonVersions, with the baseImage, "
                "vdkImage and builderImage of docs/control-service-operator.md (or set "
                f"{ENTRY} to the entry your operator made)",
            )
        )
    return checks


def _cluster_checks(spec: MLJobSpec) -> list[SetupCheck]:
    """From the job's CronJob, with a kube context on the data-jobs namespace; unknown without one."""
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.launcher_setup import read_template

    how = (
        "with a kube context whose namespace is the Control Service's data-jobs namespace (deploymentK8sNamespace), "
        "once the job was deployed through it: `vdk deploy -p JOB --dry-run` then reads the job's CronJob"
    )
    try:
        client = KubeClient(spec.kube_context)
        template = read_template(client, spec.name)
    except MLTrainingError as e:
        return [SetupCheck("the data-job template (the job's CronJob)", None, e.problem.splitlines()[0], how)]
    if template is None:
        return [SetupCheck("the data-job template (the job's CronJob)", None, f"no CronJob {spec.name} in "
                           f"namespace {client.namespace}", how)]  # fmt: skip
    switch = variable("launcher")
    checks = [
        SetupCheck(
            "the launcher's switch in the data-job pods",
            template.environment.get(switch, "").strip().lower() in ("true", "1", "yes", "on"),
            f"{switch}={template.environment.get(switch, '(not set)')}",
            f"add `{switch}=true` under [default] of the Helm value vdkOptions (or under [{spec.name}] for this job)",
        ),
        SetupCheck(
            "the launcher's service account and its token",
            template.service_account is not None and template.token_mounted,
            f"{template.service_account or 'default'}, token "
            f"{'mounted' if template.token_mounted else 'not mounted (automountServiceAccountToken: false)'}",
            "set serviceAccountName and automountServiceAccountToken: true in the data-job template "
            "(datajobTemplate.template)",
        ),
        _deadline(spec, template.deadline_seconds, template.backoff_limit),
    ]
    return checks + _permissions(client, spec, template)


def _deadline(spec: MLJobSpec, deadline: int | None, backoff: int | None) -> SetupCheck:
    from vdk.plugin.ml_training.k8s.own_execution import leave_margin
    from vdk.plugin.ml_training.units import format_duration

    retries = f"; {backoff} retries of the launcher's pod (each finds the same run)" if backoff is not None else ""
    if deadline is None:
        return SetupCheck("the template's deadline", True, f"none: the launcher follows every run to its end{retries}")
    leave = deadline - leave_margin(deadline)
    longer = spec.max_runtime_seconds is None or spec.max_runtime_seconds > leave
    note = (
        f"activeDeadlineSeconds {deadline}: the launcher leaves after {format_duration(int(leave))}; a longer run "
        "goes on and the next execution reports it" if longer else f"activeDeadlineSeconds {deadline}, longer than "
        f"max_runtime ({format_duration(spec.max_runtime_seconds or 0)})"
    )  # fmt: skip
    return SetupCheck("the template's deadline", True, note + retries)


def _permissions(client, spec: MLJobSpec, template) -> list[SetupCheck]:
    """What the launcher does, asked for its account: in the training namespace, the run's objects and reading
    its pods; in its own, its Job and pod."""
    from vdk.plugin.ml_training.k8s import resources
    from vdk.plugin.ml_training.k8s.backends import REGISTRY
    from vdk.plugin.ml_training.k8s.launcher_setup import may

    # the launcher's: the job's own key, else the data-job pods' setting (vdkOptions), else their namespace
    own_key = (spec.origin("namespace") or "").startswith(f"[{SECTION}]")
    from_pods = template.environment.get(variable("namespace"))
    training = (spec.namespace if own_key else None) or from_pods or template.namespace
    kinds = [b.main for b in REGISTRY if spec.backend in ("auto", b.name)]
    asks = [(verb, rtype, training, "") for rtype in (*kinds, resources.CONFIG_MAP, resources.SERVICE)
            for verb in ("create", "get", "list", "delete")]  # fmt: skip
    asks += [(verb, resources.POD, training, "") for verb in ("get", "list")]
    asks += [("get", resources.POD, training, "log"), ("list", resources.EVENT, training, "")]
    asks += [("get", resources.JOB, template.namespace, ""), ("get", resources.POD, template.namespace, "")]
    denied, unknown = [], 0
    for verb, rtype, namespace, sub in asks:
        allowed = may(client, template.account_user, verb, rtype, namespace, sub)
        if allowed is None:
            unknown += 1
        elif not allowed:
            plural = f"{rtype.plural}/{sub}" if sub else rtype.plural
            denied.append(f"{verb} {plural} in {namespace}")
    what = f"what the launcher ({template.account_user}) may do"
    if unknown == len(asks):
        return [SetupCheck(what, None, "SubjectAccessReviews cannot be made with this kube context",
                           "ask with a kube context that may create subjectaccessreviews")]  # fmt: skip
    if denied:
        return [SetupCheck(what, False, "it may not " + ", ".join(denied), ROLE_FIX)]
    return [SetupCheck(what, True, f"everything, in namespace {training} and {template.namespace}")]

"""What the cluster knows of a job's datasets beyond its spec: the values of the Secrets its data step uses (to
resolve references at deploy with the credentials the pods will have), the size of its data cache claim, and
the manifests of its claims that a run's pods reported (the data step's termination message, or for a
backend without the init container, the first lines of its training container's log), kept in the run's
record once read (`keep_in_record`)."""

from __future__ import annotations

import base64
from collections.abc import Callable

from vdk.plugin.ml_training.datafetch.data_pins import parse_manifests
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import SECRETS_SECTION
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import pod_selector
from vdk.plugin.ml_training.k8s.resources import CONFIG_MAP
from vdk.plugin.ml_training.k8s.resources import PERSISTENT_VOLUME_CLAIM
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.runs import record as run_record
from vdk.plugin.ml_training.k8s.storage.data_volumes import FETCH_CONTAINER
from vdk.plugin.ml_training.units import parse_quantity

SECRET = ResourceType("Secret", "", "v1", "secrets")
# The variables the data step reads: the stores' endpoints and credentials.
DATA_VARIABLES = ("AWS_", "HF_", "HUGGING_FACE_HUB_TOKEN")
LOG_HEAD_BYTES = 65536  # where the data step's lines are, at the start of a training container's log


def secret_values(
    client: KubeClient,
    spec: MLJobSpec,
    note: Callable[[str], None],
    shell: dict[str, str],
    from_secrets: set[str] | None = None,
) -> dict:
    """The values of the job's Secrets that the data step uses, as the pods get them; where the Secret cannot be
    read here (no permission), the variable of `shell` of the same name, with a note. `from_secrets`: gets the
    names of the variables whose values were the Secrets'."""
    values: dict[str, str] = {}
    for secret in spec.secrets:
        if not secret.name.startswith(DATA_VARIABLES):
            continue
        found, refused = client.transport.get_tolerant(
            SECRET.path(client.namespace, secret.secret), SECRET.action("get", client.namespace, secret.secret)
        )
        if refused is not None and refused.status == 404:
            raise MLTrainingError(
                f"{spec.config_path} [{SECRETS_SECTION}] {secret.name}: Secret {secret.secret} is not in namespace "
                f"{client.namespace}; the data step needs it to read the job's datasets",
                f"create it: `kubectl create secret generic {secret.secret} --from-literal={secret.key}=... -n "
                f"{client.namespace}`, or correct the name",
            )
        if refused is not None:
            if shell.get(secret.name):
                values[secret.name] = shell[secret.name]
                note(
                    f"Secret {secret.secret} cannot be read here (`get secrets`): the datasets are resolved with "
                    f"{secret.name} of your shell, the pods will use the Secret's"
                )
            else:
                note(
                    f"Secret {secret.secret} cannot be read here (`get secrets`) and {secret.name} is not set in your "
                    "shell: the datasets are resolved without it"
                )
            continue
        encoded = ((found or {}).get("data") or {}).get(secret.key)
        if encoded is None:
            raise MLTrainingError(
                f"{spec.config_path} [{SECRETS_SECTION}] {secret.name}: Secret {secret.secret} has no key "
                f"{secret.key!r} (it has: {', '.join(sorted((found or {}).get('data') or {})) or 'none'})",
                f"name one of its keys (`{secret.name} = {secret.secret}/KEY`), or add it to the Secret",
            )
        values[secret.name] = base64.b64decode(encoded).decode("utf-8", "replace")
        if from_secrets is not None:
            from_secrets.add(secret.name)
    return values


def claim_capacity(client: KubeClient, claim: str) -> int | None:
    """Bytes the claim holds (its bound capacity, else its request); None when it cannot be read."""
    found, refused = client.transport.get_tolerant(
        PERSISTENT_VOLUME_CLAIM.path(client.namespace, claim),
        PERSISTENT_VOLUME_CLAIM.action("get", client.namespace, claim),
    )
    if refused is not None or not found:
        return None
    size = ((found.get("status") or {}).get("capacity") or {}).get("storage")
    size = size or (((found.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    try:
        return int(parse_quantity(size)) if size else None
    except ValueError:
        return None


def keep_in_record(client: KubeClient, run_name: str, manifests: dict[str, dict]) -> bool:
    """What the pods reported of the run's claims written into its record, so that it outlives the pods; False
    when the record has it already or may not be updated here (the pods still say it while they exist)."""
    name = run_record.record_name(run_name)
    try:
        configmap = client.get("ConfigMap", name)
        updated = run_record.with_manifests(configmap, manifests) if configmap else None
        if updated is None:
            return False
        client.transport.request(
            "PUT",
            CONFIG_MAP.path(client.namespace, name),
            action=CONFIG_MAP.action("update", client.namespace, name),
            body=updated,
        )
    except MLTrainingError:
        return False  # no permission to update it, or another vdk did it first: the manifests are not lost
    return True


def reported_manifests(client: KubeClient, run_name: str, backend: str | None) -> dict[str, dict]:
    """target -> manifest of each claim, as the run's pods reported it ({} when none did, or they are gone)."""
    if backend is None or backends.find(backend) is None:
        return {}
    try:
        pods = client.list_pods(pod_selector(backend, run_name))
    except MLTrainingError:
        return {}
    for pod in pods:
        for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
            if status.get("name") != FETCH_CONTAINER:
                continue
            for state in (status.get("state") or {}, status.get("lastState") or {}):
                message = (state.get("terminated") or {}).get("message")
                found = parse_manifests((message or "").splitlines())
                if found:
                    return found
    container = backends.get(backend).container
    for pod in pods:
        try:
            text, _ = client.pod_log(pod["metadata"]["name"], container, limit_bytes=LOG_HEAD_BYTES)
        except MLTrainingError:
            return {}  # logs may not be read here: the manifests are unknown
        found = parse_manifests((text or "").splitlines())
        if found:
            return found
    return {}

"""Shape checks of native objects (Job, Service, ConfigMap) with the `kubernetes` client's models.

An object is read into its model (`V1Job`, ...) and written back: a field the model does not know
disappears on the way (an unknown field, as the API server would report it under
fieldValidation=Strict), a wrongly typed value fails or changes. On top come the API server's own
validation rules for the fields the plugin uses (restart policy, podFailurePolicy, Indexed
completions, headless Services, names, quantities).
"""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes import client

from tests.support.crd_schema import FieldError
from tests.support.crd_schema import metadata_errors

_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def native_errors(obj: dict, model: str) -> list[FieldError]:
    errors = metadata_errors(obj.get("metadata"))
    if model == "V1Lease":  # its MicroTimes do not survive the models' round trip as written: checked as Go reads them
        return errors + _lease_rules(obj)
    try:
        written = _round_trip(obj, model)
    except Exception as e:  # noqa: BLE001 - pydantic's ValidationError (37+) or ValueError (older models)
        # Nested models are read one by one, so a location is relative to the innermost object.
        errors += [
            FieldError(_loc(err.get("loc", ())), f"Invalid value: {err.get('msg', '')}") for err in _pydantic_errors(e)
        ]
    else:
        errors += list(_diff(obj, written, ""))
    rules = {
        "V1Job": _job_rules,
        "V1Service": _service_rules,
        "V1ConfigMap": _configmap_rules,
        "V1Pod": _pod_rules,
        "V1PersistentVolumeClaim": lambda obj: [],
    }[model]
    return errors + rules(obj)


def _round_trip(obj: dict, model: str) -> Any:
    api = client.ApiClient()
    try:
        typed = api.deserialize(json.dumps(obj), model, "application/json")
    except TypeError:  # kubernetes <= 36: deserialize(response, type)

        class _Response:
            data = json.dumps(obj)

        typed = api.deserialize(_Response(), model)
    return api.sanitize_for_serialization(typed)


def _pydantic_errors(error: Exception) -> list[dict]:
    if hasattr(error, "errors"):
        return list(error.errors())
    return [{"loc": (), "msg": str(error)}]


def _loc(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _diff(original: Any, written: Any, path: str):
    if isinstance(original, dict):
        if not isinstance(written, dict):
            yield FieldError(path, f"Invalid value: expected an object, got {type(original).__name__}")
            return
        for key, value in original.items():
            child = f"{path}.{key}" if path else key
            if key not in written:
                if value is not None:
                    yield FieldError(child, "field not declared in schema", unknown=True)
                continue
            yield from _diff(value, written[key], child)
    elif isinstance(original, list):
        if not isinstance(written, list) or len(written) != len(original):
            yield FieldError(path, "Invalid value: expected a list")
            return
        for i, (a, b) in enumerate(zip(original, written, strict=True)):
            yield from _diff(a, b, f"{path}[{i}]")
    elif type(original) is not type(written) or original != written:
        yield FieldError(path, f"Invalid value: {original!r}: wrong type or value (read back as {written!r})")


def _pod_template_rules(template: dict, path: str, allowed_restart: tuple[str, ...]) -> list[FieldError]:
    errors = []
    spec = template.get("spec") or {}
    if spec.get("restartPolicy") not in allowed_restart:
        errors.append(
            FieldError(
                f"{path}.spec.restartPolicy",
                f"Unsupported value: {spec.get('restartPolicy')!r}: supported values: {allowed_restart}",
            )
        )
    containers = spec.get("containers") or []
    if not containers:
        errors.append(FieldError(f"{path}.spec.containers", "Required value"))
    names = [c.get("name") for c in containers]
    for i, c in enumerate(containers):
        where = f"{path}.spec.containers[{i}]"
        if not c.get("name") or not _DNS_1123_LABEL.match(c["name"]):
            errors.append(FieldError(f"{where}.name", f"Invalid value: {c.get('name')!r}"))
        if not c.get("image"):
            errors.append(FieldError(f"{where}.image", "Required value"))
        for j, e in enumerate(c.get("env") or []):
            if not _ENV_NAME.match(e.get("name", "")):
                errors.append(FieldError(f"{where}.env[{j}].name", f"Invalid value: {e.get('name')!r}"))
        for part in ("requests", "limits"):
            for res, qty in ((c.get("resources") or {}).get(part) or {}).items():
                if not _QUANTITY.match(str(qty)):
                    errors.append(
                        FieldError(f"{where}.resources.{part}[{res}]", f"Invalid value: {qty!r}: must be a quantity")
                    )
        volumes = {v.get("name") for v in spec.get("volumes") or []}
        for j, m in enumerate(c.get("volumeMounts") or []):
            if m.get("name") not in volumes:
                errors.append(FieldError(f"{where}.volumeMounts[{j}].name", f"Not found: {m.get('name')!r}"))
    if len(set(names)) != len(names):
        errors.append(FieldError(f"{path}.spec.containers", "Duplicate value: container names"))
    return errors


def _job_rules(obj: dict) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors = _pod_template_rules(spec.get("template") or {}, "spec.template", ("Never", "OnFailure"))
    if spec.get("completionMode") == "Indexed":
        if not isinstance(spec.get("completions"), int):
            errors.append(FieldError("spec.completions", "Required value: when completion mode is Indexed"))
    if spec.get("podFailurePolicy") and (spec.get("template") or {}).get("spec", {}).get("restartPolicy") != "Never":
        errors.append(
            FieldError(
                "spec.template.spec.restartPolicy",
                "Invalid value: only Never is supported when podFailurePolicy is specified",
            )
        )
    containers = {c.get("name") for c in (spec.get("template") or {}).get("spec", {}).get("containers") or []}
    for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
        errors += _failure_rule(rule, f"spec.podFailurePolicy.rules[{i}]", containers)
    for key in ("completions", "parallelism", "backoffLimit", "ttlSecondsAfterFinished", "activeDeadlineSeconds"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or value < 0):
            errors.append(FieldError(f"spec.{key}", f"Invalid value: {value!r}: must be greater than or equal to 0"))
    return errors


def _failure_rule(rule: dict, where: str, containers: set) -> list[FieldError]:
    """A podFailurePolicy rule as pkg/apis/batch/validation/validation.go (validatePodFailurePolicyRule) checks it:
    an action of the Job's (FailIndex only with backoffLimitPerIndex, which the plugin never sets), exactly one of
    onExitCodes and onPodConditions, exit codes In (never 0) or NotIn, conditions with a type and a status."""
    errors = []
    if rule.get("action") not in ("FailJob", "Ignore", "Count"):
        errors.append(FieldError(f"{where}.action", f"Unsupported value: {rule.get('action')!r}"))
    codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
    if (codes is None) == (conditions is None):
        errors.append(FieldError(where, "Invalid value: specify exactly one of onExitCodes and onPodConditions"))
    if codes is not None:
        if codes.get("containerName") and codes["containerName"] not in containers:
            errors.append(FieldError(f"{where}.onExitCodes.containerName", "Invalid value: no such container"))
        values = codes.get("values") or []
        if codes.get("operator") not in ("In", "NotIn"):
            errors.append(FieldError(f"{where}.onExitCodes.operator", f"Unsupported value: {codes.get('operator')!r}"))
        if not values or len(set(values)) != len(values) or (codes.get("operator") == "In" and 0 in values):
            errors.append(FieldError(f"{where}.onExitCodes.values", f"Invalid value: {values!r}"))
    for j, pattern in enumerate(conditions or []):
        if not pattern.get("type"):
            errors.append(FieldError(f"{where}.onPodConditions[{j}].type", "Required value"))
        if pattern.get("status", "True") not in ("True", "False", "Unknown"):
            errors.append(
                FieldError(f"{where}.onPodConditions[{j}].status", f"Unsupported value: {pattern['status']!r}")
            )
    return errors


def _pod_rules(obj: dict) -> list[FieldError]:
    """A bare pod: its template rules (any restart policy) and the mounts' subPaths (relative, no `..`)."""
    spec = obj.get("spec") or {}
    errors = _pod_template_rules({"spec": spec}, "", ("Always", "OnFailure", "Never"))
    for i, c in enumerate(spec.get("containers") or []):
        for j, m in enumerate(c.get("volumeMounts") or []):
            sub = m.get("subPath") or ""
            if sub.startswith("/") or ".." in sub.split("/"):
                errors.append(FieldError(f"spec.containers[{i}].volumeMounts[{j}].subPath", f"Invalid value: {sub!r}"))
    return [FieldError(e.field.lstrip("."), e.message) for e in errors]


def _service_rules(obj: dict) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors = []
    ports = spec.get("ports") or []
    if not ports and spec.get("clusterIP") != "None":
        errors.append(FieldError("spec.ports", "Required value"))
    if len(ports) > 1 and not all(p.get("name") for p in ports):
        errors.append(FieldError("spec.ports", "Required value: port names when there are several ports"))
    for key, value in (spec.get("selector") or {}).items():
        if not isinstance(value, str):
            errors.append(FieldError(f"spec.selector.{key}", "Invalid value: must be a string"))
    return errors


def _configmap_rules(obj: dict) -> list[FieldError]:
    data = obj.get("data") or {}
    errors = [
        FieldError(f"data[{k}]", "Invalid value: must be a string") for k, v in data.items() if not isinstance(v, str)
    ]
    size = sum(len(k) + len(str(v).encode()) for k, v in data.items())
    if size > 1024 * 1024:
        errors.append(FieldError("data", f"Too long: must have at most 1048576 bytes, has {size}"))
    return errors


_LEASE_FIELDS = {
    "acquireTime",
    "holderIdentity",
    "leaseDurationSeconds",
    "leaseTransitions",
    "preferredHolder",
    "renewTime",
    "strategy",
}
# metav1.MicroTime as the API server decodes it: time.Parse(RFC3339Micro), six digits of the second's fraction.
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")


def micro_time_problem(obj: dict) -> str | None:
    """The decoding error of a Lease whose acquireTime or renewTime is not a MicroTime (a 400 before any
    validation), as the API server words it; None when both are."""
    spec = obj.get("spec") or {}
    for key in ("acquireTime", "renewTime"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, str) or not MICRO_TIME.match(value)):
            return (
                f'Lease in version "v1" cannot be handled as a Lease: parsing time {json.dumps(value)} as '
                '"2006-01-02T15:04:05.000000Z07:00": cannot parse'
            )
    return None


def _lease_rules(obj: dict) -> list[FieldError]:
    """coordination/v1 ValidateLeaseSpec, and the fields a Lease has."""
    spec = obj.get("spec") or {}
    errors = [
        FieldError(f"spec.{key}", "field not declared in schema", unknown=True)
        for key in spec
        if key not in _LEASE_FIELDS
    ]
    unknown = set(obj) - {"apiVersion", "kind", "metadata", "spec"}
    errors += [FieldError(key, "field not declared in schema", unknown=True) for key in sorted(unknown)]
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        errors.append(FieldError("spec.leaseDurationSeconds", f"Invalid value: {duration!r}: must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        errors.append(
            FieldError("spec.leaseTransitions", f"Invalid value: {transitions!r}: must be greater than or equal to 0")
        )
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        errors.append(FieldError("spec.holderIdentity", f"Invalid value: {holder!r}: must be a string"))
    if spec.get("preferredHolder") and not spec.get("strategy"):
        errors.append(FieldError("spec.preferredHolder", "Forbidden: may only be specified if `strategy` is defined"))
    return errors

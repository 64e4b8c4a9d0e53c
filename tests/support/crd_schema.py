"""Validation of custom resources against the real CRD OpenAPI v3 schemas of the upstream projects.

The CRDs are their data: pinned and found by `upstream_crds` (VDK_ML_TRAINING_CRD_DIR, ../shared/crds/,
or the cache `make test` fills), never copied into this project; without them, the tests that need
them skip. Their structural schemas are turned into JSON Schema the way an API server reads them:

- x-kubernetes-int-or-string: integer or string; nullable: null allowed;
- objects with declared properties and no additionalProperties / preserve-unknown-fields reject
  unknown fields (the server prunes them, or rejects them with fieldValidation=Strict, which is
  what the plugin's client sends) — reported separately as `unknown` errors;
- format int32 / int64 ranges, date-time;
- x-kubernetes-list-type map (unique keys) and set (unique items);
- x-kubernetes-validations: the CEL rules these CRDs use are evaluated by a small interpreter;
  any other rule raises UnsupportedRule, so no rule is ever skipped silently.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support import upstream_crds

PYTORCHJOB_CRD = "kubeflow.org_pytorchjobs.yaml"
TRAINJOB_CRD = "trainer.kubeflow.org_trainjobs.yaml"

_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class UnsupportedRule(RuntimeError):
    pass


@cache
def load_crd(filename: str) -> dict:
    """The pinned upstream CRD `filename`; skips the calling test when it is not available."""
    try:
        path = upstream_crds.locate(upstream_crds.PINNED[filename])
    except upstream_crds.CRDUnavailable as e:
        pytest.skip(str(e))
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


@dataclass(frozen=True)
class FieldError:
    field: str  # as the API server writes it: spec.pytorchReplicaSpecs.Master.replicas, containers[0]
    message: str
    unknown: bool = False  # an undeclared field (pruned, or rejected under fieldValidation=Strict)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class CRDSchema:
    """One served version of a CRD, ready to validate objects of its kind."""

    def __init__(self, crd: dict, version: str | None = None):
        spec = crd["spec"]
        served = [v for v in spec["versions"] if v.get("served")]
        chosen = next(v for v in served if version is None or v["name"] == version)
        self.group: str = spec["group"]
        self.version: str = chosen["name"]
        self.kind: str = spec["names"]["kind"]
        self.openapi: dict = chosen["schema"]["openAPIV3Schema"]
        self._validator = _VALIDATOR(to_json_schema(self.openapi), format_checker=_FORMATS)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def errors(self, obj: Any) -> list[FieldError]:
        out = []
        if not isinstance(obj, dict):
            return [FieldError("<root>", "must be an object")]
        if obj.get("apiVersion") != self.api_version:
            out.append(FieldError("apiVersion", f"must be {self.api_version}, not {obj.get('apiVersion')!r}"))
        if obj.get("kind") != self.kind:
            out.append(FieldError("kind", f"must be {self.kind}, not {obj.get('kind')!r}"))
        out.extend(metadata_errors(obj.get("metadata")))
        for error in sorted(self._validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
            out.extend(_field_errors(error))
        return out


def metadata_errors(metadata: Any) -> list[FieldError]:
    """The ObjectMeta checks an API server makes on every object."""
    if not isinstance(metadata, dict):
        return [FieldError("metadata", "required")]
    out = []
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        out.append(FieldError("metadata.name", "Required value: name or generateName is required"))
    elif len(name) > 253 or not _DNS_1123_SUBDOMAIN.match(name):
        out.append(FieldError("metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain is required"))
    for what in ("labels", "annotations"):
        values = metadata.get(what, {})
        if not isinstance(values, dict):
            out.append(FieldError(f"metadata.{what}", "must be a map of strings"))
            continue
        for key, value in values.items():
            if not isinstance(value, str):
                out.append(FieldError(f"metadata.{what}.{key}", "value must be a string"))
            if not _qualified_name_ok(key):
                out.append(FieldError(f"metadata.{what}", f"Invalid value: {key!r}: not a qualified name"))
            if what == "labels" and isinstance(value, str) and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                out.append(FieldError("metadata.labels", f"Invalid value: {value!r}: not a valid label value"))
    return out


def _qualified_name_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


# --- structural schema -> JSON Schema ---------------------------------------------------------


def to_json_schema(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if k not in ("description", "default", "example")}
    for key in ("properties",):
        if key in out:
            out[key] = {name: to_json_schema(child) for name, child in out[key].items()}
    for key in ("items", "not"):
        if isinstance(out.get(key), dict):
            out[key] = to_json_schema(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(out["additionalProperties"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [to_json_schema(child) for child in out[key]]
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.pop("anyOf", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    if out.pop("x-kubernetes-embedded-resource", False):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    if out.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    return out


def _list_map_keys(validator, keys, instance, schema):
    if not validator.is_type(instance, "array"):
        return
    seen = {}
    for index, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k) for k in keys)
        if key in seen:
            yield jsonschema.ValidationError(
                f"Duplicate value: {dict(zip(keys, key, strict=True))} (also at index {seen[key]})", path=[index]
            )
        seen[key] = index


def _cel_validations(validator, rules, instance, schema):
    for rule in rules:
        if not cel_holds(rule["rule"], instance):
            yield jsonschema.ValidationError(f"Invalid value: {rule.get('message') or 'failed rule: ' + rule['rule']}")


_VALIDATOR = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    {"x-kubernetes-list-map-keys": _list_map_keys, "x-kubernetes-validations": _cel_validations},
)
_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("int32")
def _int32(value) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@_FORMATS.checks("int64")
def _int64(value) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


@_FORMATS.checks("date-time", raises=ValueError)
def _date_time(value) -> bool:
    if isinstance(value, str):
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


def _field_errors(error: jsonschema.ValidationError) -> list[FieldError]:
    path = _format_path(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        return [FieldError(_join(path, name), "field not declared in schema", unknown=True) for name in extra]
    if error.validator == "required":
        missing = re.match(r"'(.*)' is a required property", error.message)
        return [FieldError(_join(path, missing.group(1) if missing else "?"), "Required value")]
    if error.validator == "anyOf" and error.context:
        # Report the int-or-string / anyOf failure once, by its own message.
        return [FieldError(path or "<root>", f"Invalid value: {error.instance!r}: must be an integer or a string")]
    return [FieldError(path or "<root>", error.message)]


def _format_path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# --- the CEL these CRDs use -------------------------------------------------------------------

_PATH = r"self(?:\.[A-Za-z_]\w*)*"


def cel_holds(rule: str, value: Any) -> bool:
    """Evaluate a rule made of `||` / `&&` of the simple terms found in the Kubeflow CRDs, on create."""
    if "||" in rule:
        return any(cel_holds(part.strip(), value) for part in rule.split("||"))
    if "&&" in rule:
        return all(cel_holds(part.strip(), value) for part in rule.split("&&"))
    rule = rule.strip()
    if rule == "self == oldSelf":
        return True  # transition rules do not apply when an object is created
    if m := re.fullmatch(rf"has\(({_PATH})\)", rule):
        return _lookup(value, m.group(1), missing=_MISSING) is not _MISSING
    if m := re.fullmatch(rf"size\(({_PATH})\)\s*(<=|<|>=|>|==)\s*(\d+)", rule):
        size, limit = len(_lookup(value, m.group(1))), int(m.group(3))
        return {"<=": size <= limit, "<": size < limit, ">=": size >= limit, ">": size > limit, "==": size == limit}[
            m.group(2)
        ]
    if m := re.fullmatch(rf"({_PATH})\.matches\('(.*)'\)", rule):
        return re.search(m.group(2), _lookup(value, m.group(1))) is not None
    if m := re.fullmatch(rf"({_PATH})\s*==\s*'(.*)'", rule):
        return _lookup(value, m.group(1)) == m.group(2)
    if m := re.fullmatch(rf"({_PATH})\s+in\s+\[(.*)\]", rule):
        options = [o.strip().strip("'\"") for o in m.group(2).split(",")]
        return _lookup(value, m.group(1)) in options
    raise UnsupportedRule(f"the test CEL interpreter does not know the rule {rule!r}: teach it, do not skip it")


_MISSING = object()


def _lookup(value: Any, path: str, missing: Any = None) -> Any:
    for name in path.split(".")[1:]:
        if not isinstance(value, dict) or name not in value:
            if missing is not None:
                return missing
            raise UnsupportedRule(f"{path} is not set: CEL would report 'no such key'")
        value = value[name]
    return value


# --- the schemas the tests use ----------------------------------------------------------------


@cache
def pytorchjob_schema() -> CRDSchema:
    return CRDSchema(load_crd(PYTORCHJOB_CRD))


@cache
def trainjob_schema(mechanism: str = "runtimePatches") -> CRDSchema:
    """The TrainJob schema of the Trainer release that uses `mechanism` for pod changes.

    Only the v2.3.0 CRD (runtimePatches) is on disk. For v2.0 (podSpecOverrides) and v2.1
    (podTemplateOverrides) the v2.3.0 schema is adapted to those releases' API types
    (kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go at v2.0 / v2.1): their override
    field replaces runtimePatches, built from the real v2.3.0 sub-schemas of Volume, EnvVar,
    VolumeMount, Toleration, Affinity and ObjectMeta; `labels`/`annotations` are added and
    activeDeadlineSeconds (v2.2+) is removed.
    """
    crd = load_crd(TRAINJOB_CRD)
    if mechanism == "runtimePatches":
        return CRDSchema(crd)
    crd = copy.deepcopy(crd)
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = root["properties"]["spec"]["properties"]
    patch_pod = _runtime_patch_pod(spec["runtimePatches"])
    pod_spec = patch_pod["spec"]["properties"]
    container = pod_spec["containers"]["items"]["properties"]
    container_override = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "env": container["env"],
            "volumeMounts": container["volumeMounts"],
        },
    }
    override_list = {
        "type": "array",
        "items": container_override,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    }
    override_spec = {
        "serviceAccountName": {"type": "string"},
        "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
        "affinity": pod_spec["affinity"],
        "tolerations": pod_spec["tolerations"],
        "volumes": pod_spec["volumes"],
        "initContainers": override_list,
        "containers": override_list,
        "schedulingGates": pod_spec["schedulingGates"],
        "imagePullSecrets": pod_spec["imagePullSecrets"],
    }
    target_jobs = {
        "type": "array",
        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}},
    }
    if mechanism == "podSpecOverrides":
        item = {
            "type": "object",
            "required": ["targetJobs"],
            "properties": {"targetJobs": target_jobs, **override_spec},
        }
    elif mechanism == "podTemplateOverrides":
        item = {
            "type": "object",
            "required": ["targetJobs"],
            "properties": {
                "targetJobs": target_jobs,
                "metadata": patch_pod["metadata"],
                "spec": {"type": "object", "properties": override_spec},
            },
        }
    else:
        raise ValueError(mechanism)
    del spec["runtimePatches"]
    del spec["activeDeadlineSeconds"]
    spec[mechanism] = {"type": "array", "items": item}
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    spec["labels"] = string_map
    spec["annotations"] = string_map
    return CRDSchema(crd)


def _runtime_patch_pod(runtime_patches: dict) -> dict:
    jobs = runtime_patches["items"]["properties"]["trainingRuntimeSpec"]["properties"]["template"]["properties"]["spec"]
    job = jobs["properties"]["replicatedJobs"]["items"]["properties"]
    return job["template"]["properties"]["spec"]["properties"]["template"]["properties"]


class SubSchema:
    """One field's schema inside a CRD (a status field, say), ready to validate values of that field."""

    def __init__(self, openapi: dict):
        self.openapi = openapi
        self._validator = _VALIDATOR(to_json_schema(openapi), format_checker=_FORMATS)

    def errors(self, value: Any) -> list[FieldError]:
        return [
            e
            for error in sorted(self._validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
            for e in _field_errors(error)
        ]


@cache
def trainer_status_schema() -> SubSchema:
    """The schema of a TrainJob's `status.trainerStatus` (Trainer v2.2+, the TrainJobStatus gate): what the status
    server accepts from the pods."""
    crd = load_crd(TRAINJOB_CRD)
    version = next(v for v in crd["spec"]["versions"] if v.get("served"))
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return SubSchema(status["properties"]["trainerStatus"])

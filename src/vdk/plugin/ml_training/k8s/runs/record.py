"""The run record: a ConfigMap `<run>-record`, owned by the run, that holds what is needed to run
it again exactly — the image by digest, the rendered manifests, the spec, the provenance and the
dependency versions installed in the image — and what `vdk diff` compares: the hash of every file of the
code layer, the base image by digest, and each dataset as the deploy pinned it (source, resolved version,
fingerprint; a claim's manifest once a pod reported it). Records of earlier versions lack the last three:
read, they are empty (unknown), never an error.

Annotations on the run's object carry the audit trail for humans and `kubectl`; the record
carries the full rendered manifests, which are too large and too structured for annotations.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s.runs import identity as run_meta
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo

SUFFIX = "-record"
KEY_IMAGE = "image"
KEY_BACKEND = "backend"
KEY_RUN = "run"
KEY_SPEC = "spec.json"
KEY_PROVENANCE = "provenance.json"
KEY_MANIFESTS = "manifests.json"
KEY_DEPENDENCIES = "dependencies.json"
KEY_FROM_SWEEP = "from-sweep.json"  # a run of a sweep's trial: which sweep, which trial, its values
KEY_DATA = "data.json"
KEY_CODE = "code.json"
KEY_BASE = "base"
KEY_OVERRIDES = "overrides.json"  # the [ml-training] keys given for the run only (`--set`, `--args`)
# A ConfigMap holds at most 1 MiB; keep well clear of it.
MAX_RECORD_BYTES = 900_000
_RUN_LABEL_PREFIXES = ("vdk.io/", run_meta.LABEL_MANAGED_BY)


def record_name(run_name: str) -> str:
    return f"{run_name}{SUFFIX}"


@dataclass(frozen=True)
class RunRecord:
    run_name: str
    backend: str
    image: str
    spec: dict
    provenance: dict
    manifests: list[dict]
    dependencies: dict  # name -> version installed in the image ({} for records without them)
    from_sweep: dict | None = None  # {"sweep", "trial", "params"} of a run started from a sweep's trial
    data: tuple[DataPin, ...] = ()  # each dataset as pinned (() for records without them)
    code: dict | None = None  # path -> sha256 of the code layer's files (None: not recorded)
    base: str | None = None  # the base image by digest (None: not recorded)
    overrides: dict = dataclasses.field(default_factory=dict)  # key -> value given for this run, over config.ini


def render(spec: MLJobSpec, image: str, run: RunInfo, namespace: str, backend: str, manifests: list[dict]) -> dict:
    """The record ConfigMap for `manifests` (the run's other objects, as rendered)."""
    record = RunRecord(
        run_name=run.name,
        backend=backend,
        image=image,
        spec=spec.to_dict(),
        provenance=run.provenance.to_dict(),
        manifests=manifests,
        dependencies=dict(run.dependencies),
        from_sweep=json.loads(run.from_sweep) if run.from_sweep else None,
        data=tuple(run.data),
        code=dict(run.code_files) if run.code_files else None,
        base=run.base_digest,
        overrides=dict(run.overrides),
    )
    return _configmap(record, namespace, run.labels(backend), {run_meta.ANNOTATION_SPEC_HASH: run.spec_hash})


def _configmap(record: RunRecord, namespace: str | None, labels: dict[str, str], annotations: dict[str, str]) -> dict:
    """The ConfigMap that holds `record`: the only place a record is written."""
    data = {
        KEY_RUN: record.run_name,
        KEY_BACKEND: record.backend,
        KEY_IMAGE: record.image,
        KEY_SPEC: json.dumps(record.spec, sort_keys=True, indent=1),
        KEY_PROVENANCE: json.dumps(record.provenance, sort_keys=True, indent=1),
        KEY_MANIFESTS: json.dumps(record.manifests, sort_keys=True, indent=1),
        KEY_DEPENDENCIES: json.dumps(record.dependencies, sort_keys=True, indent=1),
    }
    if record.from_sweep is not None:
        data[KEY_FROM_SWEEP] = json.dumps(record.from_sweep, sort_keys=True, indent=1)
    if record.data:
        data[KEY_DATA] = json.dumps([pin.to_dict() for pin in record.data], sort_keys=True, indent=1)
    if record.code is not None:
        data[KEY_CODE] = json.dumps(record.code, sort_keys=True, separators=(",", ":"))
    if record.base:
        data[KEY_BASE] = record.base
    if record.overrides:
        data[KEY_OVERRIDES] = json.dumps(record.overrides, indent=1)
    size = sum(len(v.encode()) for v in data.values())
    if size > MAX_RECORD_BYTES:
        raise MLTrainingError(
            f"the run record of {record.run_name} would be {size} bytes, more than a ConfigMap holds",
            "shorten [ml-training.env] values or args (the record stores the rendered manifests)",
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": record_name(record.run_name),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "data": data,
    }


def parse(configmap: dict) -> RunRecord:
    """A record ConfigMap as read from the cluster."""
    name = configmap.get("metadata", {}).get("name", "?")
    data = configmap.get("data") or {}
    try:
        return RunRecord(
            run_name=data[KEY_RUN],
            backend=data[KEY_BACKEND],
            image=data[KEY_IMAGE],
            spec=json.loads(data[KEY_SPEC]),
            provenance=json.loads(data[KEY_PROVENANCE]),
            manifests=json.loads(data[KEY_MANIFESTS]),
            dependencies=json.loads(data.get(KEY_DEPENDENCIES) or "{}"),
            from_sweep=json.loads(data[KEY_FROM_SWEEP]) if data.get(KEY_FROM_SWEEP) else None,
            data=tuple(DataPin.from_dict(d) for d in json.loads(data.get(KEY_DATA) or "[]")),
            code=json.loads(data[KEY_CODE]) if data.get(KEY_CODE) else None,
            base=data.get(KEY_BASE) or None,
            overrides=json.loads(data.get(KEY_OVERRIDES) or "{}"),
        )
    except (KeyError, ValueError, TypeError) as e:
        raise MLTrainingError(
            f"the ConfigMap {name} is not a readable run record ({type(e).__name__}: {e})",
            "it was changed by hand or written by another tool; re-deploy from the job directory instead",
        ) from None


def with_manifests(configmap: dict, manifests: dict[str, dict]) -> dict | None:
    """The record ConfigMap with what the run's pods reported of its claims (target -> manifest) kept in its
    pins, to be written back; None when it has them already (or no claim they reported)."""
    data = dict(configmap.get("data") or {})
    pins = [DataPin.from_dict(d) for d in json.loads(data.get(KEY_DATA) or "[]")]
    added = [
        p.with_manifest(manifests[p.target]) if p.scheme == "pvc" and not p.manifest and p.target in manifests else p
        for p in pins
    ]
    if added == pins:
        return None
    data[KEY_DATA] = json.dumps([pin.to_dict() for pin in added], sort_keys=True, indent=1)
    return {**configmap, "data": data}


def rerun_manifests(
    record: RunRecord, new_run_name: str, deployer: str, deployed_at: str, reason: str | None = None
) -> list[dict]:
    """The recorded manifests again under `new_run_name`: same image digest, same pods, same code
    provenance, same dataset versions; new deployer, time and reason, and `vdk.io/rerun-of` naming the original
    run. The claims' manifests are left for the new run's pods to report."""
    # Run names are `<job>-<8 random chars>`: replacing the whole token renames every reference
    # (object names, labels, the rendezvous address, the Service subdomain) and nothing else.
    old = re.escape(record.run_name)
    text = re.sub(rf"(?<![a-z0-9-]){old}(?![a-z0-9])", new_run_name, json.dumps(record.manifests))
    manifests = json.loads(text)
    for manifest in manifests:
        metadata = manifest.setdefault("metadata", {})
        annotations = metadata.get("annotations")
        if annotations is None:
            continue
        annotations[run_meta.ANNOTATION_DEPLOYER] = deployer
        annotations[run_meta.ANNOTATION_DEPLOYED_AT] = deployed_at
        annotations[run_meta.ANNOTATION_RERUN_OF] = record.run_name
        if reason:
            annotations[run_meta.ANNOTATION_REASON] = reason
        else:
            annotations.pop(run_meta.ANNOTATION_REASON, None)
    primary = manifests[0]["metadata"]
    labels = {k: v for k, v in primary.get("labels", {}).items() if k.startswith(_RUN_LABEL_PREFIXES)}
    annotations = {run_meta.ANNOTATION_RERUN_OF: record.run_name}
    spec_hash = (primary.get("annotations") or {}).get(run_meta.ANNOTATION_SPEC_HASH)
    if spec_hash:
        annotations[run_meta.ANNOTATION_SPEC_HASH] = spec_hash
    # the same pins; what the original's pods reported of its claims is theirs: the new pods report their own
    data = tuple(p.with_manifest(None) if p.scheme == "pvc" else p for p in record.data)
    again = dataclasses.replace(record, run_name=new_run_name, manifests=manifests, data=data)
    return manifests + [_configmap(again, primary.get("namespace"), labels, annotations)]

"""The build provenance of a job image: an in-toto Statement v1 whose subject is the image's manifest digest and
whose predicate is SLSA Provenance v1, and the SBOM's statement (predicate type `https://cyclonedx.org/bom`, the
CycloneDX document as predicate), as cosign attests them.

`buildType` is this project's (BUILD_TYPE; the audit chapter of the documentation describes its parameters). A
build on the deployer's machine is SLSA Build L1: the provenance exists and says how the image was built, but the
builder that writes it is the same process that builds, so it is not hardened against the deployer (L2 needs a
hosted build platform that signs). cosign reads a statement strictly: every extension lives inside the predicate.

`problems(statement)` checks the field rules of in-toto and SLSA that a verifier relies on (`vdk show
--provenance`, and the tests).
"""

from __future__ import annotations

import re
from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.image import sbom
from vdk.plugin.ml_training.image.image_facts import BuildParameters
from vdk.plugin.ml_training.image.image_facts import ImageFacts

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
CYCLONEDX_BOM = "https://cyclonedx.org/bom"  # cosign's `--type cyclonedx` needs exactly this
BUILD_TYPE = "https://vdk-ml-training.invalid/build-types/image/v1"
BUILDER_ID = "https://vdk-ml-training.invalid/builders/deployer-machine"
SLSA_BUILD_LEVEL = 1
_STATEMENT_KEYS = {"_type", "subject", "predicateType", "predicate"}
_DESCRIPTOR_KEYS = {"name", "uri", "digest", "content", "downloadLocation", "mediaType", "annotations"}
_HEX = {"sha256": 64, "sha512": 128}
_RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def statement(facts: ImageFacts, predicate_type: str, predicate: dict) -> dict:
    """An in-toto Statement v1 about the image (the subject: its manifest digest)."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": facts.name, "digest": {"sha256": facts.digest.removeprefix("sha256:")}}],
        "predicateType": predicate_type,
        "predicate": predicate,
    }


def sbom_statement(facts: ImageFacts, document: bytes) -> dict:
    import json

    return statement(facts, CYCLONEDX_BOM, json.loads(document))


def provenance_statement(facts: ImageFacts, parameters: BuildParameters) -> dict:
    """The SLSA v1 provenance of the image's build."""
    external: dict = {"job": facts.job, "baseImage": facts.base_image, "registry": facts.name}
    if facts.team:
        external["team"] = facts.team
    if parameters.config_sha256:
        external["configIniSha256"] = parameters.config_sha256
    if parameters.overrides:
        external["overrides"] = dict(parameters.overrides)
    internal = {
        "python": facts.python,
        "pythonVersion": facts.python_version,
        "wheelPlatform": facts.wheel_platform,
        "imageCreated": facts.created,
    }
    if parameters.deployer:
        internal["deployer"] = parameters.deployer
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": external,
            "internalParameters": internal,
            "resolvedDependencies": resolved_dependencies(facts, parameters),
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": {sbom.PLUGIN: sbom.plugin_version()}},
            "metadata": {k: v for k, v in (("startedOn", facts.started), ("finishedOn", facts.finished)) if v},
            "byproducts": [
                {"name": f"layer:{layer.name}", "digest": _digest(layer.digest), "mediaType": layer.media_type}
                for layer in facts.layers
            ],
        },
    }
    return statement(facts, SLSA_PROVENANCE, predicate)


def resolved_dependencies(facts: ImageFacts, parameters: BuildParameters) -> list[dict]:
    """The base image by digest, the git commit (dirty or not, the digest of the difference), the requirement
    lock, and each dataset as the deploy pinned it."""
    out = []
    base_digest = facts.base_reference.rpartition("@")[2]
    if base_digest.startswith("sha256:"):
        uri = sbom.image_purl(facts.pinned_base).to_string()
        out.append({"name": "base-image", "uri": uri, "digest": _digest(base_digest)})
    if facts.git_commit:
        git: dict = {"name": "source", "digest": {"gitCommit": facts.git_commit}}
        if facts.git_remote:
            git["uri"] = f"git+{facts.git_remote}"
        git["annotations"] = {"dirty": facts.git_dirty}
        if facts.git_diff_sha256:
            git["annotations"]["diffSha256"] = facts.git_diff_sha256
        out.append(git)
    if facts.lock.sha256:
        out.append({"name": "requirements.lock", "digest": {"sha256": facts.lock.sha256}})
    for pin in parameters.data:
        entry: dict = {"name": f"data:{pin.get('target')}"}
        if pin.get("source"):
            entry["uri"] = str(pin["source"])
        fingerprint, version = str(pin.get("fingerprint") or ""), str(pin.get("version") or "")
        digest = {}
        if re.fullmatch(r"[0-9a-f]{40}", version):
            digest["gitCommit"] = version  # a Hugging Face dataset's commit
        if re.fullmatch(r"[0-9a-f]{64}", fingerprint) and fingerprint != version:
            digest["sha256"] = fingerprint  # the listing's fingerprint (datafetch/data_pins.fingerprint)
        if digest:
            entry["digest"] = digest
        notes = {k: pin[k] for k in ("version", "as_of", "files", "bytes") if pin.get(k) is not None}
        if notes:
            entry["annotations"] = notes
        out.append(entry)
    return out


def _digest(digest: str) -> dict:
    algorithm, _, value = digest.partition(":")
    return {algorithm: value}


def problems(document: dict, image_digest: str | None = None) -> list[str]:
    """Where a statement breaks the rules of in-toto Statement v1 (and of SLSA Provenance v1 when it is one), as
    cosign and other verifiers read them; with `image_digest`, also whether it is about that image."""
    found = []
    unknown = set(document) - _STATEMENT_KEYS
    if unknown:
        found.append(f"unknown top-level fields {sorted(unknown)} (cosign refuses them)")
    if document.get("_type") != STATEMENT_TYPE:
        found.append(f"_type is {document.get('_type')!r}, not {STATEMENT_TYPE}")
    if not isinstance(document.get("predicateType"), str) or not document.get("predicateType"):
        found.append("predicateType is missing")
    if not isinstance(document.get("predicate"), dict):
        found.append("predicate is not an object")
    subjects = document.get("subject")
    if not isinstance(subjects, list) or not subjects:
        found.append("subject is missing or empty")
        subjects = []
    for subject in subjects:
        found += [f"subject: {p}" for p in _descriptor_problems(subject, needs_digest=True)]
    if image_digest and not any(
        (s.get("digest") or {}).get("sha256") == image_digest.removeprefix("sha256:") for s in subjects
    ):
        found.append(f"no subject is the image {image_digest}")
    if document.get("predicateType") == SLSA_PROVENANCE and isinstance(document.get("predicate"), dict):
        found += _slsa_problems(document["predicate"])
    return found


def _descriptor_problems(descriptor: object, needs_digest: bool = False) -> list[str]:
    if not isinstance(descriptor, dict):
        return ["a resource descriptor is not an object"]
    found = []
    unknown = set(descriptor) - _DESCRIPTOR_KEYS
    if unknown:
        found.append(f"unknown fields {sorted(unknown)}")
    if not any(descriptor.get(k) for k in ("uri", "digest", "content")):
        found.append(f"{descriptor.get('name') or 'a descriptor'} has none of uri, digest, content")
    digest = descriptor.get("digest")
    if needs_digest and not digest:
        found.append("has no digest")
    for algorithm, value in (digest or {}).items():
        length = _HEX.get(algorithm)
        if algorithm == "gitCommit" and not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", str(value)):
            found.append(f"gitCommit {value!r} is not 40 or 64 lower-case hex digits")
        elif length and not re.fullmatch(f"[0-9a-f]{{{length}}}", str(value)):
            found.append(f"{algorithm} {value!r} is not {length} lower-case hex digits")
    return found


def _slsa_problems(predicate: dict) -> list[str]:
    found = []
    definition = predicate.get("buildDefinition") or {}
    run = predicate.get("runDetails") or {}
    if not definition.get("buildType"):
        found.append("buildDefinition.buildType is missing")
    if not isinstance(definition.get("externalParameters"), dict):
        found.append("buildDefinition.externalParameters is missing")
    builder = run.get("builder") or {}
    if not builder.get("id"):
        found.append("runDetails.builder.id is missing")
    version = builder.get("version")
    if version is not None and not (isinstance(version, dict) and all(isinstance(v, str) for v in version.values())):
        found.append("runDetails.builder.version is not a map of strings")
    for key in ("startedOn", "finishedOn"):
        value = (run.get("metadata") or {}).get(key)
        if value is not None and not _RFC3339_UTC.match(str(value)):
            found.append(f"runDetails.metadata.{key} {value!r} is not an RFC 3339 time in UTC (…Z)")
    for descriptor in [*(definition.get("resolvedDependencies") or []), *(run.get("byproducts") or [])]:
        found += _descriptor_problems(descriptor)
    return found

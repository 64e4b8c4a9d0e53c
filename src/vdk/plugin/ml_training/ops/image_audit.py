"""`vdk show --provenance`: what a run's image says of itself, read back from its registry and checked. The
statements attached to the image (image/attestations.py) are read, a signed one verified with the public key when
one is given, and the provenance compared with the run record: the commit and its dirty flag, the base image's
digest, the image's layers (the provenance's byproducts against the image's own manifest), the code layer's files
(the SBOM's against the record's). Every gap is a finding with its fix, never a traceback.

    report = show_provenance(find_scope("mnist"), public_key="cosign.pub")
    report.findings            # [] when it is attached, signed as asked, and agrees with the record
    report.to_dict()
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import pick_run
from vdk.plugin.ml_training.ops.typed_calls import checked

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image.attestations import Found
    from vdk.plugin.ml_training.k8s.runs.record import RunRecord
    from vdk.plugin.ml_training.ops.reporting import Reporter

SBOM = "https://cyclonedx.org/bom"
SLSA = "https://slsa.dev/provenance/v1"
_REDEPLOY = "deploy the job again (with `ml_training_attestations` left on): the image gets them attached"


@dataclass(frozen=True)
class Finding:
    problem: str
    fix: str

    def to_dict(self) -> dict:
        return {"problem": self.problem, "fix": self.fix}


@dataclass
class ProvenanceReport:
    """A run's image, what is attached to it, what that says, and how it agrees with the run record."""

    run: str
    image: str  # registry/repo@sha256:...
    listed: str  # how the attached statements were found (the referrers API, or the fallback tag)
    attached: list[Found]
    summary: dict  # built from what, by whom, when; the SBOM's packages; signed or not
    agrees: dict[str, bool]  # what was compared with the run record -> whether it agrees
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "image": self.image,
            "listed": self.listed,
            "attached": [f.to_dict() for f in self.attached],
            "summary": self.summary,
            "agrees_with_record": dict(self.agrees),
            "findings": [f.to_dict() for f in self.findings],
        }


@checked
def show_provenance(
    scope: Scope, run_id: str | None = None, public_key: str | Path | None = None, reporter: Reporter | None = None
) -> ProvenanceReport:
    """The provenance and SBOM of the image of the scope's run `run_id` (default the latest), read from its
    registry and checked (see the module). `public_key`: cosign.pub, to verify the signature."""
    from vdk.plugin.ml_training.image import signing

    key = signing.load_public_key(public_key) if public_key else None
    command = "show --provenance" + (f" -i {run_id}" if run_id else "")
    selection, run = pick_run(scope, command, run_id, partial=True, reporter=reporter)
    record = selection.client.read_run_record(run.name)
    return audit_image(record, key, public_key is not None)


def audit_image(record: RunRecord, key: object | None, key_given: bool) -> ProvenanceReport:
    """What `record`'s image has attached, read from its registry and compared with `record`."""
    from vdk.plugin.ml_training.image.attestations import read_all
    from vdk.plugin.ml_training.image.build_errors import RegistryError
    from vdk.plugin.ml_training.image.registry import RegistryClient
    from vdk.plugin.ml_training.job.image_reference import parse_reference

    ref = parse_reference(record.image)
    if not ref.digest:
        raise MLTrainingError(
            f"the record of run {record.run_name} names its image {record.image} without a digest",
            "deploy the job again: runs deployed by `vdk deploy` are pinned by digest",
        )
    with RegistryClient(ref.registry) as client:
        try:
            manifest, _ = client.get_manifest(ref.repository, ref.digest)
        except RegistryError as e:
            if "does not exist" not in e.problem:
                raise
            raise RegistryError(
                f"the image of run {record.run_name}, {record.image}, is no longer in its registry",
                "it was deleted there (by hand, or a retention policy); deploy the job again to push it anew",
            ) from None
        found, listing = read_all(client, ref.repository, ref.digest, key)
    image_layers = [d.get("digest") for d in json.loads(manifest).get("layers") or []]
    report = ProvenanceReport(record.run_name, record.image, listing.how, found, {}, {})
    report.findings += [Finding(note, "remove or rename that tag, then deploy again") for note in listing.notes]
    for f in found:
        report.findings += [
            Finding(f"the {_kind(f.predicate_type)} {f.digest[:19]}: {p}", _REDEPLOY) for p in f.problems
        ]
    provenance = _best(found, SLSA)
    sbom = _best(found, SBOM)
    _say_signatures(report, [f for f in (provenance, sbom) if f is not None], key_given)
    if provenance is None or provenance.statement is None:
        report.findings.append(Finding(f"no readable build provenance is attached to {record.image}", _REDEPLOY))
    else:
        _compare_provenance(report, provenance.statement["predicate"], record, image_layers)
    if sbom is None or sbom.statement is None:
        report.findings.append(Finding(f"no readable SBOM is attached to {record.image}", _REDEPLOY))
    else:
        _compare_sbom(report, sbom.statement["predicate"], record)
    return report


def _kind(predicate_type: str) -> str:
    return {SLSA: "provenance", SBOM: "SBOM"}.get(predicate_type, predicate_type or "statement")


def _best(found: list[Found], predicate_type: str) -> Found | None:
    """The statement of that type to believe: verified first, then signed, then unsigned; readable first."""
    candidates = [f for f in found if f.predicate_type == predicate_type]
    candidates.sort(key=lambda f: (f.statement is None, f.verified is not True, not f.signed))
    return candidates[0] if candidates else None


def _say_signatures(report: ProvenanceReport, statements: list[Found], key_given: bool) -> None:
    from vdk.plugin.ml_training.image.signing import SIGNING_KEY_ENV

    if not statements:
        report.summary["signed"] = False
        return
    signed = all(f.signed for f in statements)
    verified = all(f.verified for f in statements)
    report.summary["signed"] = signed
    report.summary["verified"] = verified if key_given else None
    if key_given and not signed:
        report.findings.append(
            Finding(
                "the image's statements are not signed, and a public key was given to verify them",
                f"set {SIGNING_KEY_ENV} to the private key where you deploy, then deploy again",
            )
        )


def _compare_provenance(report: ProvenanceReport, predicate: dict, record: RunRecord, image_layers: list) -> None:
    definition, details = predicate.get("buildDefinition") or {}, predicate.get("runDetails") or {}
    dependencies = {d.get("name"): d for d in definition.get("resolvedDependencies") or []}
    source = dependencies.get("source") or {}
    base = dependencies.get("base-image") or {}
    lock = dependencies.get("requirements.lock") or {}
    byproducts = [f"sha256:{(d.get('digest') or {}).get('sha256')}" for d in details.get("byproducts") or []]
    builder = details.get("builder") or {}
    metadata = details.get("metadata") or {}
    commit = (source.get("digest") or {}).get("gitCommit")
    dirty = (source.get("annotations") or {}).get("dirty")
    report.summary.update(
        {
            "job": (definition.get("externalParameters") or {}).get("job"),
            "git_commit": commit,
            "git_dirty": dirty,
            "git_remote": source.get("uri"),
            "base_image": base.get("uri"),
            "requirements_lock_sha256": (lock.get("digest") or {}).get("sha256"),
            "built_by": (definition.get("internalParameters") or {}).get("deployer"),
            "builder": builder.get("version") or {},
            "started": metadata.get("startedOn"),
            "finished": metadata.get("finishedOn"),
            "layers": len(byproducts),
        }
    )
    recorded_commit = record.provenance.get("git_commit")
    recorded_base = (record.base or "").rpartition("@")[2]
    checks = {
        "commit": commit == recorded_commit,
        "dirty": recorded_commit is None or bool(dirty) == bool(record.provenance.get("git_dirty")),
        "base": not record.base or f"sha256:{(base.get('digest') or {}).get('sha256')}" == recorded_base,
        "layers": byproducts == image_layers,
    }
    report.agrees.update(checks)
    said = {
        "commit": f"the provenance names commit {commit}, the run record {recorded_commit}",
        "dirty": f"the provenance says dirty={dirty}, the run record {record.provenance.get('git_dirty')}",
        "base": f"the provenance names base {base.get('uri')}, the run record {record.base}",
        "layers": f"the provenance lists {len(byproducts)} layers that are not the image's {len(image_layers)}",
    }
    for what, ok in checks.items():
        if not ok:
            report.findings.append(Finding(f"{said[what]}: they disagree", _MISMATCH))


_MISMATCH = (
    "the image's attestations were not written for this run's build (attached by hand, or by another tool): "
    "deploy the job again to attach its own, and find out who attached these"
)


def _compare_sbom(report: ProvenanceReport, document: dict, record: RunRecord) -> None:
    from vdk.plugin.ml_training.image.sbom import summary

    report.summary["sbom"] = summary(document)
    if record.code is None:
        return
    code: dict = next((c for c in document.get("components") or [] if c.get("bom-ref") == "code"), {})
    listed = {
        c.get("name"): next((h.get("content") for h in c.get("hashes") or []), None)
        for c in code.get("components") or []
    }
    agrees = listed == record.code
    report.agrees["code_files"] = agrees
    if not agrees:
        differ = sorted(set(listed.items()) ^ set(record.code.items()))
        names = ", ".join(sorted({name for name, _ in differ})[:5])
        report.findings.append(Finding(f"the SBOM's code files differ from the run record's ({names})", _MISMATCH))

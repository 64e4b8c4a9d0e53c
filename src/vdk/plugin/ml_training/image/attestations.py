"""What every pushed job image gets attached, and reading it back: its SBOM (image/sbom.py) and its build provenance
(image/provenance.py), each an in-toto statement attached as an OCI referrer (image/referrers.py); signed in a
Sigstore bundle when a key is configured (image/signing.py), else the plain statement.

What is attached once stays: a redeploy of the same image (the same digest: nothing in it changed) finds its
statements among the image's referrers and uploads nothing; only a statement of another kind of signature (signed
now, unsigned before, or another key) is added. The provenance therefore tells the build that first pushed the
image. `ml_training_attestations = false` turns all of it off (for a registry that refuses artifacts).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.image import provenance
from vdk.plugin.ml_training.image import referrers
from vdk.plugin.ml_training.image import sbom
from vdk.plugin.ml_training.image import signing
from vdk.plugin.ml_training.image.image_facts import BuildParameters
from vdk.plugin.ml_training.image.image_facts import ImageFacts
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.image.signing import SigningKey

SETTING = "ml_training_attestations"
# (kind, predicate type, the layer's file name): what every pushed image gets attached, in this order
KINDS = (
    ("sbom", provenance.CYCLONEDX_BOM, "sbom.cdx.intoto.json"),
    ("provenance", provenance.SLSA_PROVENANCE, "provenance.intoto.json"),
)


@dataclass(frozen=True)
class Request:
    """What a build is asked to attach: its parameters, and the key to sign with (None: unsigned)."""

    parameters: BuildParameters
    key: SigningKey | None = None


@dataclass(frozen=True)
class Attached:
    kind: str  # sbom, provenance
    predicate_type: str
    digest: str  # of the referrer's manifest
    signed: bool
    reused: bool  # it was attached already: nothing was uploaded
    listed: str  # where tools find it: the referrers API, or the tag sha256-<hex>

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def describe_plan(enabled: bool, key: SigningKey | None) -> str:
    """What a deploy would attach to the image it pushes (the dry run says it)."""
    if not enabled:
        return f"  attached   nothing ({SETTING} = false)"
    if key is not None:
        how = f"signed with the key of {key.source}, hint {key.hint}"
    else:
        how = f"unsigned (set ${signing.SIGNING_KEY_ENV} to sign them)"
    return (
        "  attached   as OCI referrers of the image: its SBOM (CycloneDX 1.6) and SLSA v1 build provenance, "
        f"in-toto statements, {how}"
    )


def describe_attached(attached: tuple[Attached, ...]) -> str:
    """One line of what the image got attached (or already had)."""
    if not attached:
        return "Attached to the image: nothing"
    signed = "signed" if all(a.signed for a in attached) else "unsigned"
    kinds = " and ".join("SBOM" if a.kind == "sbom" else "provenance" for a in attached)
    reused = all(a.reused for a in attached)
    how = "already attached, nothing uploaded" if reused else f"listed through {attached[-1].listed}"
    return f"Attached to the image: {kinds} ({signed} in-toto statements; {how})"


def attach_all(
    client: RegistryClient, facts: ImageFacts, request: Request, say: Callable[[str], None]
) -> tuple[Attached, ...]:
    """Attach the image's SBOM and provenance (reusing those already attached with the same signer)."""
    signer = request.key.hint if request.key else referrers.UNSIGNED
    listing = referrers.list_referrers(client, facts.repository, facts.digest)
    for note in listing.notes:
        say(f"note: {note}")
    out = []
    for kind, predicate_type, title in KINDS:
        existing = [
            r
            for r in listing.referrers
            if r.annotations.get(referrers.ANNOTATION_PREDICATE) == predicate_type
            and r.annotations.get(referrers.ANNOTATION_SIGNER) == signer
        ]
        if existing:
            out.append(Attached(kind, predicate_type, existing[0].digest, bool(request.key), True, listing.how))
            continue
        artifact = _artifact(facts, request, kind, predicate_type, title)
        digest, listed = referrers.attach(client, facts.repository, facts.subject, artifact, say)
        out.append(Attached(kind, predicate_type, digest, bool(request.key), False, listed))
    return tuple(out)


def _artifact(facts: ImageFacts, request: Request, kind: str, predicate_type: str, title: str) -> referrers.Artifact:
    if kind == "sbom":
        statement = provenance.sbom_statement(facts, sbom.sbom(facts))
    else:
        statement = provenance.provenance_statement(facts, request.parameters)
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    annotations = {
        referrers.ANNOTATION_CREATED: facts.finished or provenance.now(),
        referrers.ANNOTATION_PREDICATE: predicate_type,
        referrers.ANNOTATION_SIGNER: request.key.hint if request.key else referrers.UNSIGNED,
    }
    if request.key is None:
        return referrers.Artifact(signing.IN_TOTO_PAYLOAD, signing.IN_TOTO_PAYLOAD, payload, annotations, title)
    annotations[referrers.ANNOTATION_BUNDLE_CONTENT] = "dsse-envelope"
    annotations[referrers.ANNOTATION_BUNDLE_PREDICATE] = predicate_type
    bundle = request.key.sign(payload)
    name = title.replace(".intoto.json", ".sigstore.json")
    return referrers.Artifact(signing.BUNDLE_MEDIA_TYPE, signing.BUNDLE_MEDIA_TYPE, bundle, annotations, name)


# --- reading back ---------------------------------------------------------------------------------------------


@dataclass
class Found:
    """One statement attached to an image, as read back."""

    digest: str  # of the referrer's manifest
    predicate_type: str
    signed: bool
    verified: bool | None  # None: signed, but no public key was given to verify it
    statement: dict | None  # None: it could not be read (problems say why)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "digest": self.digest,
            "predicate_type": self.predicate_type,
            "signed": self.signed,
            "verified": self.verified,
            "problems": list(self.problems),
        }


def read_all(
    client: RegistryClient, repository: str, image_digest: str, public_key: object | None
) -> tuple[list[Found], referrers.Listing]:
    """The in-toto statements attached to `repository@image_digest` (signed ones verified with `public_key` when
    given); other referrers (another tool's) are passed over."""
    listing = referrers.list_referrers(client, repository, image_digest)
    out = []
    for referrer in listing.referrers:
        if referrer.artifact_type not in (signing.IN_TOTO_PAYLOAD, signing.BUNDLE_MEDIA_TYPE):
            continue
        out.append(_read_one(client, repository, referrer, image_digest, public_key))
    return out, listing


def _read_one(
    client: RegistryClient, repository: str, referrer: referrers.Referrer, image_digest: str, public_key: object | None
) -> Found:
    signed = referrer.artifact_type == signing.BUNDLE_MEDIA_TYPE
    predicate_type = referrer.annotations.get(referrers.ANNOTATION_PREDICATE) or referrer.annotations.get(
        referrers.ANNOTATION_BUNDLE_PREDICATE, ""
    )
    found = Found(referrer.digest, predicate_type, signed, None, None)
    manifest, data = referrers.read(client, repository, referrer)
    if (manifest.get("subject") or {}).get("digest") != image_digest:
        found.problems.append(f"its manifest's subject is not the image {image_digest}")
    if not data:
        found.problems.append("its manifest does not have exactly one layer")
        return found
    try:
        if signed and public_key is not None:
            payload = signing.verify(data, public_key)
            found.verified = True
        elif signed:
            payload = signing.envelope(data)[0]
        else:
            payload = data
        found.statement = json.loads(payload)
    except signing.SigningError as e:
        found.verified = False
        found.problems.append(e.problem)
        return found
    except (ValueError, KeyError, TypeError):
        found.problems.append("its layer is not a readable in-toto statement")
        return found
    found.predicate_type = str(found.statement.get("predicateType") or predicate_type)
    found.problems += provenance.problems(found.statement, image_digest)
    return found

"""OCI 1.1 referrers: an artifact attached to an image is a manifest of its own whose `subject` is the image, with
an `artifactType`, the empty config and the artifact as its one layer (opencontainers/image-spec manifest.md).

Pushed by digest. A registry with the referrers API says so by answering the push with `OCI-Subject`; without it
(Debian's docker-registry: no header, 404 on /referrers), the client keeps the list itself, as the distribution spec
says: an image index under the tag `sha256-<hex>` of the image, pulled, added to (what other tools put there stays)
and pushed back; a tag that holds something other than an index is left alone, and said. Listing asks the
referrers API first (an answer counts only with the index content type, as cosign reads it), else that tag.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.image import oci
from vdk.plugin.ml_training.image.build_errors import RegistryError
from vdk.plugin.ml_training.image.registry import RegistryClient

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
EMPTY_DESCRIPTOR = {"mediaType": EMPTY_MEDIA_TYPE, "digest": oci.digest_of(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)}
ANNOTATION_CREATED = "org.opencontainers.image.created"
ANNOTATION_TITLE = "org.opencontainers.image.title"  # `oras pull` writes only layers that have it
ANNOTATION_BUNDLE_CONTENT = "dev.sigstore.bundle.content"  # what cosign v3 writes on its bundles' manifests
ANNOTATION_BUNDLE_PREDICATE = "dev.sigstore.bundle.predicateType"
ANNOTATION_PREDICATE = "in-toto.io/predicate-type"  # on every statement this tool attaches, signed or not
ANNOTATION_SIGNER = "io.vdk.ml-training.signer"  # the signing key's hint (public), or "none"
UNSIGNED = "none"
# What a registry without the referrers API answers on /referrers (the spec: 404; others: 400, 405, 406).
_NO_API = (400, 404, 405, 406)


@dataclass(frozen=True)
class Artifact:
    """What to attach: one layer of `media_type`, the manifest's `artifact_type` and annotations."""

    artifact_type: str
    media_type: str
    data: bytes
    annotations: dict[str, str]
    title: str  # the layer's file name (`oras pull` writes it under this name)

    def manifest(self, subject: dict) -> bytes:
        layer = {
            "mediaType": self.media_type,
            "digest": oci.digest_of(self.data),
            "size": len(self.data),
            "annotations": {ANNOTATION_TITLE: self.title},
        }
        return oci.canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": oci.OCI_MANIFEST,
                "artifactType": self.artifact_type,
                "config": EMPTY_DESCRIPTOR,
                "layers": [layer],
                "subject": subject,
                "annotations": self.annotations,
            }
        )


@dataclass(frozen=True)
class Referrer:
    """One entry of an image's referrers: a manifest's descriptor with its artifactType and annotations."""

    digest: str
    size: int
    artifact_type: str
    annotations: dict[str, str]
    media_type: str = oci.OCI_MANIFEST

    def descriptor(self) -> dict:
        return {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
            "artifactType": self.artifact_type,
            "annotations": self.annotations,
        }

    @classmethod
    def from_descriptor(cls, d: dict) -> Referrer:
        return cls(
            str(d.get("digest", "")),
            int(d.get("size", 0)),
            str(d.get("artifactType", "")),
            dict(d.get("annotations") or {}),
            str(d.get("mediaType") or oci.OCI_MANIFEST),
        )


@dataclass
class Listing:
    """An image's referrers, and how they were found (the referrers API, or the fallback tag)."""

    referrers: list[Referrer]
    how: str
    notes: list[str] = field(default_factory=list)


def fallback_tag(digest: str) -> str:
    """The tag of the referrers' index of an image without the API: `<algorithm>-<hex>` (the spec's schema)."""
    algorithm, _, value = digest.partition(":")
    return f"{algorithm[:32]}-{value[:64]}"


def list_referrers(client: RegistryClient, repository: str, digest: str) -> Listing:
    """The referrers of `repository@digest`: from the referrers API, else from the fallback tag."""
    try:
        response = client.send(repository, f"list the referrers of {digest[:19]}", "get", f"referrers/{digest}")
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type == oci.OCI_INDEX:
            index = json.loads(response.content)
            found = [Referrer.from_descriptor(d) for d in index.get("manifests") or []]
            return Listing(found, "the registry's referrers API")
    except RegistryError as e:
        if getattr(e, "status", None) not in _NO_API:
            raise
    tag = fallback_tag(digest)
    index, media_type = _read_tag(client, repository, tag)
    if index is None:
        return Listing([], f"the tag {tag} (the registry has no referrers API)")
    if media_type != oci.OCI_INDEX:
        note = f"the tag {tag} holds a {media_type or 'document'} that is not an image index; it was left alone"
        return Listing([], f"the tag {tag}", [note])
    found = [Referrer.from_descriptor(d) for d in index.get("manifests") or []]
    return Listing(found, f"the tag {tag} (the registry has no referrers API)")


def _read_tag(client: RegistryClient, repository: str, tag: str) -> tuple[dict | None, str]:
    """The document under `tag` and its media type; (None, "") when there is no such tag."""
    try:
        response = client.send(
            repository,
            f"read the referrers' tag {tag}",
            "get",
            f"manifests/{tag}",
            headers={"Accept": ", ".join([oci.OCI_INDEX, oci.OCI_MANIFEST, oci.DOCKER_MANIFEST, oci.DOCKER_LIST])},
        )
    except RegistryError as e:
        if getattr(e, "status", None) == 404:
            return None, ""
        raise
    try:
        document = json.loads(response.content)
    except ValueError:
        document = {}
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip() or document.get("mediaType", "")
    return document, media_type


def attach(
    client: RegistryClient, repository: str, subject: dict, artifact: Artifact, say: Callable[[str], None]
) -> tuple[str, str]:
    """Push `artifact` as a referrer of the image `subject` (its descriptor): its blobs, then its manifest by
    digest, then (without the referrers API) the fallback tag's index. Returns (the manifest's digest, where it is
    listed). Blobs already there are not sent again."""
    for data, label in ((EMPTY_CONFIG, "empty config"), (artifact.data, artifact.title)):
        digest = oci.digest_of(data)
        if not client.blob_exists(repository, digest):
            client.upload(repository, digest, len(data), functools.partial(list, [data]), label)
    manifest = artifact.manifest(subject)
    digest = oci.digest_of(manifest)
    response = client.send(
        repository,
        f"store the manifest of {artifact.title}",
        "put",
        f"manifests/{digest}",
        data=manifest,
        headers={"Content-Type": oci.OCI_MANIFEST},
    )
    if response.headers.get("OCI-Subject"):
        return digest, "the registry's referrers API"
    entry = Referrer(digest, len(manifest), artifact.artifact_type, dict(artifact.annotations))
    return digest, _add_to_tag(client, repository, subject["digest"], entry, say)


def _add_to_tag(
    client: RegistryClient, repository: str, subject_digest: str, entry: Referrer, say: Callable[[str], None]
) -> str:
    tag = fallback_tag(subject_digest)
    index, media_type = _read_tag(client, repository, tag)
    if index is not None and media_type != oci.OCI_INDEX:
        say(
            f"warning: {repository}:{tag} holds a {media_type or 'document'} that is not an image index (another "
            "tool's?); it is left alone, so tools that list referrers through that tag do not see this one"
        )
        return f"nowhere listed (the tag {tag} is not an index)"
    index = index or {"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": []}
    manifests = list(index.get("manifests") or [])
    if any(d.get("digest") == entry.digest for d in manifests):
        return f"the tag {tag}"
    index["manifests"] = [*manifests, entry.descriptor()]
    index.setdefault("mediaType", oci.OCI_INDEX)
    client.send(
        repository,
        f"update the referrers' tag {tag}",
        "put",
        f"manifests/{tag}",
        data=oci.canonical_json(index),
        headers={"Content-Type": oci.OCI_INDEX},
    )
    return f"the tag {tag}"


def read(client: RegistryClient, repository: str, referrer: Referrer) -> tuple[dict, bytes]:
    """A referrer's manifest and the bytes of its one layer (checked against their digests)."""
    response = client.send(
        repository,
        f"read the manifest {referrer.digest[:19]}",
        "get",
        f"manifests/{referrer.digest}",
        headers={"Accept": f"{oci.OCI_MANIFEST}, {oci.OCI_INDEX}"},
    )
    if oci.digest_of(response.content) != referrer.digest:
        raise RegistryError(
            f"{client.registry}/{repository}@{referrer.digest} came back with other content",
            "the registry or a proxy changed it: read it again, or deploy again to attach it anew",
        )
    manifest = json.loads(response.content)
    layers = manifest.get("layers") or []
    if len(layers) != 1:
        return manifest, b""
    return manifest, client.get_blob(repository, layers[0]["digest"])

"""A base image as its registry describes it: the linux/amd64 manifest (picked from an index if need
be), pinned by digest, and its config. What the build extends and what inspection reads."""

from __future__ import annotations

import json
from dataclasses import dataclass

from vdk.plugin.ml_training.image import oci
from vdk.plugin.ml_training.image.build_errors import BaseImageError
from vdk.plugin.ml_training.image.oci import INDEX_TYPES
from vdk.plugin.ml_training.image.oci import MANIFEST_TYPES
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.job.image_reference import ImageReference


@dataclass(frozen=True)
class BaseImage:
    reference: ImageReference  # pinned by digest
    media_type: str
    layers: list[dict]  # descriptors from its manifest
    config: dict


def resolve_base(client: RegistryClient, ref: ImageReference) -> BaseImage:
    """The base's linux/amd64 manifest (picked from an index if need be) and its config."""
    data, media_type = client.get_manifest(ref.repository, ref.ref)
    digest = oci.digest_of(data)
    if ref.digest and digest != ref.digest:
        raise BaseImageError(f"{ref} came back with digest {digest}", "the registry is misbehaving; try again")
    if media_type in INDEX_TYPES:
        index = json.loads(data)
        chosen = [
            m
            for m in index.get("manifests", [])
            if (m.get("platform") or {}).get("os") == "linux"
            and (m.get("platform") or {}).get("architecture") == "amd64"
        ]
        if not chosen:
            platforms = sorted(
                {
                    f"{(m.get('platform') or {}).get('os')}/{(m.get('platform') or {}).get('architecture')}"
                    for m in index.get("manifests", [])
                }
            )
            raise BaseImageError(
                f"base image {ref} has no linux/amd64 variant (it has {', '.join(platforms) or 'none'})",
                "choose a base image built for linux/amd64",
            )
        digest = chosen[0]["digest"]
        data, media_type = client.get_manifest(ref.repository, digest)
        if oci.digest_of(data) != digest:
            raise BaseImageError(f"{ref} platform manifest does not match its digest", "try again")
    if media_type not in MANIFEST_TYPES:
        raise BaseImageError(
            f"base image {ref} has a manifest of type {media_type or 'unknown'}, which the builder cannot extend",
            "use an image pushed as OCI or Docker schema 2 (any image built in the last years is)",
        )
    manifest = json.loads(data)
    config = json.loads(client.get_blob(ref.repository, manifest["config"]["digest"]))
    return BaseImage(ref.with_digest(digest), media_type, manifest.get("layers", []), config)

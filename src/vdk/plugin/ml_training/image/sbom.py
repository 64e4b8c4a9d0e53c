"""The SBOM of a job image, in CycloneDX 1.6 JSON (cyclonedx-python-lib, package URLs by packageurl-python): the
image itself, its base (reference, digest, and the Python packages reading it found), every package of the
dependency layer as resolved (version, the lock's hashes, the licence its metadata declares), the plugin's runtime,
and the code layer (every file with its digest, the git commit).

The same image gives the same bytes: the serial number derives from the image's digest, the timestamp is the
image's creation time, and every component has a stable bom-ref (the library's defaults are random).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from importlib import metadata

from vdk.plugin.ml_training.image.image_facts import ImageFacts
from vdk.plugin.ml_training.job.image_reference import DOCKER_HUB
from vdk.plugin.ml_training.job.image_reference import ImageReference
from vdk.plugin.ml_training.job.image_reference import parse_reference

SPEC_VERSION = "1.6"
PROPERTY_PREFIX = "vdk-ml-training:"
PLUGIN = "vdk-ml-training"


def plugin_version() -> str:
    try:
        return metadata.version(PLUGIN)
    except metadata.PackageNotFoundError:
        return "unknown"


def sbom(facts: ImageFacts) -> bytes:
    """The image's SBOM as CycloneDX 1.6 JSON bytes."""
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.bom import BomMetaData
    from cyclonedx.model.component import Component
    from cyclonedx.model.component import ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    image = Component(
        type=ComponentType.CONTAINER,
        name=facts.repository.rsplit("/", 1)[-1],
        group=facts.registry,
        version=facts.digest,
        bom_ref="image",
        purl=PackageURL(
            "oci",
            name=facts.repository.rsplit("/", 1)[-1],
            version=facts.digest,
            qualifiers={"repository_url": facts.name, **({"tag": facts.tag} if facts.tag else {})},
        ),
        hashes=[_sha256(facts.digest)],
        properties=[Property(name=f"{PROPERTY_PREFIX}job", value=facts.job)]
        + ([Property(name=f"{PROPERTY_PREFIX}team", value=facts.team)] if facts.team else []),
    )
    bom = Bom(
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"{facts.name}@{facts.digest}"),
        metadata=BomMetaData(component=image, timestamp=_timestamp(facts.created)),
    )
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name=PLUGIN, version=plugin_version(), bom_ref="tool")
    )
    parts = [_base(facts), _runtime(), _code(facts), *_packages(facts)]
    for part in parts:
        bom.components.add(part)
    bom.register_dependency(image, parts)
    return JsonV1Dot6(bom).output_as_string(indent=None).encode()


def _sha256(digest: str):
    from cyclonedx.model import HashAlgorithm
    from cyclonedx.model import HashType

    return HashType(alg=HashAlgorithm.SHA_256, content=digest.removeprefix("sha256:"))


def _timestamp(created: str) -> datetime:
    return datetime.fromisoformat(created.replace("Z", "+00:00"))


def _base(facts: ImageFacts):
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component
    from cyclonedx.model.component import ComponentType
    from packageurl import PackageURL

    written, pinned = facts.written_base, facts.pinned_base
    digest = pinned.digest or ""
    purl = image_purl(pinned)
    read = "read from the base image" if facts.base_packages_read else "not read (the base is a well-known one)"
    packages = [
        Component(
            type=ComponentType.LIBRARY,
            name=name_,
            version=version,
            bom_ref=f"base/pkg:pypi/{name_}@{version}",
            purl=PackageURL("pypi", name=name_, version=version),
        )
        for name_, version in facts.base_packages
    ]
    return Component(
        type=ComponentType.CONTAINER,
        name=pinned.repository,
        group=pinned.registry,
        version=written.tag or digest,
        bom_ref="base-image",
        purl=purl,
        hashes=[_sha256(digest)] if digest else [],
        properties=[
            Property(name=f"{PROPERTY_PREFIX}base-image", value=facts.base_image),
            Property(name=f"{PROPERTY_PREFIX}python", value=f"{facts.python} (Python {facts.python_version})"),
            Property(name=f"{PROPERTY_PREFIX}python-packages", value=read),
        ],
        components=packages,
    )


def image_purl(reference: str | ImageReference):
    """The package URL of an image reference (its text, or parsed already): `pkg:docker/...` for Docker Hub, else
    `pkg:oci/<name>` with its repository_url; its version the digest."""
    from packageurl import PackageURL

    ref = reference if isinstance(reference, ImageReference) else parse_reference(reference)
    namespace, _, name = ref.repository.rpartition("/")
    if ref.registry == DOCKER_HUB:
        return PackageURL("docker", namespace=namespace or None, name=name, version=ref.digest)
    repository_url = f"{ref.registry}/{ref.repository}"
    return PackageURL("oci", name=name, version=ref.digest, qualifiers={"repository_url": repository_url})


def _runtime():
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component
    from cyclonedx.model.component import ComponentType
    from packageurl import PackageURL

    version = plugin_version()
    return Component(
        type=ComponentType.LIBRARY,
        name=PLUGIN,
        version=version,
        bom_ref="runtime",
        purl=PackageURL("pypi", name=PLUGIN, version=version),
        properties=[Property(name=f"{PROPERTY_PREFIX}layer", value="runtime")],
    )


def _code(facts: ImageFacts):
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component
    from cyclonedx.model.component import ComponentType

    files = [
        Component(type=ComponentType.FILE, name=path, bom_ref=f"code/{path}", hashes=[_sha256(digest)])
        for path, digest in sorted(facts.code_files.items())
    ]
    properties = [Property(name=f"{PROPERTY_PREFIX}layer", value="code")]
    if facts.git_commit:
        properties += [
            Property(name=f"{PROPERTY_PREFIX}git:commit", value=facts.git_commit),
            Property(name=f"{PROPERTY_PREFIX}git:dirty", value="true" if facts.git_dirty else "false"),
        ]
        if facts.git_diff_sha256:
            properties.append(Property(name=f"{PROPERTY_PREFIX}git:diff-sha256", value=facts.git_diff_sha256))
    if facts.git_remote:
        properties.append(Property(name=f"{PROPERTY_PREFIX}git:remote", value=facts.git_remote))
    return Component(
        type=ComponentType.APPLICATION,
        name=facts.job,
        version=f"git:{facts.git_commit}" if facts.git_commit else None,
        bom_ref="code",
        properties=properties,
        components=files,
    )


def _packages(facts: ImageFacts) -> list:
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component
    from cyclonedx.model.component import ComponentType
    from packageurl import PackageURL

    licenses = LicenseFactory()
    out = []
    for name, version in facts.packages:
        properties = [Property(name=f"{PROPERTY_PREFIX}layer", value="dependencies")]
        if facts.lock.error:
            properties.append(Property(name=f"{PROPERTY_PREFIX}hashes", value=f"none: {facts.lock.error}"))
        declared = facts.licenses.get(name)
        out.append(
            Component(
                type=ComponentType.LIBRARY,
                name=name,
                version=version,
                bom_ref=f"pkg:pypi/{name}@{version}",
                purl=PackageURL("pypi", name=name, version=version),
                hashes=[_sha256(h) for h in facts.lock.hashes.get(name, ())],
                licenses=[licenses.make_from_string(declared)] if declared else [],
                properties=properties,
            )
        )
    return out


def summary(document: dict) -> dict:
    """What `vdk show --provenance` says of an SBOM (a CycloneDX JSON document): its packages by layer."""
    components = document.get("components") or []
    by_ref = {c.get("bom-ref"): c for c in components}
    base = by_ref.get("base-image") or {}
    code = by_ref.get("code") or {}
    dependencies = [
        f"{c.get('name')}=={c.get('version')}"
        for c in components
        if {"name": f"{PROPERTY_PREFIX}layer", "value": "dependencies"} in (c.get("properties") or [])
    ]
    return {
        "format": f"{document.get('bomFormat')} {document.get('specVersion')}",
        "packages": sorted(dependencies),
        "base_packages": len(base.get("components") or []),
        "code_files": len(code.get("components") or []),
        "licensed": sum(1 for c in components if c.get("licenses")),
    }

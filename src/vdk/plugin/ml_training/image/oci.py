"""Image config and manifest documents (OCI image spec / Docker schema 2), as canonical JSON."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from vdk.plugin.ml_training.image.build_errors import BaseImageError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)

# A job image keeps its base's manifest flavour (as `crane append` does), so layers and config
# carry media types of the same family.
LAYER_TYPE = {
    OCI_MANIFEST: "application/vnd.oci.image.layer.v1.tar+gzip",
    DOCKER_MANIFEST: "application/vnd.docker.image.rootfs.diff.tar.gzip",
}
CONFIG_TYPE = {
    OCI_MANIFEST: "application/vnd.oci.image.config.v1+json",
    DOCKER_MANIFEST: "application/vnd.docker.container.image.v1+json",
}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def canonical_json(document: dict) -> bytes:
    """Sorted keys, no spaces, ASCII: the same document always gives the same bytes (and digest)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class NewLayer:
    digest: str
    diff_id: str
    size: int
    created_by: str  # the history entry


def env_list(base_env: list[str], changes: dict[str, str]) -> list[str]:
    """The base's environment with `changes` applied: replaced in place, new ones appended in order."""
    out, seen = [], set()
    for item in base_env:
        name = item.partition("=")[0]
        if name in changes:
            out.append(f"{name}={changes[name]}")
            seen.add(name)
        else:
            out.append(item)
    out += [f"{name}={value}" for name, value in changes.items() if name not in seen]
    return out


def base_env_value(base_config: dict, name: str) -> str | None:
    for item in (base_config.get("config") or {}).get("Env") or []:
        key, _, value = item.partition("=")
        if key == name:
            return value
    return None


def image_config(
    base_config: dict,
    layers: list[NewLayer],
    env: dict[str, str],
    working_dir: str,
    cmd: list[str],
    labels: dict[str, str],
    created: str,
) -> bytes:
    """The base's config with the job's layers, environment, command and labels on top."""
    config = json.loads(json.dumps(base_config))  # a deep copy that stays plain JSON
    if config.get("os") not in (None, "linux") or config.get("architecture") not in (None, "amd64"):
        raise BaseImageError(
            f"the base image is {config.get('os')}/{config.get('architecture')}, not linux/amd64",
            "use a base image built for linux/amd64",
        )
    runtime = config.setdefault("config", {}) or {}
    config["config"] = runtime
    runtime["Env"] = env_list(runtime.get("Env") or [], env)
    runtime["WorkingDir"] = working_dir
    runtime["Cmd"] = list(cmd)
    runtime["Labels"] = {**(runtime.get("Labels") or {}), **labels}
    config["created"] = created
    rootfs = config.setdefault("rootfs", {"type": "layers", "diff_ids": []})
    rootfs["diff_ids"] = [*(rootfs.get("diff_ids") or []), *(layer.diff_id for layer in layers)]
    history = config.get("history") or []
    config["history"] = [*history, *({"created": created, "created_by": layer.created_by} for layer in layers)]
    return canonical_json(config)


def manifest(media_type: str, config: bytes, base_layers: list[dict], layers: list[NewLayer]) -> bytes:
    """The manifest of the job image: the base's layer descriptors, then the job's."""
    descriptors = [dict(d) for d in base_layers]
    descriptors += [
        {"mediaType": LAYER_TYPE[media_type], "digest": layer.digest, "size": layer.size} for layer in layers
    ]
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": CONFIG_TYPE[media_type], "digest": digest_of(config), "size": len(config)},
            "layers": descriptors,
        }
    )

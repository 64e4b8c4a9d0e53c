"""Real base images for the tests, built from what these machines reach: Debian bookworm with the
distribution's own CPython (`python3`, and no `python`), as platform teams build their bases.

`debian_rootfs()` runs mmdebstrap (variant minbase plus the given packages) against the Debian
mirror of the host's apt sources. The tarball is reproducible (SOURCE_DATE_EPOCH; hostname and
resolv.conf left out) and cached between test runs on one machine, keyed by everything that
defines it, under $XDG_CACHE_HOME/vdk-ml-training-tests (default ~/.cache/vdk-ml-training-tests).
`import_image` makes an image of it with podman; `derive` builds images on top with a Containerfile
(podman build, file times fixed too); `push` puts them in a registry. Third-party tools make the
bases, so the builder is tested against images it did not write itself. What podman pushed is
cached too (`save_image`/`load_image`), so a later session uploads the same bytes in seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.support.registry import podman

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = ("python3",)
EPOCH = 1700000000  # file times in the root filesystem: the same packages give the same bytes
# debian:bookworm's environment: its PATH, and nothing about Python.
DEBIAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
# Documentation, manual pages and translations are not needed to run Python (a third of the size).
DPKG_OPTIONS = ("path-exclude=/usr/share/doc/*", "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/locale/*")
_BUILD_TIMEOUT = 900
# podman here: no cgroup limits, host network, file limits the runtime accepts.
RUN_OPTIONS = ("--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


@dataclass(frozen=True)
class RootFS:
    tarball: Path
    key: str  # hash of what defines it
    build_seconds: float  # 0.0 when it came from the cache


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vdk-ml-training-tests"


def _mmdebstrap_version() -> str:
    done = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def rootfs_key(packages: tuple[str, ...]) -> str:
    definition = {
        "suite": SUITE,
        "variant": VARIANT,
        "packages": sorted(packages),
        "dpkg_options": list(DPKG_OPTIONS),
        "epoch": EPOCH,
        "architecture": "amd64",
        "mmdebstrap": _mmdebstrap_version(),
    }
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:16]


def debian_rootfs(packages: tuple[str, ...] = PACKAGES) -> RootFS:
    """A Debian root filesystem tarball with `packages`, built once per machine (cached)."""
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (apt-get install mmdebstrap): it builds the Debian test base")
    key = rootfs_key(packages)
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tarball = directory / f"debian-{SUITE}-{'-'.join(packages)}-{key}.tar"
    with open(directory / f".{key}.lock", "w") as lock:  # two test sessions build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.is_file():
            return RootFS(tarball, key, 0.0)
        started = time.monotonic()
        partial = tarball.with_suffix(".partial.tar")
        argv = [
            "mmdebstrap",
            f"--variant={VARIANT}",
            f"--include={','.join(packages)}",
            *(f"--dpkgopt={option}" for option in DPKG_OPTIONS),
            # the host's hostname and resolver would make the tarball differ per machine
            '--customize-hook=rm -f "$1/etc/hostname" "$1/etc/resolv.conf"',
            SUITE,
            str(partial),
        ]
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT,
            env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)},
        )
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"mmdebstrap failed ({done.returncode}):\n{done.stderr[-3000:]}")
        os.replace(partial, tarball)
        return RootFS(tarball, key, time.monotonic() - started)


def import_image(podman_root: Path, rootfs: RootFS, name: str, env: dict[str, str] | None = None) -> str:
    """`podman import` of the root filesystem as `localhost/<name>`, with `env` in its config."""
    local = f"localhost/{name}"
    changes = [arg for key, value in (env or DEBIAN_ENV).items() for arg in ("--change", f"ENV {key}={value}")]
    podman(podman_root, "import", *changes, str(rootfs.tarball), local, timeout=300)
    return local


def derive(podman_root: Path, base: str, name: str, containerfile: str) -> str:
    """`podman build` of `FROM base` plus `containerfile` as `localhost/<name>`."""
    context = podman_root / "contexts" / name.replace("/", "_").replace(":", "_")
    context.mkdir(parents=True, exist_ok=True)
    (context / "Containerfile").write_text(f"FROM {base}\n{containerfile}")
    local = f"localhost/{name}"
    podman(
        podman_root,
        "build",
        *RUN_OPTIONS,
        "--timestamp",
        str(EPOCH),
        "--format",
        "oci",
        "-t",
        local,
        str(context),
        timeout=300,
    )
    return local


def push(podman_root: Path, local: str, destination: str) -> str:
    """Push a local image to a registry (OCI, gzip layers); returns `destination`."""
    podman(podman_root, "push", "--tls-verify=false", "--format", "oci", local, destination, timeout=300)
    return destination


def run(podman_root: Path, image: str, *command: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Pull `image` (if need be) and run it: its own command, or `command`."""
    podman(podman_root, "pull", "--tls-verify=false", image, timeout=300)
    return podman(podman_root, "run", "--rm", *RUN_OPTIONS, image, *command, check=False, timeout=timeout)


# --- images cached between test sessions -----------------------------------------------------
# What podman pushed, byte for byte (manifest, config, layers), kept in the cache directory and
# uploaded to the next session's registry through the registry API: seconds instead of a podman
# import and build. The key is everything that defines the image.

_MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"


def image_key(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _split(reference: str) -> tuple[str, str, str]:
    host, _, rest = reference.partition("/")
    repository, _, tag = rest.rpartition(":")
    return host, repository, tag


def save_image(reference: str, key: str) -> None:
    """Keep the image `reference` (in a loopback registry) under `key` in the cache; blobs are kept
    once however many images share them."""
    host, repository, tag = _split(reference)
    base = f"http://{host}/v2/{repository}"
    answer = requests.get(f"{base}/manifests/{tag}", headers={"Accept": _MANIFEST_TYPES}, timeout=30)
    answer.raise_for_status()
    manifest = answer.json()
    blobs = cache_dir() / "images" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for descriptor in [manifest["config"], *manifest["layers"]]:
        path = blobs / descriptor["digest"][7:]
        if path.is_file():
            continue
        with requests.get(f"{base}/blobs/{descriptor['digest']}", stream=True, timeout=60) as blob:
            blob.raise_for_status()
            with open(path.with_suffix(".partial"), "wb") as f:
                for chunk in blob.iter_content(1 << 20):
                    f.write(chunk)
        os.replace(path.with_suffix(".partial"), path)
    directory = cache_dir() / "images" / key
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_bytes(answer.content)
    (directory / "media-type.partial").write_text(answer.headers["Content-Type"])
    os.replace(directory / "media-type.partial", directory / "media-type")  # written last: the image is complete


def load_image(key: str, reference: str) -> bool:
    """Upload the image cached under `key` as `reference`; False if it is not cached."""
    directory = cache_dir() / "images" / key
    if not (directory / "media-type").is_file():
        return False
    host, repository, tag = _split(reference)
    base = f"http://{host}/v2/{repository}"
    manifest = (directory / "manifest.json").read_bytes()
    for descriptor in [json.loads(manifest)["config"], *json.loads(manifest)["layers"]]:
        digest = descriptor["digest"]
        if requests.head(f"{base}/blobs/{digest}", timeout=30).status_code == 200:
            continue
        started = requests.post(f"{base}/blobs/uploads/", timeout=30)
        started.raise_for_status()
        location = started.headers["Location"]
        location = location if location.startswith("http") else f"http://{host}{location}"
        separator = "&" if "?" in location else "?"
        with open(cache_dir() / "images" / "blobs" / digest[7:], "rb") as data:
            requests.put(f"{location}{separator}digest={digest}", data=data, timeout=300).raise_for_status()
    requests.put(
        f"{base}/manifests/{tag}",
        data=manifest,
        headers={"Content-Type": (directory / "media-type").read_text()},
        timeout=30,
    ).raise_for_status()
    return True

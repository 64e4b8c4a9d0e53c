"""[ml-training.mounts]: datasets on existing PersistentVolumeClaims (`/data = pvc:imagenet`, or a directory of a
claim, `pvc:NAME/sub/dir`), mounted read-only in the training containers at absolute paths. Parsed into
`DataMount`s for the spec; the renderers (k8s/pod_template.py, k8s/storage/claims.py) turn them into volumes. The same
claims can be named in [ml-training.data] (datasets.py), with the rules of these paths (`absolute_target`) and
claims (`claim_reference`), which also takes relative targets and fetched sources. A cluster run's outputs go to
another claim, `output_pvc`, a key of [ml-training] read with the others (load.py). Knows no cluster.
"""

from __future__ import annotations

import configparser
import posixpath
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.config_file import DATA_SECTION
from vdk.plugin.ml_training.job.config_file import MOUNTS_SECTION
from vdk.plugin.ml_training.job.model import PVC_SCHEME
from vdk.plugin.ml_training.job.model import DataMount
from vdk.plugin.ml_training.job.names import DNS_1123_SUBDOMAIN
from vdk.plugin.ml_training.job.names import MAX_SUBDOMAIN_LENGTH

MAX_MOUNTS = 32
# Paths of a training container that a dataset must not hide: the system, and the image's own layout.
_SYSTEM_PATHS: tuple[str, ...] = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
)
_SYSTEM_PATHS += ("/var/run", "/run", "/opt/vdk-ml", "/opt/conda")
# Where the training processes write as they go (Python's, torch's and the data loader's temporary files, the
# compilers' caches): a dataset, mounted read-only, must not take their place nor a directory above them.
_SCRATCH_PATHS = ("/tmp", "/var/tmp")


def parse_mounts(parser: configparser.ConfigParser, path: Path) -> tuple[DataMount, ...]:
    """[ml-training.mounts]: `/data = pvc:imagenet` (or `pvc:NAME/sub/dir`), each path once."""
    if not parser.has_section(MOUNTS_SECTION):
        return ()
    mounts: list[DataMount] = []
    for key, value in parser.items(MOUNTS_SECTION):
        mount_path = _mount_path(key, path)
        if any(m.path == mount_path for m in mounts):
            raise JobConfigError(path, f"{mount_path} is mounted twice", "keep one line per path", MOUNTS_SECTION, key)
        for other in mounts:
            outer, inner = sorted((other.path, mount_path), key=len)
            if inner.startswith(outer + "/"):
                raise JobConfigError(
                    path,
                    f"{inner} is inside {outer}, another mount (read-only: its mount point cannot be made there)",
                    f"mount it beside it, e.g. at /{inner.rsplit('/', 1)[1]}",
                    MOUNTS_SECTION,
                    key,
                )
        mounts.append(_mount_source(mount_path, value.strip(), path, key))
    if len(mounts) > MAX_MOUNTS:
        raise JobConfigError(
            path, f"{len(mounts)} mounts; at most {MAX_MOUNTS}", "mount a parent directory instead", MOUNTS_SECTION
        )
    return tuple(mounts)


def _mount_path(key: str, path: Path) -> str:
    text = key.strip()
    example = "write it like `/data = pvc:imagenet` (an absolute path in the training containers)"
    if not text.startswith("/"):
        problem = f"{text!r} is not an absolute path"
        if not text.startswith("."):
            raise JobConfigError(path, problem, example, MOUNTS_SECTION, key)
        raise JobConfigError(
            path,
            problem + " (here, datasets are mounted at absolute paths)",
            f"name it in [{DATA_SECTION}], where a relative target is in the run's working directory: "
            f"`{text.removeprefix('./')} = pvc:NAME`; or mount it at an absolute path, e.g. `/data = pvc:NAME` "
            f"({text} -> /data)",
            MOUNTS_SECTION,
            key,
        )
    return absolute_target(text, path, MOUNTS_SECTION, key)


def absolute_target(text: str, path: Path, section: str, key: str, line: int | None = None) -> str:
    """An absolute path of the training containers that a dataset may take: plain, and hiding nothing of the
    system or the image."""
    example = "write it like `/data = pvc:imagenet` (an absolute path in the training containers)"
    normal = posixpath.normpath(text)
    if normal != text.rstrip("/") or "//" in text or normal == "/":
        raise JobConfigError(path, f"{text!r} is not a plain absolute path", example, section, key, line)
    for scratch in _SCRATCH_PATHS:
        if normal == scratch or scratch.startswith(normal + "/"):
            raise JobConfigError(
                path,
                f"{normal} would make {scratch} of the training containers read-only (datasets are mounted "
                f"read-only), and the training writes there: Python's, torch's and the data loader's temporary "
                "files; the run would fail at its first temporary file",
                f"mount the dataset elsewhere, e.g. `/data = pvc:NAME`, or below {scratch} (`{scratch}/data`)",
                section,
                key,
                line,
            )
    for system in _SYSTEM_PATHS:
        if normal == system or normal.startswith(system + "/"):
            raise JobConfigError(
                path,
                f"{normal} would hide {system} of the training containers (the system or the job's image)",
                "mount the dataset elsewhere, e.g. `/data = pvc:NAME`, or at a path relative to the working "
                f"directory in [{DATA_SECTION}]",
                section,
                key,
                line,
            )
    return normal


def _mount_source(mount_path: str, value: str, path: Path, key: str) -> DataMount:
    if value.startswith(("hf://", "s3://")):
        raise JobConfigError(
            path,
            f"{value!r} is fetched, not mounted: [{MOUNTS_SECTION}] mounts PersistentVolumeClaims",
            f"name it in [{DATA_SECTION}] instead: `{mount_path} = {value}` (the cluster fetches it, pinned to the "
            "version it has at deploy)",
            MOUNTS_SECTION,
            key,
        )
    if value.startswith(("gs://", "http://", "https://")):
        raise JobConfigError(
            path,
            f"{value!r}: only PersistentVolumeClaims can be mounted, and {value.split('://')[0]}:// is no source "
            "the plugin fetches",
            "copy the dataset into a PersistentVolumeClaim once and mount it: `/data = pvc:NAME`, or into an "
            f"S3-compatible bucket and name it in [{DATA_SECTION}]",
            MOUNTS_SECTION,
            key,
        )
    if not value.startswith(PVC_SCHEME):
        raise JobConfigError(
            path,
            f"{value!r} is not a volume source",
            f"write `{mount_path} = pvc:NAME` (NAME: an existing PersistentVolumeClaim of the namespace), "
            f"or `pvc:NAME/dir` for one of its directories",
            MOUNTS_SECTION,
            key,
        )
    claim, sub_path = claim_reference(mount_path, value, path, MOUNTS_SECTION, key)
    return DataMount(mount_path, claim, sub_path)


def claim_reference(
    target: str, value: str, path: Path, section: str, key: str, line: int | None = None
) -> tuple[str, str]:
    """(claim, directory of it) of `pvc:NAME` or `pvc:NAME/dir`."""
    claim, _, sub_path = value[len(PVC_SCHEME) :].partition("/")
    if not DNS_1123_SUBDOMAIN.match(claim) or len(claim) > MAX_SUBDOMAIN_LENGTH:
        raise JobConfigError(
            path,
            f"{claim!r} is not a PersistentVolumeClaim name (lower-case letters, digits, '-' and '.')",
            f"write `{target} = pvc:NAME` with the claim's name as `kubectl get pvc` shows it",
            section,
            key,
            line,
        )
    sub_path = sub_path.strip("/")
    if sub_path and (posixpath.normpath(sub_path) != sub_path or sub_path.startswith("..")):
        raise JobConfigError(
            path,
            f"{sub_path!r} is not a plain directory of the claim",
            f"write `{target} = pvc:{claim}/dir/subdir` (no `..`)",
            section,
            key,
            line,
        )
    return claim, sub_path

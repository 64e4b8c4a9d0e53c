"""What a job reads and writes besides its code: datasets on existing PersistentVolumeClaims
([ml-training.mounts]), credentials from Kubernetes Secrets ([ml-training.secrets]), the refusal of
literal secrets in [ml-training.env], and where a cluster run's outputs go (`output_pvc`).

Parsed from config.ini into plain values for the spec (job/spec.py); the renderers (k8s/pod_template.py) turn them
into volumes, mounts and `secretKeyRef`s. Like the spec, this module knows no cluster.
"""

from __future__ import annotations

import configparser
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError

MOUNTS_SECTION = "ml-training.mounts"
SECRETS_SECTION = "ml-training.secrets"
PVC_SCHEME = "pvc:"
MAX_MOUNTS = 32

_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# Paths of a training container that a dataset must not hide: the system, and the image's own layout.
_SYSTEM_PATHS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin", "/sys", "/usr")
_SYSTEM_PATHS += ("/var/run", "/run", "/opt/vdk-ml", "/opt/conda")

# Literal credentials, by the formats their issuers document (a value that matches is refused).
_TOKEN_FORMATS = {
    "a Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "a GitHub token": re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b"),
    "an AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "an OpenAI-style API key": re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
    "a Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    "a Google API key": re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    "a private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
}
# Names that say "secret"; their values are refused when they look like one (long, no spaces, not a path).
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.I)
_SECRET_LOOKING = re.compile(r"^(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9_+=.-]{16,}$")


@dataclass(frozen=True)
class DataMount:
    """An existing PersistentVolumeClaim (a directory of it, with `sub_path`) mounted read-only at `path`."""

    path: str
    claim: str
    sub_path: str = ""

    def source(self) -> str:
        return f"{PVC_SCHEME}{self.claim}" + (f"/{self.sub_path}" if self.sub_path else "")


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable of the training processes whose value is a key of a Kubernetes Secret."""

    name: str
    secret: str
    key: str

    def reference(self) -> str:
        return f"{self.secret}/{self.key}"


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
            problem + " (the working directory of a cluster run is its output directory, not a place for datasets)",
            f"mount it at an absolute path, e.g. `/data = pvc:NAME`, and read it there ({text} -> /data)",
            MOUNTS_SECTION,
            key,
        )
    normal = posixpath.normpath(text)
    if normal != text.rstrip("/") or "//" in text or normal == "/":
        raise JobConfigError(path, f"{text!r} is not a plain absolute path", example, MOUNTS_SECTION, key)
    for system in _SYSTEM_PATHS:
        if normal == system or normal.startswith(system + "/"):
            raise JobConfigError(
                path,
                f"{normal} would hide {system} of the training containers (the system or the job's image)",
                "mount the dataset elsewhere, e.g. `/data = pvc:NAME`",
                MOUNTS_SECTION,
                key,
            )
    return normal


def _mount_source(mount_path: str, value: str, path: Path, key: str) -> DataMount:
    if value.startswith(("hf://", "s3://", "gs://", "http://", "https://")):
        raise JobConfigError(
            path,
            f"{value!r}: only PersistentVolumeClaims can be mounted (fetching from {value.split('://')[0]}:// "
            "is not supported yet)",
            "copy the dataset into a PersistentVolumeClaim once and mount it: `/data = pvc:NAME`; or download it "
            "in your code (credentials from [ml-training.secrets])",
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
    claim, _, sub_path = value[len(PVC_SCHEME) :].partition("/")
    if not _DNS_1123_SUBDOMAIN.match(claim) or len(claim) > 253:
        raise JobConfigError(
            path,
            f"{claim!r} is not a PersistentVolumeClaim name (lower-case letters, digits, '-' and '.')",
            f"write `{mount_path} = pvc:NAME` with the claim's name as `kubectl get pvc` shows it",
            MOUNTS_SECTION,
            key,
        )
    sub_path = sub_path.strip("/")
    if sub_path and (posixpath.normpath(sub_path) != sub_path or sub_path.startswith("..")):
        raise JobConfigError(
            path,
            f"{sub_path!r} is not a plain directory of the claim",
            f"write `{mount_path} = pvc:{claim}/dir/subdir` (no `..`)",
            MOUNTS_SECTION,
            key,
        )
    return DataMount(mount_path, claim, sub_path)


def parse_secrets(parser: configparser.ConfigParser, path: Path) -> tuple[SecretEnv, ...]:
    """[ml-training.secrets]: `HF_TOKEN = hf-credentials/token` (variable = Secret/key). The names are
    checked by the caller, with the rules of [ml-training.env]."""
    if not parser.has_section(SECRETS_SECTION):
        return ()
    out = []
    for name, value in parser.items(SECRETS_SECTION):
        secret, slash, key = value.strip().partition("/")
        example = f"write `{name} = SECRET/KEY`, e.g. `{name} = hf-credentials/token`"
        if not slash or not secret or not key:
            problem = f"{value.strip()!r} is not SECRET/KEY"
            if looks_like_a_secret(name, value.strip()):
                problem = "this looks like the secret itself; config.ini names the Kubernetes Secret that holds it"
            raise JobConfigError(path, problem, example + _create_hint(name), SECRETS_SECTION, name)
        if not _DNS_1123_SUBDOMAIN.match(secret) or len(secret) > 253:
            raise JobConfigError(
                path, f"{secret!r} is not a Secret name (lower-case letters, digits, '-' and '.')", example,
                SECRETS_SECTION, name,
            )  # fmt: skip
        if not _SECRET_KEY.match(key) or len(key) > 253:
            raise JobConfigError(
                path, f"{key!r} is not a key of a Secret (letters, digits, '-', '_' and '.')", example,
                SECRETS_SECTION, name,
            )  # fmt: skip
        out.append(SecretEnv(name, secret, key))
    return tuple(out)


def literal_secret(name: str, value: str) -> str | None:
    """What kind of credential `value` of the variable `name` looks like, or None."""
    for kind, pattern in _TOKEN_FORMATS.items():
        if pattern.search(value):
            return kind
    if looks_like_a_secret(name, value):
        return "a secret (its name says so, and its value looks like one)"
    return None


def looks_like_a_secret(name: str, value: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and bool(_SECRET_LOOKING.match(value))


def literal_secret_error(name: str, kind: str, path: Path, section: str) -> JobConfigError:
    """The refusal of a credential written into config.ini, with the way to do it."""
    secret = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "credentials"
    return JobConfigError(
        path,
        f"the value is {kind}: config.ini goes into git and into the job's image, so a credential must not be in it",
        f"remove it (and revoke it if it was committed), keep it in a Kubernetes Secret and map it in "
        f"[{SECRETS_SECTION}]: `{name} = {secret}/value`{_create_hint(name)}. Local runs read {name} from your shell",
        section,
        name,
    )


def _create_hint(name: str) -> str:
    secret = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "credentials"
    return f" (create it with `kubectl create secret generic {secret} --from-literal=value=...`)"

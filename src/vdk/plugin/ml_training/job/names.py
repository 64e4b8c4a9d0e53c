"""The naming grammar: every pattern a name of the project must match, in one place.

Job names (DNS-1035 labels short enough for the run and pod names made from them), Kubernetes names (DNS-1123
labels and subdomains), label values (teams, runs), run names, image references and registry addresses, MIG
profiles, Python module and package names, interpreters and environment variable names. The modules that parse
or build such names (teams.py, k8s/runs/identity.py, image_reference.py, the spec's readers) import the patterns
from here, so that a rule is written once.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.vocabulary.nvidia import SLICES
from vdk.plugin.ml_training.vocabulary.nvidia import mig_name

# --- Kubernetes names ---------------------------------------------------------------------------------------

DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_LABEL_LENGTH = 63  # of a DNS label, and of a label value
MAX_SUBDOMAIN_LENGTH = 253
# A label value: [A-Za-z0-9._-], alphanumeric at both ends (empty aside).
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
NOT_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
# A key of a Secret's data.
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

# --- jobs and runs ------------------------------------------------------------------------------------------

# Job name + "-" + an 8-character run id + suffixes such as "-worker-15" must stay a 63-char DNS label.
MAX_JOB_NAME_LENGTH = 40
# A run is `<job name>-<RUN_ID_LENGTH characters of RUN_ID_ALPHABET>` (k8s/runs/identity.py makes them).
RUN_ID_LENGTH = 8
RUN_ID_ALPHABET = string.ascii_lowercase + string.digits

# --- images -------------------------------------------------------------------------------------------------

# host[:port]/path[:tag][@digest], as in the distribution reference grammar (kept lenient on hosts).
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?)"
TAG_TEXT = r"[\w][\w.-]{0,127}"
DIGEST_TEXT = r"sha256:[a-f0-9]{64}"
IMAGE_REFERENCE = re.compile(
    rf"^(?:{HOST}/)?{PATH_COMPONENT}(?:/{PATH_COMPONENT})*(?::{TAG_TEXT})?(?:@{DIGEST_TEXT})?$"
)
REGISTRY = re.compile(rf"^{HOST}(?:/{PATH_COMPONENT})*$")
TRACKING_SERVER = re.compile(r"^https?://[^\s/@]+(/\S*)?$")  # an MLflow tracking server's address
REPOSITORY_COMPONENT = re.compile(rf"^{PATH_COMPONENT}$")
TAG = re.compile(rf"^{TAG_TEXT}$")
DIGEST = re.compile(rf"^{DIGEST_TEXT}$")

# --- GPUs, Python and processes -----------------------------------------------------------------------------

MAX_MIG_GB = 512  # memory of the largest GPU's whole-GPU profile, with room to grow
MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
PYTHON_VERSION = re.compile(r"^3\.[0-9]{1,2}$")
# An interpreter: a command name looked up on the image's PATH, or an absolute path.
INTERPRETER = re.compile(r"^(/[^\s]+|[A-Za-z0-9][A-Za-z0-9._+-]*)$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def mig_profile_is_possible(profile: str) -> bool:
    """Whether a MIG profile (`[Nc.]Ng.Mgb[+me]`) fits a GPU: 1 to nvidia.SLICES slices (compute ones no more than
    those), 1 to MAX_MIG_GB GB."""
    name = mig_name(profile)
    if name is None:
        return False
    return 1 <= name.compute <= name.slices <= SLICES and 1 <= name.gigabytes <= MAX_MIG_GB


# --- job names ----------------------------------------------------------------------------------------------


def is_kubernetes_job_name(name: str) -> bool:
    """Whether `name` is a DNS-1035 label short enough for the run and pod names derived from it."""
    return bool(DNS_1035_LABEL.match(name)) and len(name) <= MAX_JOB_NAME_LENGTH


def kubernetes_job_name(name: str, config_path: Path, from_option: bool = False) -> str:
    """`name` if it can be a job's name on Kubernetes (`is_kubernetes_job_name`), else a JobConfigError (an
    MLTrainingError about -n when `from_option`: the name given with -n/--name)."""
    if is_kubernetes_job_name(name):
        return name
    suggestion = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    suggestion = re.sub(r"^[^a-z]+", "", suggestion)[:MAX_JOB_NAME_LENGTH].rstrip("-") or "my-job"
    rule = (
        f"cannot be a Kubernetes name (lower-case letters, digits and '-', starting with a letter, at most "
        f"{MAX_JOB_NAME_LENGTH} characters)"
    )
    if from_option:
        raise MLTrainingError(f"-n {name}: the job name {name!r} {rule}", f"use `-n {suggestion}`")
    raise JobConfigError(
        config_path.parent,
        f"the job name {name!r} (the job directory's name) {rule}",
        f"rename the job directory, or deploy with `-n {suggestion}`",
    )


# --- label values -------------------------------------------------------------------------------------------


def as_label_value(text: str) -> str:
    """`text` with every run of characters a label value cannot hold as `-`, cut to MAX_LABEL_LENGTH and
    trimmed to alphanumeric ends ("" when nothing is left)."""
    value = NOT_LABEL_CHARS.sub("-", text)[:MAX_LABEL_LENGTH]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)

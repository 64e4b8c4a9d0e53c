"""One deployment of a job (a "run"): its name, its labels and its audit annotations."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.names import MAX_JOB_NAME_LENGTH
from vdk.plugin.ml_training.job.names import RUN_ID_ALPHABET
from vdk.plugin.ml_training.job.names import RUN_ID_LENGTH
from vdk.plugin.ml_training.job.names import as_label_value
from vdk.plugin.ml_training.job.names import is_kubernetes_job_name
from vdk.plugin.ml_training.job.overrides import describe as describe_overrides
from vdk.plugin.ml_training.job.teams import team_label
from vdk.plugin.ml_training.source.audit import Provenance
from vdk.plugin.ml_training.vocabulary.wire import PROJECT

LABEL_JOB = "vdk.io/job-name"
LABEL_TEAM = "vdk.io/team"
LABEL_RUN = "vdk.io/run"
LABEL_BACKEND = "vdk.io/backend"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = PROJECT
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# On the usage record a deleted run leaves (k8s/gpu_hours.py), instead of LABEL_RUN: it is no part of a run.
LABEL_USAGE_OF = "vdk.io/usage-of"

ANNOTATION_GIT_COMMIT = "vdk.io/git-commit"
ANNOTATION_GIT_DIRTY = "vdk.io/git-dirty"
ANNOTATION_GIT_DIFF = "vdk.io/git-diff-sha256"
ANNOTATION_GIT_REMOTE = "vdk.io/git-remote"
ANNOTATION_DEPLOYER = "vdk.io/deployed-by"
ANNOTATION_DEPLOYED_AT = "vdk.io/deployed-at"
ANNOTATION_REASON = "vdk.io/reason"
ANNOTATION_IMAGE = "vdk.io/image"
ANNOTATION_IMAGE_DIGEST = "vdk.io/image-digest"
ANNOTATION_SPEC_HASH = "vdk.io/spec-sha256"
ANNOTATION_TEAM = "vdk.io/team"
ANNOTATION_RERUN_OF = "vdk.io/rerun-of"
ANNOTATION_CONTINUES = "vdk.io/continues"  # the run whose outputs this run began with (vdk execute --start --from)
ANNOTATION_FROM_SWEEP = "vdk.io/from-sweep"  # a run of a sweep's trial: {"sweep", "trial", "params"} (JSON)
# "true" on a sweep's objects and pods; on its trials' Job, also the annotation of its settings (JSON).
LABEL_SWEEP = "vdk.io/sweep"
ANNOTATION_SWEEP = LABEL_SWEEP
# The [ml-training] keys given for this run only (`--set`, `--args`), as `key=value, key='a b'`.
ANNOTATION_OVERRIDES = "vdk.io/overrides"
# The VDK Control Service's execution whose launcher started the run (ops/cs_launch.py).
ANNOTATION_EXECUTION = "vdk.io/execution"


def is_run_of(run_name: str, job_name: str) -> bool:
    """Whether `run_name` is a run name `new_run_name(job_name)` could have made."""
    suffix = run_name.removeprefix(f"{job_name}-")
    return suffix != run_name and len(suffix) == RUN_ID_LENGTH and all(c in RUN_ID_ALPHABET for c in suffix)


def new_run_name(job_name: str) -> str:
    """`<job name>-<8 random [a-z0-9]>`: a DNS-1035 label of at most 49 characters, so that the
    names operators derive from it (`<run>-worker-15`, `<run>-node-0-3`) stay within 63."""
    if not is_kubernetes_job_name(job_name):
        raise MLTrainingError(
            f"the job name {job_name!r} cannot start a Kubernetes run name",
            f"use a name of lower-case letters, digits and '-' that starts with a letter, "
            f"at most {MAX_JOB_NAME_LENGTH} characters",
        )
    run_id = "".join(secrets.choice(RUN_ID_ALPHABET) for _ in range(RUN_ID_LENGTH))
    return f"{job_name}-{run_id}"


def run_name_for(job_name: str, key: str) -> str:
    """`<job name>-<8 [a-z0-9]>` as `new_run_name` makes it, the 8 characters derived from `key` (the VDK Control
    Service's execution id): every attempt of one execution names the same run, and finds the run an earlier
    attempt created instead of starting a second."""
    new_run_name(job_name)  # the same checks of the job name
    number = int.from_bytes(hashlib.sha256(key.encode()).digest(), "big")
    run_id = ""
    for _ in range(RUN_ID_LENGTH):
        number, digit = divmod(number, len(RUN_ID_ALPHABET))
        run_id += RUN_ID_ALPHABET[digit]
    return f"{job_name}-{run_id}"


def label_value(text: str | None) -> str | None:
    """`text` made a valid label value (<= 63 of [A-Za-z0-9._-], alphanumeric at both ends). Not for
    teams: a team's label value is `teams.team_label` (normalised, validated, never cut)."""
    if not text:
        return None
    return as_label_value(text) or None


@dataclass(frozen=True)
class RunInfo:
    """What identifies one run of a job on a cluster, and who started it from what."""

    name: str
    job_name: str
    team: str | None
    provenance: Provenance
    reason: str | None
    image_digest: str | None  # "sha256:..." of the pushed image; None when not pushed (dry run)
    spec_hash: str
    # (name, version) installed in the image's dependency layer; empty when unknown (dry run)
    dependencies: tuple[tuple[str, str], ...] = ()
    from_sweep: str | None = None  # JSON {"sweep": run, "trial": number, "params": {...}}: a sweep's trial run in full
    # Each dataset pinned at deploy (datafetch/data_pins.py); empty when not resolved (dry run)
    data: tuple[DataPin, ...] = ()
    # (path, sha256) of every file of the image's code layer; empty when unknown
    code_files: tuple[tuple[str, str], ...] = ()
    base_digest: str | None = None  # the base image by digest; None when unknown
    # [ml-training] keys given for this run only (`--set`, `--args`), as given
    overrides: tuple[tuple[str, str], ...] = ()
    execution: str | None = None  # the Control Service's execution that started it, when one did

    @classmethod
    def create(
        cls,
        spec: MLJobSpec,
        provenance: Provenance,
        reason: str | None = None,
        image_digest: str | None = None,
        name: str | None = None,
        dependencies: tuple[tuple[str, str], ...] = (),
        data: tuple[DataPin, ...] = (),
        code_files: tuple[tuple[str, str], ...] = (),
        base_digest: str | None = None,
        execution: str | None = None,
    ) -> RunInfo:
        """A new run of `spec` (a fresh run name unless `name` is given)."""
        job_name = spec.kubernetes_name()
        return cls(
            name=name or new_run_name(job_name),
            job_name=job_name,
            team=spec.team,
            provenance=provenance,
            reason=reason,
            image_digest=image_digest,
            spec_hash=spec.fingerprint(),
            dependencies=tuple(dependencies),
            data=tuple(data),
            code_files=tuple(code_files),
            base_digest=base_digest,
            overrides=spec.overrides,
            execution=execution,
        )

    def labels(self, backend: str) -> dict[str, str]:
        """Labels on every object of the run and on its pods: `vdk list` and `vdk delete` select by them."""
        labels = {
            LABEL_JOB: self.job_name,
            LABEL_RUN: self.name,
            LABEL_BACKEND: backend,
            LABEL_MANAGED_BY: MANAGED_BY,
        }
        if self.team:
            labels[LABEL_TEAM] = team_label(self.team)
        return labels

    def annotations(self, image: str) -> dict[str, str]:
        """The audit trail: what code (commit, dirty-diff hash), which image, which spec, who, when, why.
        What is not known is left out: outside git there is no commit, and so no dirty flag."""
        p = self.provenance
        values = {
            ANNOTATION_GIT_COMMIT: p.git_commit,
            ANNOTATION_GIT_DIRTY: ("true" if p.git_dirty else "false") if p.git_commit else None,
            ANNOTATION_GIT_DIFF: p.git_diff_sha256,
            ANNOTATION_GIT_REMOTE: p.git_remote,
            ANNOTATION_DEPLOYER: p.deployer,
            ANNOTATION_DEPLOYED_AT: p.created,
            ANNOTATION_REASON: self.reason,
            ANNOTATION_IMAGE: image,
            ANNOTATION_IMAGE_DIGEST: self.image_digest,
            ANNOTATION_SPEC_HASH: self.spec_hash,
            ANNOTATION_TEAM: self.team,
            ANNOTATION_FROM_SWEEP: self.from_sweep,
            ANNOTATION_OVERRIDES: describe_overrides(self.overrides) if self.overrides else None,
            ANNOTATION_EXECUTION: self.execution,
        }
        return {key: value for key, value in values.items() if value}

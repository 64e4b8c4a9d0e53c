"""A rank's image that cannot be pulled: the registry refuses the nodes, the image is gone, or the nodes
cannot reach the registry."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.finding import Fix
from vdk.plugin.ml_training.diagnosis.finding import Waiting
from vdk.plugin.ml_training.diagnosis.finding import fix_for
from vdk.plugin.ml_training.job.keys import variable

PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# Image pull message fragments -> what to do.
PULL_FIXES = (
    Fix(
        r"unauthorized|authentication required|401|403|denied|forbidden",
        "the cluster's nodes may not pull from the registry: create an image pull secret (`kubectl create secret "
        "docker-registry NAME ...` in the run's namespace) and name it in `image_pull_secrets` of [ml-training] "
        f"(or {variable('image_pull_secrets')} for every job), then deploy again",
    ),
    Fix(
        r"not found|manifest unknown|404",
        "the image is not in the registry (deleted, or pushed elsewhere): deploy again",
    ),
    Fix(
        r"no such host|i/o timeout|connection refused|dial tcp|tls|x509|certificate",
        "the nodes cannot reach the registry: it must be reachable from inside the cluster (not localhost) "
        "with a certificate the nodes trust",
    ),
)


def cannot_pull(rank: RankEvidence) -> Waiting | None:
    if rank.waiting_reason not in PULL_FAILURES:
        return None
    message = rank.waiting_message or rank.waiting_reason
    return Waiting(
        f"cannot pull the image ({rank.waiting_reason}): {message}",
        fix_for(message, PULL_FIXES) or "check that the cluster can pull the image",
    )

"""The builder of the Control Service's ml-training entry (ops/cs_build.py, `vdk-ml-training-builder`) as the service
starts it (its eleven positional arguments, its variables, the job in its git repository served over HTTP with basic
authentication) and as the service judges it (tests/support/control_service.py's judge_builder, its
DeploymentNotificationHelper's rules): the image pushed under the tag the service's CronJob runs, with the job's own
commit and its SBOM and build provenance attached; the job's own problems reported between the
`>requirements_failed<` markers (the user's error, with the message the service reports); a job the repository lacks
with `>data-job-not-found<`; a git server that refuses the builder's credentials is the platform's error."""

from __future__ import annotations

import base64
import subprocess

import pytest
import requests

from tests.support.control_service import GIT_PASSWORD
from tests.support.control_service import GIT_USER
from tests.support.control_service import judge_builder
from tests.support.control_service_pods import local_builder
from tests.support.jobs import cs_job
from vdk.plugin.ml_training.control_service.upload import sources_zip
from vdk.plugin.ml_training.image.attestations import KINDS
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.referrers import ANNOTATION_PREDICATE
from vdk.plugin.ml_training.image.referrers import list_referrers
from vdk.plugin.ml_training.image.registry import TARGET
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.source import audit

pytestmark = pytest.mark.usefixtures("isolated_environment")
MANIFEST = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"


def uploaded(service, tmp_path, requirements: str | None = None) -> tuple[str, str]:
    """The job's files in the service's repository as a deploy uploads them; (version, the job's commit)."""
    job = cs_job(tmp_path / "repo")
    if requirements is not None:
        (job / "requirements.txt").write_text(requirements)
        subprocess.run(["git", "add", "-A"], cwd=job.parent, check=True)
        subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "r"], cwd=job.parent)
    provenance = audit.collect(job)
    return service.upload("cs-train", sources_zip(job, "cs-train", provenance), "deploy"), provenance.git_commit


def build(service, version: str, base_image: str, job: str = "cs-train", git_password: str = GIT_PASSWORD):
    args = ["generic", "generic", "generic", service.registry, GIT_USER, git_password, service.git_repository,
            "generic", "", "", "generic"]  # fmt: skip
    env = {"DATA_JOB_NAME": job, "JOB_NAME": job, "GIT_COMMIT": version, "JOB_GITHASH": version,
           "GIT_BRANCH": "master", "IMAGE_REGISTRY_PATH": service.registry, "BASE_IMAGE": base_image,
           "EXTRA_ARGUMENTS": "", "GIT_SSL_ENABLED": "false"}  # fmt: skip
    return local_builder()("builder-image", args, env)


def test_the_builder_pushes_the_tag_the_service_runs_with_the_jobs_own_commit(
    control_service, tmp_path, registry, base_image
):
    service, _ = control_service()
    version, commit = uploaded(service, tmp_path)
    code, log = build(service, version, base_image)
    assert judge_builder(code, log) == ("success", ""), log
    host, repository = service.registry.split("/", 1)
    answer = requests.get(f"http://{host}/v2/{repository}/cs-train/manifests/{version}", headers={"Accept": MANIFEST})
    assert answer.status_code == 200, log
    config_digest = answer.json()["config"]["digest"]
    config = requests.get(f"http://{host}/v2/{repository}/cs-train/blobs/{config_digest}").json()["config"]
    assert config["Labels"]["org.opencontainers.image.revision"] == commit  # the job's, not the service's
    assert commit != version
    assert f"from the job's commit {commit}" in log
    # its SBOM and build provenance attached as a deploy's are: the image's referrers
    assert "Attached to the image: SBOM and provenance" in log, log
    with RegistryClient(host, Progress(), role=TARGET) as client:
        listing = list_referrers(client, f"{repository}/cs-train", answer.headers["Docker-Content-Digest"])
    predicates = sorted(r.annotations.get(ANNOTATION_PREDICATE, "") for r in listing.referrers)
    assert predicates == sorted(predicate for _, predicate, _ in KINDS)
    # the git server saw the service's git credentials
    auth = [h.get("Authorization") for m, p, h in service.requests if p.startswith("/data-jobs.git/")]
    assert "Basic " + base64.b64encode(f"{GIT_USER}:{GIT_PASSWORD}".encode()).decode() in auth


def test_the_jobs_own_problems_are_the_users_and_the_services_are_the_platforms(control_service, tmp_path, base_image):
    service, _ = control_service()
    version, _ = uploaded(service, tmp_path, requirements="torch==2.13.0\nno-such-package-vdk-ml==9.9\n")
    code, log = build(service, version, base_image)
    result, message = judge_builder(code, log)
    assert code == 1 and result == "user_error", log
    assert "no-such-package-vdk-ml" in message and ">requirements_failed<" not in message
    assert log.count(">requirements_failed<") == 3
    missing_code, missing_log = build(service, version, base_image, job="not-there-job")
    assert judge_builder(missing_code, missing_log)[0] == "user_error"
    assert ">data-job-not-found<" in missing_log
    refused_code, refused_log = build(service, version, base_image, git_password="wrong")
    assert judge_builder(refused_code, refused_log) == ("platform_error", ""), refused_log
    assert "wrong" not in refused_log and GIT_PASSWORD not in refused_log  # no credential in the log

"""The builder's side of the Control Service's builder contract (ops/cs_build.py): its eleven positional arguments
and variables read as the service passes them; the git URL with the service's credentials; the marker lines whose
message the service reports (its own rule, in `judged`, finds the message between the last two markers)."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.cs_build import ARGUMENTS
from vdk.plugin.ml_training.ops.cs_build import REQUIREMENTS_FAILED
from vdk.plugin.ml_training.ops.cs_build import request_from
from vdk.plugin.ml_training.ops.cs_build import requirements_failed

ARGS = ["generic", "generic", "generic", "registry.example.com/data-jobs", "bot", "p@ss/word",
        "git.example.com/org/data-jobs.git", "generic", "pusher", "secret", "generic"]  # fmt: skip
ENV = {"DATA_JOB_NAME": "mnist-ddp", "GIT_COMMIT": "f" * 40, "GIT_BRANCH": "main", "BASE_IMAGE": "base:1",
       "IMAGE_REGISTRY_PATH": "registry.example.com/data-jobs", "GIT_SSL_ENABLED": "true"}  # fmt: skip


def test_the_request_is_read_as_the_service_passes_it():
    request = request_from(ARGS, ENV)
    assert len(ARGUMENTS) == 11 and request.arguments["git_repository"] == "git.example.com/org/data-jobs.git"
    assert request.tag == f"registry.example.com/data-jobs/mnist-ddp:{'f' * 40}"
    assert request.base_image == "base:1" and request.branch == "main" and request.git_ssl
    assert request.clone_url() == "https://bot:p%40ss%2Fword@git.example.com/org/data-jobs.git"
    plain = request_from(ARGS[:4] + ["", ""] + ARGS[6:], {**ENV, "GIT_SSL_ENABLED": "false"})
    assert plain.clone_url() == "http://git.example.com/org/data-jobs.git"


def test_a_request_not_in_the_services_form_is_refused():
    with pytest.raises(MLTrainingError, match="the VDK Control Service's 11 arguments"):
        request_from(ARGS[:10], ENV)
    with pytest.raises(MLTrainingError, match="lacks DATA_JOB_NAME, GIT_COMMIT"):
        request_from(ARGS, {"IMAGE_REGISTRY_PATH": "r"})


def judged(log: str) -> str | None:
    """The Control Service's reading of a failed builder's log (DeploymentNotificationHelper.verifyBuilderResult)."""
    if REQUIREMENTS_FAILED not in log:
        return None
    parts = log.split(REQUIREMENTS_FAILED)
    return parts[len(parts) - 2] if len(parts) > 3 else ""


def test_the_service_reports_the_message_between_the_markers():
    message = "requirements.txt cannot be installed:\nno-such==1 was not found\nFix: fix it"
    log = "Building...\n" + requirements_failed(message) + "\n"
    assert judged(log) == "requirements.txt cannot be installed: no-such==1 was not found Fix: fix it"
    assert judged("x " + requirements_failed(f"a {REQUIREMENTS_FAILED} in the message") + "\n") == "a in the message"

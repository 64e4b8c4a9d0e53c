"""One naming grammar (job/names.py): the spec, the teams, the run identity and the image references use the same
patterns, so a name the spec accepts is one the others can carry."""

import pytest

from vdk.plugin.ml_training.job import image_reference as reference
from vdk.plugin.ml_training.job import names
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.k8s.runs import identity as run_identity

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "text, valid",
    [
        ("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", True),
        ("busybox", True),
        ("localhost:5000/team/image:tag", True),
        (f"registry.example.com/ml/image@{DIGEST}", True),
        (f"registry.example.com/ml/image:v1@{DIGEST}", True),
        ("Registry.Example.com/ml/image", True),  # hosts are lenient
        ("ml/Image", False),
        ("ml/image:-tag", False),
        ("ml/image@sha256:abc", False),
        ("https://registry.example.com/ml/image", False),
    ],
)
def test_an_image_reference_the_spec_accepts_is_one_the_image_builder_reads(text, valid):
    assert bool(names.IMAGE_REFERENCE.match(text)) == valid
    if valid:
        assert reference.parse_reference(text).repository.rsplit("/", 1)[-1] in text
    else:
        with pytest.raises(reference.ImageReferenceError):
            reference.parse_reference(text)


def test_registry_addresses():
    assert names.REGISTRY.match("registry.example.com/ml") and names.REGISTRY.match("127.0.0.1:5000")
    assert not names.REGISTRY.match("https://registry.example.com") and not names.REGISTRY.match("reg/ML")


def test_job_names_and_run_names():
    assert names.is_kubernetes_job_name("a" * names.MAX_JOB_NAME_LENGTH)
    assert not names.is_kubernetes_job_name("a" * (names.MAX_JOB_NAME_LENGTH + 1))
    assert not names.is_kubernetes_job_name("1-job") and not names.is_kubernetes_job_name("my_job")
    run = run_identity.new_run_name("a" * names.MAX_JOB_NAME_LENGTH)
    assert names.DNS_1035_LABEL.match(run) and len(run) == names.MAX_JOB_NAME_LENGTH + 1 + names.RUN_ID_LENGTH
    assert len(run) + len("-worker-15") <= names.MAX_LABEL_LENGTH


def test_label_values_are_made_one_way_for_runs_and_teams():
    assert run_identity.label_value("my job/v2!") == names.as_label_value("my job/v2!") == "my-job-v2"
    assert run_identity.label_value("--") is None and teams.suggested_name("--") == "my-team"
    assert teams.suggested_name("R&D") == names.as_label_value("R&D") == "R-D"
    assert len(names.as_label_value("x" * 100)) == names.MAX_LABEL_LENGTH
    assert names.LABEL_VALUE.match(names.as_label_value("_a.b-c_"))


def test_modules_and_variables():
    assert names.MODULE.match("pkg.mod") and not names.MODULE.match("pkg..mod")
    assert names.ENV_NAME.match("HF_TOKEN") and not names.ENV_NAME.match("1TOKEN")

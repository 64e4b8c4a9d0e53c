"""The image's provenance: an in-toto Statement v1 about the image's manifest digest with SLSA Provenance v1, as
cosign reads it (strictly: nothing but its four fields); and the checks of those rules, which find each break."""

import copy

from tests.support.image_facts import COMMIT
from tests.support.image_facts import image_facts
from vdk.plugin.ml_training.image import provenance
from vdk.plugin.ml_training.image.image_facts import BuildParameters

PARAMETERS = BuildParameters(
    "12" * 32,
    (("nodes", "4"),),
    ({"target": "data/train", "source": "hf://datasets/org/set@main", "version": "ab" * 20, "fingerprint": "ab" * 20},
     {"target": "data/eval", "source": "s3://bucket/eval/", "fingerprint": "cd" * 32, "files": 3}),
    "ada@example.com",
)  # fmt: skip


def test_the_statement_is_about_the_image_and_follows_slsa_v1():
    statement = provenance.provenance_statement(image_facts(), PARAMETERS)
    assert set(statement) == {"_type", "subject", "predicateType", "predicate"}
    assert statement["subject"] == [{"name": "registry.example.com:5000/ml/mnist-ddp", "digest": {"sha256": "ab" * 32}}]
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert provenance.problems(statement, "sha256:" + "ab" * 32) == []
    definition = statement["predicate"]["buildDefinition"]
    assert definition["buildType"] == provenance.BUILD_TYPE
    assert definition["externalParameters"] == {
        "job": "mnist-ddp",
        "team": "vision",
        "baseImage": "python:3.11-slim",
        "registry": "registry.example.com:5000/ml/mnist-ddp",
        "configIniSha256": "12" * 32,
        "overrides": {"nodes": "4"},
    }
    resolved = {d["name"]: d for d in definition["resolvedDependencies"]}
    assert resolved["base-image"] == {
        "name": "base-image",
        "uri": "pkg:docker/library/python@sha256:" + "cd" * 32,
        "digest": {"sha256": "cd" * 32},
    }
    assert resolved["source"]["digest"] == {"gitCommit": COMMIT}
    assert resolved["source"]["uri"] == "git+https://git.example.com/ml/jobs.git"
    assert resolved["source"]["annotations"] == {"dirty": True, "diffSha256": "ee" * 32}
    assert resolved["requirements.lock"]["digest"]["sha256"] == image_facts().lock.sha256
    assert resolved["data:data/train"]["digest"] == {"gitCommit": "ab" * 20}
    assert resolved["data:data/eval"]["digest"] == {"sha256": "cd" * 32}
    run = statement["predicate"]["runDetails"]
    assert run["builder"] == {"id": provenance.BUILDER_ID, "version": {"vdk-ml-training": run["builder"]["version"]
                                                                        ["vdk-ml-training"]}}  # fmt: skip
    assert run["metadata"] == {"startedOn": "2026-01-02T03:04:05Z", "finishedOn": "2026-01-02T03:05:06Z"}
    assert [b["name"] for b in run["byproducts"]] == ["layer:base", "layer:dependencies", "layer:runtime", "layer:code"]


def test_a_build_outside_git_names_no_commit():
    statement = provenance.provenance_statement(image_facts(git_commit=None, git_dirty=False, git_diff_sha256=None,
                                                            git_remote=None), BuildParameters(None))  # fmt: skip
    names = [d["name"] for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]]
    assert "source" not in names and provenance.problems(statement) == []


def test_the_checks_find_every_broken_rule():
    good = provenance.provenance_statement(image_facts(), PARAMETERS)

    def broken(change) -> list[str]:
        statement = copy.deepcopy(good)
        change(statement)
        return provenance.problems(statement, "sha256:" + "ab" * 32)

    assert "unknown top-level fields ['extra']" in broken(lambda s: s.update(extra=1))[0]
    assert "_type" in broken(lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"))[0]
    assert "subject is missing or empty" in broken(lambda s: s.update(subject=[]))
    assert any(
        "no subject is the image" in p for p in broken(lambda s: s["subject"][0]["digest"].update(sha256="0" * 64))
    )
    assert any("is not 64 lower-case hex" in p for p in broken(lambda s: s["subject"][0]["digest"].update(sha256="AB")))
    predicate = lambda s: s["predicate"]  # noqa: E731
    assert "buildType is missing" in broken(lambda s: predicate(s)["buildDefinition"].pop("buildType"))[0]
    version = lambda s: predicate(s)["runDetails"]["builder"].update(version="0.1.0")  # noqa: E731
    assert "not a map of strings" in broken(version)[0]
    started = lambda s: predicate(s)["runDetails"]["metadata"].update(startedOn="2026-01-02 03:04:05+01:00")  # noqa: E731
    assert "not an RFC 3339 time in UTC" in broken(started)[0]
    empty = lambda s: predicate(s)["buildDefinition"]["resolvedDependencies"].append({"name": "x"})  # noqa: E731
    assert "x has none of uri, digest, content" in broken(empty)[0]
    commit = lambda s: predicate(s)["buildDefinition"]["resolvedDependencies"][1]["digest"].update(gitCommit="abc")  # noqa: E731
    assert "gitCommit 'abc' is not 40 or 64" in broken(commit)[0]

"""The dependency layer's lock as read back, and the licence each distribution's metadata declares."""

import hashlib

from vdk.plugin.ml_training.dependencies.lock import Lock
from vdk.plugin.ml_training.dependencies.lock import declared_license
from vdk.plugin.ml_training.dependencies.lock import index_options
from vdk.plugin.ml_training.dependencies.lock import licenses
from vdk.plugin.ml_training.dependencies.lock import parse_hashes

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_the_hashes_of_each_pin_as_uv_writes_them():
    text = (
        f"numpy==2.4.6 \\\n    --hash=sha256:{B} \\\n    --hash=sha256:{A}\n"
        f"Typing_Extensions==4.12.2 \\\n    --hash=sha256:{C}\n    # via -r installed.txt\nsix==1.17.0\n"
    )
    assert parse_hashes(text) == {"numpy": (A, B), "typing-extensions": (C,), "six": ()}


def test_a_lock_has_the_digest_of_its_text_and_none_without_text():
    assert Lock("six==1.17.0\n", {}).sha256 == hashlib.sha256(b"six==1.17.0\n").hexdigest()
    assert Lock("", {}, "the index did not list every pin").sha256 is None


def test_the_declared_licence_prefers_the_expression_then_a_short_field_then_classifiers():
    headers = "Metadata-Version: 2.4\nName: x\nVersion: 1\n"
    assert declared_license(headers + "License-Expression: MIT OR Apache-2.0\nLicense: BSD\n") == "MIT OR Apache-2.0"
    assert declared_license(headers + "License: BSD-3-Clause\n") == "BSD-3-Clause"
    classifier = "Classifier: License :: OSI Approved :: MIT License\n"
    assert declared_license(headers + "License: UNKNOWN\n" + classifier) == "MIT License"
    assert declared_license(headers + "License: " + "x" * 500 + "\n" + classifier) == "MIT License"  # the text
    assert declared_license(headers + "\nLicense-Expression: MIT\n") is None  # after the headers: the description
    assert declared_license(headers) is None


def test_licences_of_a_target_directory_by_normalised_name(tmp_path):
    info = tmp_path / "Foo_Bar-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: Foo_Bar\nVersion: 1.0\nLicense-Expression: MIT\n")
    bare = tmp_path / "bare-2.0.dist-info"
    bare.mkdir()
    (bare / "METADATA").write_text("Metadata-Version: 2.1\nName: bare\nVersion: 2.0\n")
    assert licenses(tmp_path) == {"foo-bar": "MIT"}


def test_index_options_are_carried_from_the_requirements(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "--index-url https://pypi.example/simple\n-f ./wheels\nnumpy\n--no-index\n# c\n-r other.txt\n"
    )
    assert index_options(requirements) == ["--index-url https://pypi.example/simple", "-f ./wheels", "--no-index"]
    assert index_options(tmp_path / "missing.txt") == []

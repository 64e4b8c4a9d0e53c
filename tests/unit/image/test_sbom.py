"""The image's SBOM: valid against CycloneDX's own 1.6 schema (the library ships it), byte for byte the same for
the same image, and saying what each layer holds."""

import json

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tests.support.image_facts import COMMIT
from tests.support.image_facts import image_facts
from vdk.plugin.ml_training.dependencies.lock import Lock
from vdk.plugin.ml_training.image import sbom


def test_the_sbom_is_valid_cyclonedx_1_6_and_the_same_bytes_for_the_same_image():
    facts = image_facts()
    text = sbom.sbom(facts)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text.decode()) is None
    assert sbom.sbom(image_facts()) == text  # serial number, timestamp and bom-refs are the image's, not random
    other = sbom.sbom(image_facts(digest="sha256:" + "ef" * 32))
    assert json.loads(other)["serialNumber"] != json.loads(text)["serialNumber"]
    broken = json.loads(text) | {"bogus": 1}
    assert "bogus" in str(JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(broken)))  # it can fail


def test_each_layer_is_in_it_with_its_packages_hashes_licences_and_files():
    document = json.loads(sbom.sbom(image_facts()))
    assert document["metadata"]["timestamp"] == "1970-01-01T00:00:01+00:00"
    image = document["metadata"]["component"]
    assert image["purl"] == (
        "pkg:oci/mnist-ddp@sha256:" + "ab" * 32 + "?repository_url=registry.example.com:5000/ml/mnist-ddp"
        "&tag=0f1e2d3c4b5a69788796"
    )
    parts = {c["bom-ref"]: c for c in document["components"]}
    base = parts["base-image"]
    assert base["purl"] == "pkg:docker/library/python@sha256:" + "cd" * 32
    assert [c["purl"] for c in base["components"]] == ["pkg:pypi/pip@24.0", "pkg:pypi/setuptools@65.5.0"]
    numpy, six = parts["pkg:pypi/numpy@2.4.6"], parts["pkg:pypi/six@1.17.0"]
    assert numpy["licenses"] == [{"expression": "BSD-3-Clause AND 0BSD"}]
    assert six["licenses"] == [{"license": {"name": "MIT License"}}]  # not an SPDX id: said by name
    assert [h["content"] for h in six["hashes"]] == ["66" * 32, "77" * 32]
    code = parts["code"]
    assert code["version"] == f"git:{COMMIT}"
    assert {(f["name"], f["hashes"][0]["content"]) for f in code["components"]} == {
        ("train.py", "88" * 32),
        ("lib/model.py", "99" * 32),
    }
    assert {"name": "vdk-ml-training:git:dirty", "value": "true"} in code["properties"]
    assert parts["runtime"]["name"] == "vdk-ml-training"
    (image_dependencies,) = [d for d in document["dependencies"] if d["ref"] == "image"]
    assert set(image_dependencies["dependsOn"]) == set(parts)
    assert sbom.summary(document) == {
        "format": "CycloneDX 1.6",
        "packages": ["numpy==2.4.6", "six==1.17.0"],
        "base_packages": 2,
        "code_files": 2,
        "licensed": 2,
    }


def test_a_base_not_read_and_a_lock_without_hashes_are_said():
    facts = image_facts(base_packages=(), base_packages_read=False, lock=Lock("", {}, "the index did not list x"))
    document = json.loads(sbom.sbom(facts))
    parts = {c["bom-ref"]: c for c in document["components"]}
    assert {"name": "vdk-ml-training:python-packages", "value": "not read (the base is a well-known one)"} in parts[
        "base-image"
    ]["properties"]
    assert "hashes" not in parts["pkg:pypi/six@1.17.0"]
    assert {"name": "vdk-ml-training:hashes", "value": "none: the index did not list x"} in parts[
        "pkg:pypi/six@1.17.0"
    ]["properties"]
    oci_base = json.loads(sbom.sbom(image_facts(base_reference="reg.example/base/torch@sha256:" + "cd" * 32)))
    base = {c["bom-ref"]: c for c in oci_base["components"]}["base-image"]
    assert base["purl"] == "pkg:oci/torch@sha256:" + "cd" * 32 + "?repository_url=reg.example/base/torch"

"""`auto` backend choice and Trainer version detection, from discovery done by the real `kubernetes` client
against the fake API server: the resources served, a runtime listing that is forbidden (unknown, not a
failure), the Trainer's mechanism from the served schema, else its public ConfigMap, else the CRD.
(The choice from a Discovery made by hand: tests/unit/k8s/test_backend_choice.py.)"""

import pytest

from vdk.plugin.ml_training.k8s.backends import choose_backend
from vdk.plugin.ml_training.k8s.backends import trainjob
from vdk.plugin.ml_training.k8s.backends.trainjob import trainer_facts


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, "job"),
        ({"pytorchjob": True}, "pytorchjob"),
        ({"trainer_mechanism": "runtimePatches"}, "trainjob"),
        ({"pytorchjob": True, "trainer_mechanism": "podTemplateOverrides"}, "trainjob"),
        ({"pytorchjob": True, "trainer_mechanism": "runtimePatches", "torch_runtime": False}, "pytorchjob"),
    ],
)
def test_auto_from_real_discovery(cluster, options, expected):
    fake, client = cluster(**options)
    found = client.discover()
    assert choose_backend(found, "auto") == expected
    assert found.server_version == "v1.31.0"
    paths = {p for _, p, _ in fake.requests}
    assert "/apis" in paths and "/apis/batch/v1" in paths


def test_forbidden_runtime_listing_means_unknown_not_failure(cluster):
    fake, client = cluster(
        pytorchjob=True, trainer_mechanism="runtimePatches", forbidden={("list", "clustertrainingruntimes")}
    )
    found = client.discover()
    assert trainer_facts(found).runtimes is None and trainer_facts(found).torch_runtime is None
    assert choose_backend(found, "auto") == "pytorchjob"
    assert any("could not be listed" in note for note in found.notes)


@pytest.mark.parametrize("mechanism", trainjob.MECHANISMS)
def test_trainer_mechanism_from_the_served_schema(cluster, mechanism):
    fake, client = cluster(trainer_mechanism=mechanism)
    assert trainer_facts(client.discover()).mechanism == mechanism


def test_trainer_mechanism_from_the_public_configmap_then_the_crd(cluster):
    fake, client = cluster(trainer_mechanism="podSpecOverrides", trainer_version="v2.0.1", publish_openapi=False)
    found = client.discover()
    assert (trainer_facts(found).version, trainer_facts(found).mechanism) == ("v2.0.1", "podSpecOverrides")
    fake, client = cluster(trainer_mechanism="podTemplateOverrides", publish_openapi=False)
    found = client.discover()
    assert trainer_facts(found).version is None and trainer_facts(found).mechanism == "podTemplateOverrides"
    assert any(p.endswith("customresourcedefinitions/trainjobs.trainer.kubeflow.org") for _, p, _ in fake.requests)

"""The client through the real `kubernetes` package against the HTTP-level fake API server:
apply creates exactly the run's objects or none, runs are listed / read / deleted by their
labels, and every API failure reads as something a user can act on."""

import pytest

from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run

ALL_OPERATORS = {"pytorchjob": True, "trainer_mechanism": "runtimePatches"}


@pytest.fixture
def spec(tmp_path):
    return make_spec(tmp_path, nodes="2", gpus_per_node="1", queue="team-a-queue")


def render(spec, backend, cluster=None, name=None):
    run = make_run(spec, name=name)
    return run, render_run(spec, IMAGE, run, "ml", backend, cluster=cluster or trainer_cluster("runtimePatches"))


def test_in_cluster_service_account_is_used_without_a_kubeconfig(tmp_path, monkeypatch):
    from vdk.plugin.ml_training.k8s import kubeconfig

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("not checked until a request is made")
    (account / "namespace").write_text("training")
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT_DIR", account)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    in_pod = KubeClient()
    assert (in_pod.context, in_pod.namespace, in_pod.server) == (None, "training", "https://127.0.0.1:443")
    assert KubeClient(namespace="other").namespace == "other"
    (account / "token").unlink()
    with pytest.raises(MLTrainingError, match="service account cannot be used"):
        KubeClient()

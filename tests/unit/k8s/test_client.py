"""Where the client finds its cluster without contacting it: inside a pod without a kubeconfig, the
service account's token, CA and namespace (a namespace given wins); a service account without a token is
a clear error. (The client against the fake API server: tests/integration/k8s/test_client_apiserver.py.)"""

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.client import KubeClient


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

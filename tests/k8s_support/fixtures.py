"""pytest fixtures for the client tests: fake API servers and clients pointed at them."""

from __future__ import annotations

import pytest

from k8s_support.fake_apiserver import FakeKube
from vdk.plugin.ml_training.k8s.client import KubeClient


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """cluster(**FakeKube options) -> (fake, client): a started fake server and a KubeClient that
    reaches it through a kubeconfig (KUBECONFIG points at it, as for a user)."""
    started = []
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    def start(namespace: str = "ml", **options) -> tuple[FakeKube, KubeClient]:
        fake = FakeKube(**options).start()
        started.append(fake)
        path = fake.kubeconfig(tmp_path / f"kubeconfig-{len(started)}", namespace=namespace)
        monkeypatch.setenv("KUBECONFIG", str(path))
        return fake, KubeClient()

    yield start
    for fake in started:
        fake.stop()

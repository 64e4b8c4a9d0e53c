"""Which registries the image code may reach over plain HTTP: loopback ones, and those listed in
VDK_ML_TRAINING_INSECURE_REGISTRIES. (Building and pushing against a real registry:
tests/integration/image/test_registry_push_pull.py.)"""

from __future__ import annotations


def test_only_loopback_and_listed_registries_may_use_plain_http(monkeypatch):
    from vdk.plugin.ml_training.image.registry import allows_plain_http

    assert allows_plain_http("127.0.0.1:5000") and allows_plain_http("localhost:5000")
    assert not allows_plain_http("registry.internal:5000")
    monkeypatch.setenv("VDK_ML_TRAINING_INSECURE_REGISTRIES", "registry.internal:5000, other:80")
    assert allows_plain_http("registry.internal:5000") and not allows_plain_http("registry.internal")

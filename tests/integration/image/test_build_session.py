"""One command's registries (image/build_session.py), against the tests' registry behind a counting proxy: the base
is resolved once whoever asks and from however many threads, a failure to resolve it is the same error for every
asker without a second request, and a base in the target registry is read and pushed through one client."""

from __future__ import annotations

import threading

import pytest

from tests.support.base_image import image_job
from tests.support.registry import FaultProxy
from vdk.plugin.ml_training.image.build import assemble
from vdk.plugin.ml_training.image.build import push
from vdk.plugin.ml_training.image.build_errors import RegistryError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_session import BuildSession
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit


@pytest.fixture
def proxy(registry):
    counting = FaultProxy(registry.port)
    yield counting
    counting.stop()


def test_the_base_is_resolved_once_for_every_thread_that_asks(tmp_path, registry, base_image, proxy):
    spec = load_job_spec(image_job(tmp_path / "job", base_image.replace(registry.host, proxy.host)))
    with BuildSession(spec, f"{registry.host}/ml") as session:
        found: list = []
        threads = [threading.Thread(target=lambda: found.append(session.base())) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(found) == 4 and all(base is found[0] for base in found)
        assert found[0].reference.digest and found[0].reference.repository == "base/busybox"
        assert [method for method, _, _ in proxy.requests(path="/manifests/")] == ["GET"]
        assert len(session.clients) == 2 and not session.same_registry  # the base's registry, and the target's


def test_a_base_that_cannot_be_resolved_is_one_error_for_every_asker(tmp_path, registry, proxy):
    spec = load_job_spec(image_job(tmp_path / "job", f"{proxy.host}/base/busybox:no-such-tag"))
    with BuildSession(spec, None) as session:
        errors = []
        for _ in range(2):
            with pytest.raises(RegistryError, match="no-such-tag does not exist") as info:
                session.base()
            errors.append(info.value)
        assert errors[0] is errors[1]
        assert len(proxy.requests(path="/manifests/no-such-tag")) == 1
        assert session.target is None and session.clients == (session.base_client,)


def test_a_base_in_the_target_registry_is_read_and_pushed_through_one_client(tmp_path, registry, base_image, proxy):
    job = image_job(tmp_path / "job", base_image.replace(registry.host, proxy.host))
    spec = load_job_spec(job)
    with BuildSession(spec, f"{proxy.host}/ml") as session:
        assert session.same_registry and session.clients == (session.target,) == (session.base_client,)
        image = assemble(spec, f"{proxy.host}/ml", audit.collect(job), session, Progress())
        layers = session.tmp
        pushed = push(image, session, Progress())
    assert pushed.reference == image.reference and pushed.digest == image.digest  # the digest known before the push
    assert [method for method, _, _ in proxy.requests(path="^/v2/base/busybox/manifests/")] == ["GET"]
    assert {layer.action for layer in pushed.layers if layer.name == "base"} <= {"mounted", "present"}
    assert not layers.exists()  # the session's temporary directory goes with it

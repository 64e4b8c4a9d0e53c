"""A registry that misbehaves, through a fault-injecting loopback proxy in front of the real registry (Debian's
docker-registry): one that accepts connections and never answers, answers late, fails every upload with a
500, or asks for credentials; and a registry whose name does not resolve. Each push ends, within its bounds,
with one clear error (or succeeds, saying while it waits), and leaves no tag behind."""

from __future__ import annotations

import io
import socket
import time

import pytest
import requests

from tests.support.base_image import image_job
from tests.support.registry import Fault
from tests.support.registry import FaultProxy
from vdk.plugin.ml_training.image import RegistryAuthError
from vdk.plugin.ml_training.image import RegistryError
from vdk.plugin.ml_training.image import RegistryNameError
from vdk.plugin.ml_training.image import RegistryUnreachableError
from vdk.plugin.ml_training.image import RetryPolicy
from vdk.plugin.ml_training.image import StderrProgress
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.image import plan_image
from vdk.plugin.ml_training.image.build import PARALLEL_BLOBS
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit

pytestmark = pytest.mark.slow
ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
# Short timeouts, said early: what the defaults do in 30 s and 2 s, here in a second and a third of one.
QUICK = RetryPolicy(
    attempts=4, first_delay=0.01, max_delay=0.05, answer_seconds=1.0, notice_after=0.3, notice_every=0.4
)


@pytest.fixture
def proxy(registry):
    server = FaultProxy(registry.port)
    yield server
    server.stop()


def build(job, registry_host, retry=QUICK):
    shown = io.StringIO()
    try:
        image = build_and_push(
            load_job_spec(job), f"{registry_host}/ml", audit.collect(job), progress=StderrProgress(shown), retry=retry
        )
    finally:
        build.shown = shown.getvalue()  # what the user saw, also when it failed
    return image


def no_tag(registry, job) -> bool:
    planned = plan_image(load_job_spec(job), f"{registry.host}/ml", audit.collect(job)).reference
    tag = planned.rpartition(":")[2]
    url = f"{registry.url}/v2/ml/{job.name}/manifests/{tag}"
    return requests.get(url, headers={"Accept": ACCEPT}).status_code == 404


def test_a_registry_that_never_answers_ends_the_push_in_bounded_time_saying_that_it_waits(
    tmp_path, registry, base_image, proxy
):
    proxy.faults = [Fault("PUT", r"/blobs/uploads/", "hang", times=1000)]
    job = image_job(tmp_path / "silent-job", base_image)
    started = time.monotonic()
    with pytest.raises(RegistryUnreachableError) as caught:
        build(job, proxy.host)
    took = time.monotonic() - started
    problem = caught.value.problem
    assert f"{proxy.host} accepts connections but did not answer (upload " in problem, problem
    assert "within 1 s (2 attempts in " in problem, problem  # a request not answered is tried twice, not five times
    assert "stuck or overloaded" in caught.value.fix and "HTTPS_PROXY" in caught.value.fix
    assert f"  waiting for {proxy.host} to answer (upload " in build.shown, build.shown
    assert "giving up after 1 s" in build.shown
    hung = [path for method, path, status in proxy.log if status == -1]
    assert hung and len(hung) <= 2 * 3  # two attempts of each blob upload that started (at most 3 blobs)
    assert took < 60  # the defaults' old budget was five read timeouts of 300 s
    assert no_tag(registry, job)


def test_a_slow_registry_is_waited_for_and_the_wait_is_said(tmp_path, registry, base_image, proxy):
    proxy.faults = [Fault("PUT", r"/manifests/", "slow", seconds=1.5)]
    job = image_job(tmp_path / "slow-job", base_image)
    patient = RetryPolicy(attempts=4, first_delay=0.01, max_delay=0.05, answer_seconds=10, notice_after=0.3)
    image = build(job, proxy.host, retry=patient)
    assert proxy.faults[0].hits == 1
    assert [status for method, path, status in proxy.log if method == "PUT" and "/manifests/" in path] == [201]
    assert f"  waiting for {proxy.host} to answer (store manifest ml/slow-job:" in build.shown, build.shown
    assert image.digest.startswith("sha256:")


def test_a_push_past_its_deadline_stops_before_the_next_request(tmp_path, registry, base_image, proxy):
    proxy.faults = [Fault("HEAD", r"/blobs/", "slow", seconds=0.6, times=1000)]
    job = image_job(tmp_path / "late-job", base_image)
    short = RetryPolicy(answer_seconds=5, push_floor_seconds=0.5, push_bytes_per_second=1e12)
    with pytest.raises(RegistryUnreachableError) as caught:
        build(job, proxy.host, retry=short)
    assert f"the push to {proxy.host} did not finish within its deadline" in caught.value.problem
    assert "Nothing was tagged" in caught.value.problem
    assert "what was uploaded already is not sent again" in caught.value.fix
    assert not any(method == "PUT" and "/manifests/" in path for method, path, _ in proxy.log)
    assert no_tag(registry, job)


def test_a_500_on_every_blob_upload_is_retried_a_bounded_number_of_times(tmp_path, registry, base_image, proxy):
    proxy.faults = [Fault("PUT", r"/blobs/uploads/", "500", times=1000)]
    job = image_job(tmp_path / "failing-job", base_image)
    with pytest.raises(RegistryError) as caught:
        build(job, proxy.host)
    assert f"{proxy.host} kept failing to upload " in caught.value.problem
    assert "(4 attempts in " in caught.value.problem and "HTTP 500 UNKNOWN: injected failure" in caught.value.problem
    uploads = [path for method, path, status in proxy.log if method == "PUT" and status == 500]
    assert 4 <= len(uploads) <= 4 * 3  # four attempts of each blob that started
    assert no_tag(registry, job)


def test_a_401_is_an_authentication_error_at_once(tmp_path, registry, base_image, proxy):
    proxy.faults = [Fault("POST", r"/blobs/uploads/", "401", times=1000)]
    job = image_job(tmp_path / "private-job", base_image)
    with pytest.raises(RegistryAuthError) as caught:
        build(job, proxy.host)
    # the test registry speaks plain HTTP: its credentials would travel unencrypted, so none are sent
    assert f"{proxy.host} asks for credentials over plain HTTP" in caught.value.problem
    assert "serve the registry over HTTPS" in caught.value.fix
    posts = [path for method, path, status in proxy.log if method == "POST" and status == 401]
    assert 1 <= len(posts) <= 2 * 3  # no retries: the request and its authenticated repeat, per blob
    assert no_tag(registry, job)


@pytest.fixture
def lookups(monkeypatch):
    """The names looked up in DNS (socket.getaddrinfo, as called by urllib3)."""
    names: list[str] = []
    real = socket.getaddrinfo

    def counting(host, *args, **kwargs):
        names.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    return names


def test_a_base_registry_whose_name_does_not_resolve_fails_at_once_naming_what_to_set(tmp_path, registry, lookups):
    job = image_job(tmp_path / "offline-job", "mirror.vdk-test.invalid/pytorch/pytorch:2.13.0")
    with pytest.raises(RegistryNameError) as caught:
        build(job, registry.host)
    error = caught.value
    assert "the name mirror.vdk-test.invalid of registry mirror.vdk-test.invalid does not resolve" in error.problem
    assert "not retried" in error.problem
    assert "`base_image` in [ml-training] of config.ini (or VDK_ML_TRAINING_BASE_IMAGE)" in error.fix
    assert "mirror of Docker Hub" in error.fix and "docs/offline-registries.md" in error.fix
    assert lookups.count("mirror.vdk-test.invalid") == 1  # once: no retries


def test_a_target_registry_whose_name_does_not_resolve_fails_at_once_naming_the_registry_setting(
    tmp_path, base_image, lookups
):
    job = image_job(tmp_path / "lost-job", base_image)
    with pytest.raises(RegistryNameError) as caught:
        build(job, "registry.vdk-test.invalid:5000")
    assert "the name registry.vdk-test.invalid of registry registry.vdk-test.invalid:5000" in caught.value.problem
    assert "`registry` in [ml-training] of config.ini (or VDK_ML_TRAINING_REGISTRY)" in caught.value.fix
    assert "base_image" not in caught.value.fix
    # no retries: one lookup per request, and only the first requests were made (blobs are checked in parallel)
    assert 1 <= lookups.count("registry.vdk-test.invalid") <= PARALLEL_BLOBS

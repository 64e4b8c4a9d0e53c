"""What one `vdk deploy` reads, counted (the real vdk CLI, the tests' registry behind a counting proxy, the fake API
server, a real smoke run): config.ini once, the base reference parsed once, the job directory walked once, one
client per registry and the base's manifest requested once, although the pre-flight checks, the smoke run, the
build and the change detection all use them. The dry run reads the same once too."""

from __future__ import annotations

import sys

import pytest
import requests

from tests.integration.cli.test_deploy_command import deploy_job
from tests.support.registry import FaultProxy
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.image import code_manifest
from vdk.plugin.ml_training.image import registry as registry_client
from vdk.plugin.ml_training.job import config_file
from vdk.plugin.ml_training.job import image_reference
from vdk.plugin.ml_training.source import job_files

pytestmark = pytest.mark.usefixtures("isolated_environment")

PACKAGE = "vdk.plugin.ml_training"


class Reads:
    """Every reading of what a command may read more than once, counted where it happens."""

    def __init__(self, monkeypatch):
        self.configs: list = []  # config.ini read and parsed
        self.references: list[str] = []  # an image reference parsed
        self.walks: list = []  # the job directory walked (scan_job_dir)
        self.hashings: list = []  # the job's files hashed (code_manifest.file_digests)
        self.clients: list[str] = []  # a registry client made (its host)
        count = self._counting
        monkeypatch.setattr(config_file, "read_config", count(config_file.read_config, self.configs))
        self._everywhere(monkeypatch, "parse_reference", image_reference.parse_reference, self.references)
        self._everywhere(monkeypatch, "file_digests", code_manifest.file_digests, self.hashings)
        walk = job_files._walk

        def walked(directory, reldir, *rest):  # called again for every directory below: one walk starts at ""
            if not reldir:
                self.walks.append(directory)
            return walk(directory, reldir, *rest)

        monkeypatch.setattr(job_files, "_walk", walked)
        init = registry_client.RegistryClient.__init__

        def client(this, host, *args, **kwargs):
            self.clients.append(host)
            init(this, host, *args, **kwargs)

        monkeypatch.setattr(registry_client.RegistryClient, "__init__", client)

    def _everywhere(self, monkeypatch, name: str, function, calls: list) -> None:
        """`function` counted wherever the plugin imported it as `name` (its own module too: later imports)."""
        counted = self._counting(function, calls)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith(PACKAGE) and getattr(module, name, None) is function:
                monkeypatch.setattr(module, name, counted)

    @staticmethod
    def _counting(function, calls: list):
        def counted(first, *args, **kwargs):
            calls.append(first)
            return function(first, *args, **kwargs)

        return counted

    def clear(self) -> None:
        for calls in (self.configs, self.references, self.walks, self.hashings, self.clients):
            calls.clear()


@pytest.fixture
def proxy(registry):
    counting = FaultProxy(registry.port)  # no fault: it forwards, and logs every request
    yield counting
    counting.stop()


def test_one_deploy_reads_config_the_base_and_the_job_once(tmp_path, registry, base_image, proxy, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    base = base_image.replace(registry.host, proxy.host)  # the base, read through the counting proxy
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")  # pushed to the registry itself
    job = deploy_job(tmp_path, base, name="counted-job")
    reads = Reads(monkeypatch)

    result = vdk("deploy", "-p", str(job), "-r", "counted")

    assert result.exit_code == 0, result.output
    assert "smoke run PASSED" in result.stderr and len(fake.run_objects()) == 2
    assert "Attached to the image: SBOM and provenance (unsigned" in result.stderr  # they name the same files
    assert len(reads.configs) == 1  # the hook deciding it is for ML, the settings, the spec
    assert reads.references == [base]  # parsed once, held by the spec (checks, build, base table, attestations)
    assert len(reads.walks) == 1  # the smoke run's working directory, the code layer, the code manifest
    assert len(reads.hashings) == 1  # the run record's code manifest, the change detection, the attestations
    assert sorted(reads.clients) == sorted([proxy.host, registry.host])  # one per registry: checks, build, push
    manifests = proxy.requests(path=r"^/v2/base/busybox/manifests/")
    assert [(method, status) for method, _, status in manifests] == [("GET", 200)]  # checked and built from one read
    assert len(proxy.requests("GET", f"^/v2/base/busybox/blobs/{config_digest(registry)}$")) == 1  # its config too

    proxy.log.clear()
    reads.clear()
    dry = vdk("deploy", "-p", str(job), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert len(reads.configs) == 1 and reads.references == [base] and len(reads.walks) == 1
    assert reads.clients == [proxy.host] and len(proxy.requests(path=r"/manifests/")) == 1


def test_a_base_in_the_target_registry_is_read_and_pushed_through_one_client(
    tmp_path, registry, base_image, proxy, cluster, monkeypatch
):
    cluster(pytorchjob=True)
    base = base_image.replace(registry.host, proxy.host)
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{proxy.host}/team")
    job = deploy_job(tmp_path, base, name="one-client-job")
    reads = Reads(monkeypatch)

    result = vdk("deploy", "-p", str(job), "--skip-smoke", "-o", "json")

    assert result.exit_code == 0, result.output
    assert reads.clients == [proxy.host]
    assert [method for method, _, _ in proxy.requests(path=r"^/v2/base/busybox/manifests/")] == ["GET"]
    # the base's layers are mounted from its repository (the same registry), not read and sent again
    assert proxy.requests("POST", r"/v2/team/one-client-job/blobs/uploads/\?mount=")
    assert proxy.requests("PUT", r"/v2/team/one-client-job/manifests/")


def config_digest(registry) -> str:
    """The digest of the test base's config, asked of the registry itself (not through the proxy)."""
    accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
    answer = requests.get(f"{registry.url}/v2/base/busybox/manifests/1", headers={"Accept": accept}, timeout=10)
    return answer.json()["config"]["digest"]

"""End to end through the test VDK Control Service with its builder as the service runs builders: a container
(podman, the tests' private store) of a Debian base with git, running this project's builder entry point, which
clones the job from the service's git server, builds the image daemonlessly and pushes it to the tests' registry
under the tag the service's CronJob runs; then an execution whose launcher runs the run of that very image (by the
digest its pod pulled), the run's pods as local processes."""

from __future__ import annotations

import json

import pytest
from tests.support.control_service_pods import podman_builder
from tests.support.debian_base import DEBIAN_ENV
from tests.support.debian_base import debian_rootfs
from tests.support.debian_base import import_image
from tests.support.job_controller import LocalJobController
from tests.support.jobs import cs_job
from tests.support.vdk_cli import vdk

from vdk.plugin.ml_training.k8s.client import KubeClient

pytestmark = pytest.mark.usefixtures("isolated_environment")


@pytest.fixture(scope="session")
def builder_image(podman_root) -> str:
    """Debian bookworm with python3 and git (mmdebstrap, cached per machine), imported into podman."""
    rootfs = debian_rootfs(("python3", "git", "ca-certificates"))
    return import_image(podman_root, rootfs, f"vdk-test-builder:{rootfs.key}", DEBIAN_ENV)


def test_a_deploy_built_in_the_builders_container_runs_its_image(
    control_service, tmp_path, podman_root, builder_image, registry
):
    service, fake = control_service(builder=podman_builder(podman_root, builder_image, tmp_path / "builder-cache"))
    job = cs_job(tmp_path / "repo", args="--steps 2")
    controller = LocalJobController(fake, job, {}).start()
    try:
        result = vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke", "-o", "json")
        assert result.exit_code == 0, f"{result.output}\n{service.builds[-1].log if service.builds else ''}"
        deployed = json.loads(result.stdout)
        execution = service.wait_finished(deployed["execution_id"])
    finally:
        controller.stop()
    build = service.builds[-1]
    assert build.result == "success" and f"tagged {service.registry}/cs-train:{deployed['job_version']}" in build.log
    assert execution.status == "succeeded", service.log(execution.id)
    image = KubeClient().get_run(deployed["run"])["spec"]["template"]["spec"]["containers"][0]["image"]
    pushed = build.log.split("Pushed ", 1)[1].split(" ", 1)[0]
    assert image == pushed  # the run runs what the builder's container pushed, by digest

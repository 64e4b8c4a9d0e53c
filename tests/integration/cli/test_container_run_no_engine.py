"""`vdk run --container` (and VDK_ML_TRAINING_RUN_MODE=container) without a container engine: a clear error
before anything is built. The runs themselves: functional_tests/test_container_run.py."""

from __future__ import annotations

from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from tests.support.programs import path_with
from vdk.plugin.ml_training import plugin


def test_vdk_run_container_without_an_engine_stops_before_building(tmp_path, monkeypatch, isolated_environment):
    job = write_job(tmp_path, "no-engine", ml={"gpus_per_node": "0"})
    monkeypatch.setenv("PATH", path_with(tmp_path / "none"))
    result = CliEntryBasedTestRunner(plugin).invoke(["run", "--container", str(job)])
    assert result.exit_code != 0
    assert "neither is installed" in str(result.exception) and "install podman" in str(result.exception)
    monkeypatch.setenv("VDK_ML_TRAINING_RUN_MODE", "container")  # the same, from the environment
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert "neither is installed" in str(result.exception)

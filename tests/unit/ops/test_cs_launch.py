"""What the launcher makes of the execution it is (ops/cs_launch.py): the arguments it was started with
(`vdk execute --start --arguments '{...}'`) as [ml-training] keys for its run only, and where the job's files are."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops import cs_launch


def execution(arguments) -> cs_launch.Execution:
    return cs_launch.Execution("mnist-ddp-1747130400", "mnist-ddp-1747130400-ab3cd", "mnist-ddp", "ml", arguments)


def test_the_executions_arguments_are_keys_for_its_run_only():
    overrides = execution({"nodes": 2, "gpus_per_node": "4", "args": "--lr 1e-3", "if_changed": True}).overrides()
    assert overrides == {"nodes": "2", "gpus_per_node": "4", "if_changed": "true", "args": "--lr 1e-3"}
    assert execution({}).overrides() == {}
    with pytest.raises(MLTrainingError, match="arguments name 'nodse', which is not a key of") as raised:
        execution({"nodse": "2"}).overrides()
    assert raised.value.fix == "did you mean 'nodes'?"


def test_arguments_that_are_not_a_json_object_are_refused():
    assert cs_launch.parse_arguments(None) == {} and cs_launch.parse_arguments('{"nodes": "2"}') == {"nodes": "2"}
    with pytest.raises(MLTrainingError, match="not JSON"):
        cs_launch.parse_arguments("{nodes: 2")
    with pytest.raises(MLTrainingError, match="not a JSON object"):
        cs_launch.parse_arguments('["--lr", "1e-3"]')


def test_outside_a_job_image_the_job_is_the_directory_vdk_was_given(tmp_path):
    assert cs_launch.job_directory(tmp_path / "mnist-ddp") == tmp_path / "mnist-ddp"

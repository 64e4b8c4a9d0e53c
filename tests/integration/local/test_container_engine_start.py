"""The container engine of `vdk run --container` when it is started: one that does not answer (the docker
command line without a daemon) says so and what to do. (Which engine is chosen, and its options:
tests/unit/local/test_container_engine.py.)"""

from __future__ import annotations

import shutil

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.local.container_engine import find_engine


@pytest.mark.skipif(shutil.which("docker") is None, reason="the docker command line is not installed")
def test_an_engine_that_does_not_answer_says_so(tmp_path):
    engine = find_engine("docker")
    try:
        engine.check()
    except MLTrainingError as e:  # here: the docker command line without a daemon
        assert e.problem.startswith("the container engine `docker` does not work: ")
        assert "start it (for Docker: its daemon), or use podman" in e.fix
    else:
        pytest.skip("this machine's Docker daemon answers")

"""The container engine could not start the job's container: named as the engine's failure with the fix for what
it said, not as "torchrun failed before any rank started"."""

import dataclasses

import pytest

from tests.support.local_outcomes import make_run
from vdk.plugin.ml_training.diagnosis import engine
from vdk.plugin.ml_training.host_limits import host_limits
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.local.outcome import evidence

RLIMIT = (
    "Error: runc: runc create failed: unable to start container process: error during container init: error setting "
    "rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied"
)


def engine_run(tmp_path, said: str, exit_code: int = 126, engine_name: str = "podman"):
    run = make_run(tmp_path, {}, agent_log=f"{said}\n", exit_code=exit_code)
    return dataclasses.replace(run, engine=engine_name)


def test_an_engine_that_cannot_set_limits_is_named_with_this_machine_s_limits(tmp_path):
    outcome = analyse(engine_run(tmp_path, RLIMIT))
    assert outcome.headline == f"podman could not start the job's container (exit code 126): {RLIMIT}"
    finding = engine.why_failed(evidence(outcome))
    assert finding.what == f"podman could not start the job's container (no rank ran): {RLIMIT}"
    assert "VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS='" in finding.fix
    assert " ".join(host_limits().ulimit_options()) in finding.fix
    assert "torchrun" not in finding.what


@pytest.mark.parametrize(
    ("said", "fix"),
    [
        ("Error: unable to find network with name or ID x: network not found", "--network host"),
        ("Error: crun: creating cgroup directory `/sys/fs/cgroup/x`: No such file", "--cgroup-manager cgroupfs"),
        ("Error: kernel does not support overlay fs: 'overlay' is not supported", "--storage-driver vfs"),
        (
            "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: x.",
            "see docker's message",
        ),
        (
            "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
            None,
        ),
    ],
)
def test_each_engine_message_gets_its_fix(tmp_path, said, fix):
    engine_name = "docker" if said.startswith("docker") else "podman"
    outcome = analyse(engine_run(tmp_path, said, 125, engine_name))
    finding = engine.why_failed(evidence(outcome))
    if fix is None:  # not an error line the engine prints when it cannot create a container
        assert "could not start the job's container" not in finding.what
        return
    assert finding.what.startswith(f"{engine_name} could not start the job's container (no rank ran): ")
    assert fix in finding.fix


def test_a_run_on_this_machine_is_not_blamed_on_an_engine(tmp_path):
    run = make_run(tmp_path, {}, agent_log=f"{RLIMIT}\n", exit_code=1)  # no engine
    outcome = analyse(run)
    assert outcome.headline == "torchrun failed before any rank started (exit code 1)"
    assert "could not start the job's container" not in engine.why_failed(evidence(outcome)).what

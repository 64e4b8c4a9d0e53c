"""End to end on the local cluster (tests/support/local_cluster.py): the examples built by the real
`vdk deploy --build-only` onto a plain Debian base (torch comes in through requirements.txt), rendered
by `vdk deploy --dry-run` for each backend, and run as the pods each controller would create: one
container per node, 2 nodes of 2 processes (world size 4), on the host network, CPU only.

The training code is the examples' own. Their config.ini is the example's with nodes, processes and
resources for this machine, plus two runtime settings in [ml-training.env]: VDK_ML_TRAINING_ADAPT_TO_CPU
(the code hard-codes NCCL and CUDA) and VDK_ML_TRAINING_PARAMETER_CHECKSUM (each rank prints a digest of
its parameters when the script ends: equal digests on all four ranks mean the gradients were averaged
across the two containers)."""

from __future__ import annotations

import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.support import teardown_crash
from tests.support.e2e import TORCH_REQUIREMENT
from tests.support.e2e import build_only
from tests.support.e2e import dry_run
from tests.support.e2e import example_job
from tests.support.e2e import vdk_environment
from tests.support.job_trees import write
from tests.support.local_cluster import LocalCluster
from tests.support.rendered_runs import mappings

from vdk.plugin.ml_training.local.launcher import free_port
from vdk.plugin.ml_training.runtime.board_events import BOARD_DIR
from vdk.plugin.ml_training.runtime.checksum import parse_checksums
from vdk.plugin.ml_training.runtime.progress_lines import MARK as PROGRESS

pytestmark = pytest.mark.slow

WORLD = {"nodes": "2", "procs_per_node": "2", "gpus_per_node": "0", "cpu": "1", "memory": "2Gi"}
RUNTIME = {"VDK_ML_TRAINING_ADAPT_TO_CPU": "1", "VDK_ML_TRAINING_PARAMETER_CHECKSUM": "1"}
# examples/ddp-nccl: 4096 samples, batch 32, a DistributedSampler over 4 ranks: 32 steps per epoch
DDP_STEPS = 32
# examples/hf-trainer: 2048 samples, 16 per device, 4 ranks: 32 steps per epoch
HF_STEPS = 32
# After one replica is killed, the other's processes must notice (a broken connection) and end by then.
STOP_WITHIN_SECONDS = 60
# Beside the example in its image: DDP on gloo chosen by the script itself (no CPU adaptations), whose ranks load
# a library that aborts their process's teardown once they have trained (tests/support/teardown_crash.py).
ENDS_WELL = "ends_well.py"
ENDS_WELL_STEPS = 2
# Runs of the plain Job whose both containers must end with 0, though every rank's teardown would abort (without
# the runtime's end, gloo's threads alone failed 1 run in 9 so).
RUNS_THAT_END_WELL = 3


@pytest.fixture(scope="module")
def env(registry, local_bases, podman_root, tmp_path_factory):
    return vdk_environment(registry.host, podman_root, tmp_path_factory.mktemp("e2e-env"))


@pytest.fixture(scope="module")
def cluster(podman_root, tmp_path_factory):
    local = LocalCluster(podman_root, tmp_path_factory.mktemp("local-cluster"))
    yield local
    local.remove_images()


@pytest.fixture(scope="module")
def ddp_job(local_bases, env, tmp_path_factory):
    """examples/ddp-nccl on the Debian base, built and pushed once by `vdk deploy --build-only`; beside the
    example's code, ENDS_WELL and what it needs. Built for runs with an output claim (so the image has the writer
    of their TensorBoard event files)."""
    job = example_job(
        "ddp-nccl",
        tmp_path_factory.mktemp("jobs"),
        {**WORLD, "base_image": local_bases.debian, "args": "--epochs 1 --batch-size 32"},
        RUNTIME,
        [TORCH_REQUIREMENT],
    )
    for name, content in teardown_crash.job_files(job, teardown_crash.DDP, ENDS_WELL).items():
        write(job, name, content)
    image = build_only(job, {**env, "VDK_ML_TRAINING_OUTPUT_PVC": "ml-outputs"})
    return job, image


def _assert_trained_as_one(result, steps: int) -> None:
    assert result.succeeded, result.outputs()
    assert [r.exit_code for r in result.replicas] == [0, 0]
    checksums = parse_checksums(result.outputs().splitlines())
    assert sorted(checksums) == [0, 1, 2, 3], result.outputs()
    assert {c.steps for c in checksums.values()} == {steps}, checksums
    assert len({c.sha256 for c in checksums.values()}) == 1, checksums  # all-reduced across the containers
    assert "script=finished" in result.replicas[0].output()  # rank 0's last progress line


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob", "job"])
def test_the_ddp_example_trains_as_one_world_on_every_backend(backend, ddp_job, env, cluster, trainer_status_server):
    job, image = ddp_job
    manifests = dry_run(job, backend, {**env, "VDK_ML_TRAINING_OUTPUT_PVC": "ml-outputs"})  # as built
    training = [c for c in _containers(manifests[0]) if c.get("image")]
    assert {c["image"] for c in training} == {image["tag_reference"]}  # what was pushed, by its content tag
    status = None
    if backend == "trainjob":  # with Trainer's TrainJobStatus gate on: rank 0 posts its progress to the TrainJob
        meta = manifests[0]["metadata"]
        status = trainer_status_server(namespace=meta.get("namespace", "default"), trainjob=meta["name"])
    result = cluster.run(manifests, backend, free_port(), timeout=900, trainer_status=status)
    _assert_trained_as_one(result, DDP_STEPS)
    if status is not None:
        posted = [{m["name"]: m["value"] for m in s["metrics"]} for s in status.accepted()]
        assert posted and [p.code for p in status.posts] == [200] * len(posted), status.posts
        assert (posted[-1]["current_step"], posted[-1]["script"]) == (str(DDP_STEPS), "finished")


def test_ranks_that_finished_end_well_run_after_run_whatever_their_teardown_does(ddp_job, env, cluster):
    """Issue 40: the plain Job's two containers of two ranks each, whose every rank aborts in its teardown once
    it has trained, end with 0, run after run, trained as one world, with what only each rank's end writes written
    (into the output claim, its working directory)."""
    job, _ = ddp_job
    manifests = dry_run(job, "job", {**env, "VDK_ML_TRAINING_OUTPUT_PVC": "ml-outputs"})
    container = manifests[0]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = [ENDS_WELL if part == "train.py" else part for part in container["command"]]
    without = "VDK_ML_TRAINING_ADAPT_TO_CPU"  # whose end skipped the teardown before: the script chose gloo itself
    container["env"] = [e for e in container["env"] if e["name"] != without] + [{"name": "EVIDENCE_DIR", "value": "."}]
    outputs = cluster.workdir / "claims" / "ml-outputs" / manifests[0]["metadata"]["name"]
    for _ in range(RUNS_THAT_END_WELL):
        result = cluster.run(manifests, "job", free_port(), timeout=600)
        _assert_trained_as_one(result, ENDS_WELL_STEPS)  # both containers exited with 0
        said = result.outputs()
        assert teardown_crash.TEARDOWN_ABORT not in said and "exit barrier" not in said, said
        for rank in range(4):
            assert f"rank-{rank}: the script returns" in said, said
            assert teardown_crash.left_over(outputs, f"rank-{rank}") == teardown_crash.LEFT_OVER, said


def test_a_killed_replica_fails_the_run_and_the_other_stops_by_itself(ddp_job, env, cluster, tmp_path):
    job, _ = ddp_job
    manifests = dry_run(job, "job", {**env, "VDK_ML_TRAINING_OUTPUT_PVC": "ml-outputs"})  # as built
    _set_args(manifests, "--epochs 200 --batch-size 32")  # long enough to be killed mid-run
    running = cluster.start(manifests, "job", free_port())
    assert running.wait_for(0, lambda out: PROGRESS in out, timeout=600), running.replicas[0].output()
    killed_at = running.kill(1)
    result = running.wait(timeout=300)
    assert not result.timed_out, result.outputs()
    survivor = result.replicas[0]
    assert survivor.exit_code not in (0, None), result.outputs()
    assert survivor.ended is not None and survivor.ended - killed_at < STOP_WITHIN_SECONDS, result.outputs()
    assert result.replicas[1].exit_code == 137
    blamed, termination = result.first_failure()  # as `vdk show` names it
    ended = [(r.pod.name, r.exit_code, r.ended_at) for r in result.replicas]
    assert (blamed.pod, blamed.rank, termination.signal) == (result.replicas[1].pod.name, "1", "SIGKILL"), ended


def test_a_checkpoint_in_the_output_volume_survives_a_kill_and_the_restarted_replica_resumes(ddp_job, env, cluster):
    """output_pvc: the run's directory of the claim (a host directory here) is the pods' working directory, so
    the example's snapshot.pt lands there, and the pod restarted after a SIGKILL resumes from it. Rank 0's series
    are there too, as TensorBoard event files, written as it went."""
    job, _ = ddp_job
    manifests = dry_run(job, "pytorchjob", {**env, "VDK_ML_TRAINING_OUTPUT_PVC": "ml-outputs"})
    replicas = manifests[0]["spec"]["pytorchReplicaSpecs"]
    del replicas["Worker"]  # one node is enough to see a restart: lean on CI time
    command = replicas["Master"]["template"]["spec"]["containers"][0]["command"]
    command[command.index("train.py") + 1 :] = ["--epochs", "200", "--batch-size", "32"]
    run = manifests[0]["metadata"]["name"]
    outputs = cluster.workdir / "claims" / "ml-outputs" / run
    running = cluster.start(manifests, "pytorchjob", free_port())
    written = lambda out: (outputs / "snapshot.pt").exists() and "epoch 1 " in out and _events_flushed(outputs)  # noqa: E731
    assert running.wait_for(0, written, timeout=600), running.replicas[0].output()
    running.kill(0)
    running.wait_for(0, lambda out: False, timeout=60)  # until it has ended
    assert running.replicas[0].exit_code == 137
    assert (outputs / "snapshot.pt").is_file() and (outputs / "train.py").is_symlink()  # outputs beside linked code
    events = EventAccumulator(str(outputs / BOARD_DIR))  # rank 0's series, on the claim, as TensorBoard reads them
    events.Reload()
    losses = events.Scalars("vdk/loss")
    assert losses and losses[0].step == 1 and all(e.value > 0 for e in losses), events.Tags()
    again = running.restart(0)
    resumed = re.compile(r"Resuming training from snapshot at epoch (\d+)")
    assert running.wait_for(again, lambda out: bool(resumed.search(out)), timeout=600), running.replicas[again].output()
    assert int(resumed.search(running.replicas[again].output()).group(1)) >= 1
    running.kill(again)
    running.wait(timeout=60)


def test_the_hugging_face_example_trains_as_one_world(local_bases, env, cluster, tmp_path):
    job = example_job(
        "hf-trainer",
        tmp_path,
        {**WORLD, "base_image": local_bases.debian, "args": "--output-dir outputs --epochs 1"},
        RUNTIME,
        [TORCH_REQUIREMENT, "transformers>=5,<6", "accelerate"],
    )
    build_only(job, env, "--skip-smoke")  # its smoke check is the unit tests'
    cluster.remove_images()  # the DDP example's image is done with: with vfs, images are gigabytes
    result = cluster.run(dry_run(job, "pytorchjob", env), "pytorchjob", free_port(), timeout=900)
    _assert_trained_as_one(result, HF_STEPS)


def _events_flushed(outputs) -> bool:
    """Whether rank 0's event files hold points (tensorboardX writes them at least every 10 s): more than the
    header of an event file."""
    return sum(p.stat().st_size for p in (outputs / BOARD_DIR).glob("events.out.*")) > 500


def _containers(main: dict) -> list[dict]:
    found = []
    for value in mappings(main):
        if "containers" in value and isinstance(value["containers"], list):
            found.extend(value["containers"])
        if "trainer" in value and isinstance(value["trainer"], dict):
            found.append(value["trainer"])
    return found


def _set_args(manifests: list[dict], args: str) -> None:
    """Other script arguments in a plain Job's rendered command (where `args` of [ml-training] goes): the
    same image, trained longer."""
    container = manifests[0]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    at = command.index("train.py") + 1
    container["command"] = [*command[:at], *args.split()]

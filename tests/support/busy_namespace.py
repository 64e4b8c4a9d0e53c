"""A busy namespace for the control-plane tests and benchmark (benchmarks/control_plane.py): many runs
of many jobs and teams on every backend, as deploys and operators leave them (the run's objects and
record as rendered, the operator's status, a pod per node of the running ones), and one large run with
a pod per node, running or failed by a stalled rank."""

from __future__ import annotations

from pathlib import Path

from tests.support import cluster_state as cs
from tests.support.fake_apiserver import FakeKube
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training.k8s.creation import owned_by
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.runtime import progress_lines
from vdk.plugin.ml_training.runtime.watchdog import Stall

BACKENDS = ("pytorchjob", "trainjob", "job")
PLURALS = {"PyTorchJob": "pytorchjobs", "TrainJob": "trainjobs", "Job": "jobs", "Service": "services"}
PLURALS["ConfigMap"] = "configmaps"
BIG_JOB = "big-pretrain"
STALLED_RANK = 5


def kube(**options) -> FakeKube:
    """A fake cluster that serves all three backends."""
    return FakeKube(pytorchjob=True, trainer_mechanism="runtimePatches", **options)


def deploy(fake: FakeKube, spec, backend: str, created: str) -> dict:
    """The run's objects as `vdk deploy` creates them (its record, the main object owned by it, the Service; then
    the record owned by the main object too: k8s/creation.py), created at `created`."""
    objects = render_run(spec, IMAGE, make_run(spec), "ml", backend, trainer_cluster("runtimePatches"))
    for obj in objects:
        obj["metadata"]["creationTimestamp"] = created
    main, *others = objects
    (record,) = [o for o in others if o["kind"] == "ConfigMap"]
    record = fake.add("configmaps", record)
    main = fake.add(PLURALS[main["kind"]], owned_by(main, record))
    for obj in others:
        if obj["kind"] != "ConfigMap":
            fake.add(PLURALS[obj["kind"]], owned_by(obj, main))
    owners = owned_by(record, main)["metadata"]["ownerReferences"]
    with fake._lock:
        fake.objects[("v1", "configmaps", "ml", record["metadata"]["name"])]["metadata"]["ownerReferences"] = owners
    return main


def populate(fake: FakeKube, root: Path, runs: int = 1000, jobs: int = 50, teams: int = 5) -> list[str]:
    """`runs` runs of `jobs` jobs (job i on backend i % 3, of team i % `teams`), a minute apart; the latest
    run of every job runs on 2 nodes (with their pods), the others succeeded or failed. The job names."""
    names = []
    specs = []
    for j in range(jobs):
        name = f"job-{j:02d}"
        names.append(name)
        specs.append(make_spec(root / name, name=name, team=f"team-{j % teams}", nodes="2", gpus_per_node="8"))
    for i in range(runs):
        j = i % jobs
        backend = BACKENDS[j % len(BACKENDS)]
        start = i * 60
        main = deploy(fake, specs[j], backend, cs.ts(start))
        latest = i >= runs - jobs
        phase = "Running" if latest else ("Failed" if i % 7 == 0 else "Succeeded")
        fake.set_status(PLURALS[main["kind"]], main["metadata"]["name"], operator_status(backend, phase, start))
        if latest:
            for rank in range(2):
                fake.add("pods", cs.rank_pod(main, backend, rank, cs.running()))
    return names


def operator_status(backend: str, phase: str, started: float, ended: float | None = None, nodes: int = 2) -> dict:
    """The status each operator writes on a run's main object (Running with every node's pod running,
    Succeeded or Failed), with the times it records; `started`/`ended` are seconds after cs.T0."""
    ended = started + 600 if ended is None and phase != "Running" else ended
    condition = {"Running": "Running", "Succeeded": "Succeeded", "Failed": "Failed"}[phase]
    if backend != "pytorchjob" and phase == "Succeeded":
        condition = "Complete"
    at = cs.ts(ended if ended is not None else started)
    status: dict = {"conditions": [{"type": condition, "status": "True", "lastTransitionTime": at}]}
    if backend == "pytorchjob":
        status["startTime"] = cs.ts(started)
        if phase == "Running":
            status["replicaStatuses"] = {"Master": {"active": 1}, "Worker": {"active": nodes - 1}}
        else:
            status["completionTime"] = at
    elif backend == "job":
        status["startTime"] = cs.ts(started)
        if phase == "Running":
            status.update(active=nodes, ready=nodes)
        elif phase == "Succeeded":
            status.update(completionTime=at, succeeded=nodes)
        else:
            status["failed"] = 1
    elif phase == "Running":  # a TrainJob's JobSet counts its child Jobs
        status["jobsStatus"] = [{"name": "node", "active": 1, "ready": 1}]
    return status


def big_run(fake: FakeKube, root: Path, nodes: int = 64, failed: bool = False, name: str = BIG_JOB) -> dict:
    """A PyTorchJob of job `name` on `nodes` nodes of 8 GPUs with a pod per node and rank 0's progress lines;
    `failed`: rank STALLED_RANK was stopped by the stall watchdog and the others by torchrun afterwards."""
    spec = make_spec(root / name, name=name, team="team-0", nodes=str(nodes), gpus_per_node="8")
    main = deploy(fake, spec, "pytorchjob", cs.ts(0))
    fake.set_status("pytorchjobs", main["metadata"]["name"], operator_status("pytorchjob", "Running", 0, nodes=nodes))
    where = ['  File "/opt/vdk-ml/job/train.py", line 42, in train', "    batch = next(batches)"]
    stall = Stall(str(STALLED_RANK * 8), 1800, 1234, None, [("MainThread", where)])
    for rank in range(nodes):
        if not failed:
            state = cs.running()
        elif rank == STALLED_RANK:
            state = cs.terminated(1, finished=2000, message="\n".join(stall.lines()))
        else:
            state = cs.terminated(143, finished=2010)
        pod = fake.add("pods", cs.rank_pod(main, "pytorchjob", rank, state))
        log = f"node {rank} training\n"
        if rank == 0:
            log += "".join(f"{progress_lines.format_line(10 * s, 12000, 3.0 / s)}\nstep {s}\n" for s in range(1, 124))
        if failed and rank == STALLED_RANK:
            log += "\n".join(stall.lines()) + "\n"
        fake.set_log(pod["metadata"]["name"], "pytorch", log)
    if failed:
        status = operator_status("pytorchjob", "Failed", 0, 2010, nodes=nodes)
        status["conditions"][0]["message"] = "PyTorchJob failed because 1 Worker replica(s) failed."
        fake.set_status("pytorchjobs", main["metadata"]["name"], status)
    return main

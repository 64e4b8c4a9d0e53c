"""The local cluster's controllers (controllers.py, local_cluster.py) make of each backend's rendered
manifests the pods the real controller would: names, hostnames, and the environment torch's launcher
reads (PET_*), every field reference resolved."""

from __future__ import annotations

from tests.support.controllers import pods
from tests.support.jobs import write_job
from tests.support.local_cluster import expand
from tests.support.local_cluster import resolve_env
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.source import audit

IMAGE = layout.JobImage("127.0.0.1:5000/e2e/demo:abc", "python3")
PORT = 31234
LAUNCHER = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")


def _pods(tmp_path, backend: str):
    job = write_job(
        tmp_path,
        "demo",
        ml={"nodes": "2", "procs_per_node": "2", "gpus_per_node": "0", "memory": "2Gi"},
        env={"MY_SETTING": "1"},
    )
    spec = load_job_spec(job)
    run = RunInfo.create(spec, audit.collect(job))
    manifests = render_run(spec, IMAGE, run, "ml", backend)
    return run.name, pods(manifests, backend, PORT)


def _launcher_env(pod) -> dict[str, str]:
    env = resolve_env(pod.container["env"], pod)
    return {name: env[name] for name in LAUNCHER}


def test_pytorchjob_master_and_worker_as_the_training_operator_makes_them(tmp_path):
    name, (master, worker) = _pods(tmp_path, "pytorchjob")
    assert (master.name, worker.name) == (f"{name}-master-0", f"{name}-worker-0")
    for rank, pod in enumerate((master, worker)):
        env = resolve_env(pod.container["env"], pod)
        assert _launcher_env(pod) == {
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "2",
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": f"{name}-master-0",
            "PET_MASTER_PORT": str(PORT),
        }
        assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"]) == (
            f"{name}-master-0",
            str(PORT),
            "4",
            str(rank),
        )
        assert env["MY_SETTING"] == "1" and env["PYTHONPATH"] == layout.PYTHONPATH
        assert pod.container["command"][0] == "python3" and pod.container["workingDir"] == layout.JOB_DIR
    assert master.labels["training.kubeflow.org/job-role"] == "master"
    assert worker.dns_names == [worker.name] and worker.restart_policy == "OnFailure"


def test_trainjob_nodes_as_trainers_torch_plugin_and_jobset_make_them(tmp_path):
    name, nodes = _pods(tmp_path, "trainjob")
    assert [p.hostname for p in nodes] == [f"{name}-node-0-0", f"{name}-node-0-1"]
    for rank, pod in enumerate(nodes):
        env = resolve_env(pod.container["env"], pod)
        assert _launcher_env(pod) == {
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "2",
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
            "PET_MASTER_PORT": str(PORT),
        }
        assert env["JOB_COMPLETION_INDEX"] == str(rank) and env["MY_SETTING"] == "1"
        assert "workingDir" not in pod.container  # a TrainJob keeps the image's
        assert [m["mountPath"] for m in pod.container["volumeMounts"]] == ["/dev/shm"]
        assert f"{pod.hostname}.{name}" in pod.dns_names


def test_trainjob_nodes_with_the_trainjobstatus_gate_get_the_status_server_s_endpoint_token_and_ca(tmp_path):
    job = write_job(tmp_path, "demo", ml={"nodes": "2", "procs_per_node": "1", "gpus_per_node": "0"})
    spec = load_job_spec(job)
    run = RunInfo.create(spec, audit.collect(job))
    manifests = render_run(spec, IMAGE, run, "ml", "trainjob")
    server = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
    for pod in pods(manifests, "trainjob", PORT, status_url=server):
        env = resolve_env(pod.container["env"], pod)
        assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
            f"{server}/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/{run.name}/status"
        )
        assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == "/var/run/secrets/kubeflow/trainer/ca.crt"
        assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/kubeflow/trainer/token"
        mounts = {m["name"]: m for m in pod.container["volumeMounts"]}
        assert mounts["kubeflow-trainer-token"] == {
            "name": "kubeflow-trainer-token",
            "mountPath": "/var/run/secrets/kubeflow/trainer",
            "readOnly": True,
        }
        (volume,) = [v for v in pod.volumes if v["name"] == "kubeflow-trainer-token"]
        token, ca = volume["projected"]["sources"]
        assert (
            token["serviceAccountToken"]["audience"]
            == f"trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/{run.name}/status"
        )
        assert ca["configMap"]["name"] == f"{run.name}-tls-config"
    assert all("KUBEFLOW_TRAINER_SERVER_URL" not in str(p.container) for p in pods(manifests, "trainjob", PORT))


def test_the_indexed_job_s_pods_take_their_rank_from_the_completion_index(tmp_path):
    name, nodes = _pods(tmp_path, "job")
    assert [p.hostname for p in nodes] == [f"{name}-0", f"{name}-1"]
    for rank, pod in enumerate(nodes):
        env = resolve_env(pod.container["env"], pod)
        assert _launcher_env(pod) == {
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "2",
            "PET_NODE_RANK": str(rank),  # the fieldRef of the completion index annotation
            "PET_MASTER_ADDR": f"{name}-0.{name}",
            "PET_MASTER_PORT": str(PORT),
        }
        assert env["JOB_COMPLETION_INDEX"] == str(rank)
        assert pod.dns_names == [f"{name}-{rank}", f"{name}-{rank}.{name}"] and pod.restart_policy == "Never"


def test_environment_as_the_kubelet_builds_it(tmp_path):
    _, (master, _) = _pods(tmp_path, "pytorchjob")
    env = resolve_env(
        [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)-$(MISSING)-$$(A)"},
            {"name": "A", "value": "2"},  # the later one wins
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        master,
    )
    assert env == {"A": "2", "B": "1-$(MISSING)-$(A)", "POD": master.name}
    assert expand("run $(A) in $(B)", {"A": "x"}) == "run x in $(B)"

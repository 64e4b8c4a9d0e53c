"""Where a run's pods go (k8s/placement.py), rendered the same by every backend: the GPU model as a required node
affinity, node labels, the GPU taint and the job's own tolerations, pull secrets, the service account."""

import pytest

from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training.k8s import placement
from vdk.plugin.ml_training.k8s.backends import trainjob
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.ops.deploy_plan import Target
from vdk.plugin.ml_training.ops.deploy_plan import where_it_runs

PLACED = {
    "nodes": "2",
    "gpus_per_node": "8",
    "gpu_type": "H100",
    "node_selector": "pool=training",
    "tolerations": "dedicated=ml:NoSchedule, spot",
    "image_pull_secrets": "registry-credentials",
    "service_account": "trainer",
}
H100_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": "nvidia.com/gpu.product",
                            "operator": "In",
                            "values": list(placement.GPU_PRODUCTS["H100"]),
                        }
                    ]
                }
            ]
        }
    }
}


def pod_specs(manifests: list[dict]) -> list[dict]:
    """Every pod spec (or pod change) of a run's main object, whatever the backend."""
    main = manifests[0]
    if main["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in main["spec"]["pytorchReplicaSpecs"].values()]
    if main["kind"] == "Job":
        return [main["spec"]["template"]["spec"]]
    spec = main["spec"]
    if "podSpecOverrides" in spec:
        return spec["podSpecOverrides"]
    if "podTemplateOverrides" in spec:
        return [o["spec"] for o in spec["podTemplateOverrides"]]
    jobs = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return [j["template"]["spec"]["template"]["spec"] for j in jobs]


CASES = [("pytorchjob", None), ("job", None)] + [("trainjob", m) for m in trainjob.MECHANISMS]


@pytest.mark.parametrize(("backend", "mechanism"), CASES)
def test_every_backend_places_every_pod(tmp_path, backend, mechanism):
    spec = make_spec(tmp_path, **PLACED)
    cluster = trainer_cluster(mechanism) if mechanism else None
    specs = pod_specs(render_run(spec, IMAGE, make_run(spec), "ml", backend, cluster))
    assert specs
    for pod in specs:
        assert pod["nodeSelector"] == {"pool": "training"}
        assert pod["affinity"] == H100_AFFINITY
        assert pod["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"},
        ]
        assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
        assert pod["serviceAccountName"] == "trainer"


@pytest.mark.parametrize(("backend", "mechanism"), CASES)
def test_a_job_without_placement_keys_renders_none_and_cpu_jobs_tolerate_nothing(tmp_path, backend, mechanism):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="0")
    cluster = trainer_cluster(mechanism) if mechanism else None
    for pod in pod_specs(render_run(spec, IMAGE, make_run(spec), "ml", backend, cluster)):
        assert not {"nodeSelector", "affinity", "tolerations", "imagePullSecrets", "serviceAccountName"} & set(pod)


def test_a_gpu_model_written_in_full_or_of_another_label_is_taken_as_written(tmp_path):
    full = make_spec(tmp_path / "a", gpus_per_node="1", gpu_type="NVIDIA-A100-SXM4-80GB")
    assert placement.gpu_products(full) == ["NVIDIA-A100-SXM4-80GB"]
    gke = make_spec(
        tmp_path / "b",
        gpus_per_node="1",
        gpu_type="nvidia-h100-80gb",
        gpu_type_label="cloud.google.com/gke-accelerator",
    )
    term = placement.affinity(gke)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h100-80gb"]}
    ]
    short = make_spec(tmp_path / "c", gpus_per_node="1", gpu_type="a100")  # any case
    assert placement.gpu_products(short) == list(placement.GPU_PRODUCTS["A100"])


def test_a_toleration_the_default_already_has_is_not_repeated(tmp_path):
    spec = make_spec(tmp_path, gpus_per_node="1", tolerations="nvidia.com/gpu:NoSchedule")
    assert placement.tolerations(spec) == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_the_dry_run_says_where_the_pods_go(tmp_path):
    spec = make_spec(tmp_path, **PLACED)
    text = where_it_runs(spec, Target("ml", "the kube context's namespace", "pytorchjob"))
    assert "gpu type   H100: nodes whose nvidia.com/gpu.product is NVIDIA-H100-80GB-HBM3 or " in text
    assert "nodes      pool=training" in text
    assert "tolerates  dedicated=ml:NoSchedule, spot" in text
    assert "pulls with registry-credentials" in text and "service account trainer" in text

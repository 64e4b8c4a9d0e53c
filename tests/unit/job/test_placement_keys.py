"""The placement keys of [ml-training] (job/placement_keys.py): what they accept, and what they refuse with the key and
the fix, from the job and from VDK configuration."""

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job.model import Toleration


def spec_of(tmp_path, settings=None, **ml):
    return load_job_spec(write_job(tmp_path, ml={"gpus_per_node": "8", **ml}), settings)


def refused(tmp_path, settings=None, **ml) -> JobConfigError:
    with pytest.raises(JobConfigError) as info:
        spec_of(tmp_path, settings, **ml)
    return info.value


def test_no_placement_key_leaves_the_pods_free(tmp_path):
    spec = spec_of(tmp_path)
    assert spec.gpu_type is None and spec.gpu_type_label == "nvidia.com/gpu.product"
    assert (spec.node_selector, spec.tolerations, spec.image_pull_secrets, spec.service_account) == ((), (), (), None)


def test_every_placement_key_is_read_into_the_spec(tmp_path):
    spec = spec_of(
        tmp_path,
        gpu_type="H100",
        node_selector="pool=training, topology.kubernetes.io/zone=eu-west-1a",
        tolerations="dedicated=ml:NoSchedule, spot, example.com/gpu-maint:NoExecute, team=vision",
        image_pull_secrets="registry-credentials, mirror",
        service_account="trainer",
    )
    assert spec.gpu_type == "H100"
    assert spec.node_selector == (("pool", "training"), ("topology.kubernetes.io/zone", "eu-west-1a"))
    assert spec.tolerations == (
        Toleration("dedicated", "ml", "NoSchedule"),
        Toleration("spot"),
        Toleration("example.com/gpu-maint", None, "NoExecute"),
        Toleration("team", "vision"),
    )
    assert [t.to_dict() for t in spec.tolerations[:2]] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
    ]
    assert spec.image_pull_secrets == ("registry-credentials", "mirror")
    assert spec.service_account == "trainer"
    data = spec.to_dict()
    assert data["node_selector"] == {"pool": "training", "topology.kubernetes.io/zone": "eu-west-1a"}
    assert data["tolerations"][0] == "dedicated=ml:NoSchedule"


def test_placement_changes_no_fingerprint(tmp_path):
    """Where a run goes is not what it trains: the same image whatever the nodes."""
    plain = spec_of(tmp_path / "a")
    placed = spec_of(tmp_path / "b", gpu_type="A100", node_selector="pool=a", tolerations="spot", service_account="x")
    assert plain.fingerprint() == placed.fingerprint()


def test_cluster_wide_placement_comes_from_vdk_settings_and_the_job_wins(tmp_path):
    settings = {
        "tolerations": "spot",
        "image_pull_secrets": "site-pull",
        "gpu_type_label": "cloud.google.com/gke-accelerator",
    }
    spec = spec_of(tmp_path / "a", settings)
    assert (spec.tolerations, spec.image_pull_secrets) == ((Toleration("spot"),), ("site-pull",))
    assert spec.gpu_type_label == "cloud.google.com/gke-accelerator"
    own = spec_of(tmp_path / "b", settings, image_pull_secrets="mine")
    assert own.image_pull_secrets == ("mine",)


@pytest.mark.parametrize(
    ("key", "value", "problem", "fix"),
    [
        ("gpu_type", "H100 80GB", "is not a label value", "gpu_type = H100"),
        ("gpu_type_label", "Nvidia.com/gpu", "is not a label key", "gpu_type_label = nvidia.com/gpu.product"),
        ("node_selector", "pool", "is not `key=value`", "node_selector = pool=training"),
        ("node_selector", "pool=a, pool=b", "pool is given twice", "keep one of them"),
        ("node_selector", "pool=a,,zone=b", "has an empty entry", "one comma"),
        ("node_selector", "pool=a b", "is not a label value", "fix 'pool=a b'"),
        ("tolerations", "dedicated=ml:noschedule", "is not a taint effect", "`dedicated=ml:NoSchedule`"),
        ("tolerations", "dedicated=ml:Never", "is not a taint effect", "NoSchedule, PreferNoSchedule, NoExecute"),
        ("tolerations", "-bad-:NoSchedule", "is not a taint key", "tolerations = dedicated=ml:NoSchedule"),
        ("image_pull_secrets", "Registry_Creds", "is not a Secret name", "image_pull_secrets = registry-credentials"),
        ("service_account", "Trainer", "is not a ServiceAccount name", "service_account = trainer"),
    ],
)
def test_a_malformed_placement_key_names_the_key_and_the_fix(tmp_path, key, value, problem, fix):
    error = refused(tmp_path, **{key: value})
    assert error.key == key
    assert problem in error.problem and fix in error.fix


def test_a_gpu_model_without_gpus_is_refused(tmp_path):
    error = refused(tmp_path, gpus_per_node="0", gpu_type="H100")
    assert error.key == "gpu_type" and "asks for no GPU" in error.problem and "gpus_per_node" in error.fix


def test_a_malformed_cluster_wide_setting_names_its_variable(tmp_path):
    error = refused(tmp_path, {"tolerations": "spot:Sometimes"})
    assert "VDK_ML_TRAINING_TOLERATIONS" in error.problem

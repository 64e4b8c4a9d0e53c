"""What every backend's training container receives is what a local run passes: Kubernetes expands `$(VAR)`
in a container's command, args and env values (and turns `$$` into `$`) while the local smoke run, a container
run and the image do not; rendered values are escaped, so that after the kubelet's expansion (the local
cluster's emulation of it, tests/support/local_cluster.py) they are the local run's, byte for byte."""

from __future__ import annotations

import pytest

from tests.support.local_cluster import expand
from tests.support.rendered_runs import mappings
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.k8s import pod_template
from vdk.plugin.ml_training.k8s.manifests import render_run

TRICKY = {
    "HOME_REF": "$(HOME)",  # defined on every node: Kubernetes would put the node's value here
    "OWN_REF": "$(PYTHONUNBUFFERED)",  # defined earlier in the same container: expanded too
    "UNDEFINED_REF": "$(NOT_SET_ANYWHERE)",
    "ESCAPED": "$$(HOME) and $$",
    "DOLLARS": "price: $5, $, $$$, ends with $",
    "OPEN": "$(unclosed",
    "SHELL_STYLE": "${HOME} $HOME",
}
ARGS = "--pattern '$(HOME)/data' --cost '$$5' --plain value"


def kubelet(container: dict, node_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(command, env) as the process in `container` starts: each env value expanded with the variables
    defined before it (and the node's), then the command with all of them; undefined names stay as written."""
    defined = dict(node_env)
    env = {}
    for var in container.get("env", []):
        if "value" not in var:
            continue  # a Secret or a field reference: not expanded
        defined[var["name"]] = env[var["name"]] = expand(var["value"], defined)
    command = [expand(part, defined) for part in container["command"]]
    return command, env


def training_containers(manifests: list[dict]) -> list[dict]:
    """Every container (or TrainJob trainer) that starts the training command."""
    return [node for node in mappings(manifests) if isinstance(node.get("command"), list) and "env" in node]


@pytest.mark.parametrize(
    "backend, mechanism",
    [
        ("pytorchjob", None),
        ("job", None),
        ("trainjob", "podSpecOverrides"),
        ("trainjob", "podTemplateOverrides"),
        ("trainjob", "runtimePatches"),
    ],
)
def test_every_backend_s_container_receives_what_the_local_run_passes(tmp_path, backend, mechanism):
    spec = make_spec(tmp_path, env=TRICKY, args=ARGS, nodes="2", gpus_per_node="1")
    cluster = trainer_cluster(mechanism) if mechanism else None
    manifests = render_run(spec, IMAGE, make_run(spec), "ml", backend, cluster=cluster)
    containers = training_containers(manifests)
    assert containers
    for container in containers:
        command, env = kubelet(container, {"HOME": "/root", "PATH": "/usr/bin"})
        # the local smoke run: the process gets spec.env_dict and spec.command_args() as they are
        assert {name: env[name] for name in TRICKY} == {name: spec.env_dict[name] for name in TRICKY} == TRICKY
        assert command[-len(spec.command_args()) :] == spec.command_args()
        assert "$(HOME)/data" in spec.command_args() and "$$5" in spec.command_args()
        # a container run and the image: layout's environment and command, unexpanded
        assert {k: env[k] for k in layout.launch_env(spec)} == layout.launch_env(spec)
        assert command == layout.launch_command(spec, IMAGE.python, pod_template.torchrun_flags())


def test_values_without_a_dollar_are_rendered_unchanged(tmp_path):
    spec = make_spec(tmp_path, env={"PLAIN": "a b (c)"}, args="--lr 0.1")
    container = training_containers(render_run(spec, IMAGE, make_run(spec), "ml", "job"))[0]
    assert {"name": "PLAIN", "value": "a b (c)"} in container["env"]
    assert container["command"] == layout.launch_command(spec, IMAGE.python, pod_template.torchrun_flags())
    assert pod_template.literal("$(X)") == "$$(X)" and pod_template.literal("no dollars") == "no dollars"


def pod_specs(manifests: list[dict]) -> list[dict]:
    """Every pod spec (or pod spec patch) that holds the training container."""
    return [
        node
        for node in mappings(manifests)
        if any(isinstance(c, dict) and "volumeMounts" in c for c in node.get("containers") or [])
    ]


BACKENDS = [("pytorchjob", None), ("job", None), ("trainjob", "runtimePatches")]


@pytest.mark.parametrize("backend, mechanism", BACKENDS)
def test_with_an_output_volume_pods_get_two_minutes_to_save_and_torchrun_waits_for_its_ranks(
    tmp_path, backend, mechanism
):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="1", output_pvc="ml-outputs")
    run = make_run(spec)
    cluster = trainer_cluster(mechanism) if mechanism else None
    manifests = render_run(spec, IMAGE, run, "ml", backend, cluster=cluster)
    assert [p["terminationGracePeriodSeconds"] for p in pod_specs(manifests)] == [120] * len(pod_specs(manifests))
    for container in training_containers(manifests):
        env = {v["name"]: v.get("value") for v in container["env"]}
        # the agent ends its ranks 5 s before the kubelet would end it; the ranks resume from this run's checkpoints
        assert env[pod_template.TORCHRUN_SHUTDOWN_TIMEOUT] == "115"
        assert env["VDK_ML_TRAINING_RESUME"] == "auto" and env["VDK_ML_TRAINING_RUN_NAME"] == run.name


@pytest.mark.parametrize("backend, mechanism", BACKENDS)
def test_the_grace_period_is_the_key_s_and_without_an_output_volume_kubernetes_default(tmp_path, backend, mechanism):
    cluster = trainer_cluster(mechanism) if mechanism else None
    keyed = make_spec(tmp_path, "keyed", nodes="2", termination_grace_period="10m", resume="off")
    manifests = render_run(keyed, IMAGE, make_run(keyed), "ml", backend, cluster=cluster)
    assert {p["terminationGracePeriodSeconds"] for p in pod_specs(manifests)} == {600}
    env = {v["name"]: v.get("value") for v in training_containers(manifests)[0]["env"]}
    assert env[pod_template.TORCHRUN_SHUTDOWN_TIMEOUT] == "595" and env["VDK_ML_TRAINING_RESUME"] == "off"

    plain = make_spec(tmp_path, "plain", nodes="2")
    manifests = render_run(plain, IMAGE, make_run(plain), "ml", backend, cluster=cluster)
    assert not any("terminationGracePeriodSeconds" in p for p in pod_specs(manifests))
    env = {v["name"] for v in training_containers(manifests)[0]["env"]}
    assert pod_template.TORCHRUN_SHUTDOWN_TIMEOUT not in env  # torch's own 30 s, as Kubernetes' grace


@pytest.mark.parametrize("mechanism", ["podSpecOverrides", "podTemplateOverrides"])
def test_a_trainer_whose_pod_changes_take_no_grace_period_says_so(tmp_path, mechanism):
    from vdk.plugin.ml_training.k8s.manifests import limitations

    spec = make_spec(tmp_path, nodes="2", output_pvc="ml-outputs")
    manifests = render_run(spec, IMAGE, make_run(spec), "ml", "trainjob", cluster=trainer_cluster(mechanism))
    assert pod_specs(manifests) and not any("terminationGracePeriodSeconds" in p for p in pod_specs(manifests))
    notes = " ".join(limitations(spec, "trainjob", trainer_cluster(mechanism)))
    assert "terminationGracePeriodSeconds" in notes
    assert "terminationGracePeriodSeconds" not in " ".join(
        limitations(spec, "trainjob", trainer_cluster("runtimePatches"))
    )


def test_the_training_container_is_told_its_runs_facts_and_the_clusters_mlflow_server(tmp_path):
    from vdk.plugin.ml_training.runtime.series import read_facts

    spec = make_spec(tmp_path, mlflow_tracking_uri="http://mlflow.ml.svc:5000", output_pvc="ml-outputs")
    run = make_run(spec)
    env = {e["name"]: e["value"] for e in pod_template.container(spec, IMAGE, "pytorch", run)["env"] if "value" in e}
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.ml.svc:5000"
    facts = read_facts(env)
    assert (facts.run, facts.job, facts.image) == (run.name, "mnist-ddp", IMAGE.reference)
    assert facts.commit == run.provenance.git_commit and facts.config["entrypoint"] == "train.py"
    own = make_spec(tmp_path / "own", env={"MLFLOW_TRACKING_URI": "http://team:5000"}, mlflow_tracking_uri="http://x:1")
    container = pod_template.container(own, IMAGE, "pytorch", make_run(own))
    assert [e["value"] for e in container["env"] if e["name"] == "MLFLOW_TRACKING_URI"] == ["http://team:5000"]

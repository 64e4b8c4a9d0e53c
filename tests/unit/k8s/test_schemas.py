"""Every rendered manifest validates against what a cluster enforces: the real upstream CRD OpenAPI
schemas (tests/support/upstream_crds) for PyTorchJob and TrainJob (each Trainer pod-change mechanism), the
`kubernetes` models plus API-server rules for Job, Service and ConfigMap."""

import pytest

from tests.support import crd_schema
from tests.support.native import native_errors
from tests.support.specs import IMAGE
from tests.support.specs import MATRIX
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training.k8s.backends import trainjob
from vdk.plugin.ml_training.k8s.manifests import render_run

MODELS = {"Job": "V1Job", "Service": "V1Service", "ConfigMap": "V1ConfigMap"}


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs")
    return {
        case: make_spec(root / case, env={"HF_HOME": "/tmp/hf", "PYTHONPATH": "/extra"}, args="--epochs 3", **keys)
        for case, keys in MATRIX.items()
    }


def schema_errors(manifest, mechanism=trainjob.RUNTIME_PATCHES):
    kind = manifest["kind"]
    if kind == "PyTorchJob":
        return crd_schema.pytorchjob_schema().errors(manifest)
    if kind == "TrainJob":
        return crd_schema.trainjob_schema(mechanism).errors(manifest)
    return native_errors(manifest, MODELS[kind])


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_pytorchjob_matrix_is_valid(specs, case):
    manifests = render_run(specs[case], IMAGE, make_run(specs[case]), "ml", "pytorchjob")
    assert [m["kind"] for m in manifests] == ["PyTorchJob", "ConfigMap"]
    for manifest in manifests:
        assert schema_errors(manifest) == []


@pytest.mark.parametrize("mechanism", trainjob.MECHANISMS)
@pytest.mark.parametrize("case", sorted(MATRIX))
def test_trainjob_matrix_is_valid_for_each_trainer_mechanism(specs, case, mechanism):
    manifests = render_run(
        specs[case], IMAGE, make_run(specs[case]), "ml", "trainjob", cluster=trainer_cluster(mechanism)
    )
    assert [m["kind"] for m in manifests] == ["TrainJob", "ConfigMap"]
    for manifest in manifests:
        assert schema_errors(manifest, mechanism) == []


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_indexed_job_matrix_is_valid(specs, case):
    manifests = render_run(specs[case], IMAGE, make_run(specs[case]), "ml", "job")
    assert [m["kind"] for m in manifests] == ["Job", "Service", "ConfigMap"]
    for manifest in manifests:
        assert schema_errors(manifest) == []


# The validators must be able to fail: each of these is something a real server rejects.


def test_crd_validation_rejects_what_a_server_would(specs):
    job = render_run(specs["gpu-4x8"], IMAGE, make_run(specs["gpu-4x8"]), "ml", "pytorchjob")[0]
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    master["replicas"] = "1"
    master["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "16 GB"
    env = master["template"]["spec"]["containers"][0]["env"]
    env.append({"name": "HF_HOME", "value": "again"})
    job["spec"]["nprocPerNode"] = 8  # a string in the CRD
    job["spec"]["runPolicy"]["backoffLimit"] = 2**31
    job["spec"]["elasticPolicy"] = {"minReplicas": "2"}
    job["spec"]["replicaSpecs"] = {}
    errors = {e.field: e for e in schema_errors(job)}
    base = "spec.pytorchReplicaSpecs.Master"
    assert "is not of type 'integer'" in errors[f"{base}.replicas"].message
    assert f"{base}.template.spec.containers[0].resources.limits.memory" in errors
    assert "Duplicate value" in errors[f"{base}.template.spec.containers[0].env[{len(env) - 1}]"].message
    assert "is not of type 'string'" in errors["spec.nprocPerNode"].message
    assert "int32" in errors["spec.runPolicy.backoffLimit"].message
    assert "spec.elasticPolicy.minReplicas" in errors
    assert errors["spec.replicaSpecs"].unknown


def test_trainjob_cel_rules_and_mechanism_fields_are_enforced(specs):
    spec = specs["gpu-1x8"]
    job = render_run(spec, IMAGE, make_run(spec, name="Mnist_Run"), "ml", "trainjob")[0]
    messages = [e.message for e in schema_errors(job)]
    assert any("RFC 1035" in m for m in messages)
    # A v2.1 server does not know runtimePatches, a v2.3 server no longer knows podTemplateOverrides.
    newest = render_run(
        spec, IMAGE, make_run(spec), "ml", "trainjob", cluster=trainer_cluster(trainjob.RUNTIME_PATCHES)
    )[0]
    older = render_run(
        spec, IMAGE, make_run(spec), "ml", "trainjob", cluster=trainer_cluster(trainjob.POD_TEMPLATE_OVERRIDES)
    )[0]
    assert [e.field for e in schema_errors(newest, trainjob.POD_TEMPLATE_OVERRIDES) if e.unknown] == [
        "spec.runtimePatches"
    ]
    assert {e.field for e in schema_errors(older, trainjob.RUNTIME_PATCHES) if e.unknown} == {
        "spec.labels",
        "spec.podTemplateOverrides",
    }


def test_native_checks_reject_what_a_server_would(specs):
    job, service, record = render_run(specs["gpu-4x8"], IMAGE, make_run(specs["gpu-4x8"]), "ml", "job")
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"  # with a podFailurePolicy
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    fields = {e.field for e in native_errors(job, "V1Job")}
    assert fields == {"spec.template.spec.restartPolicy", "spec.template.spec.containers[0].volumeMount"}
    job["spec"]["completions"] = "4"
    assert any(e.field.endswith("completions") for e in native_errors(job, "V1Job"))
    service["spec"]["ports"].append({"port": 80})
    assert [e.field for e in native_errors(service, "V1Service")] == ["spec.ports"]
    record["data"]["huge"] = "x" * (1024 * 1024)
    assert [e.field for e in native_errors(record, "V1ConfigMap")] == ["data"]


TEAM_SETTINGS = {"team_namespaces": "vision:ml-vision, nlp:ml-nlp", "team_queues": "vision:vision-gpus"}


@pytest.mark.parametrize(
    "backend, mechanism",
    [("pytorchjob", None), ("job", None), *[("trainjob", m) for m in trainjob.MECHANISMS]],
)
def test_a_team_s_namespace_and_queue_reach_every_backend_s_manifests(tmp_path, backend, mechanism):
    """The VDK mappings alone (no key in the job) put the run in its team's namespace and Kueue queue."""
    spec = make_spec(tmp_path, team="vision", settings=TEAM_SETTINGS, nodes="2", gpus_per_node="1")
    assert (spec.namespace, spec.queue) == ("ml-vision", "vision-gpus")
    cluster = trainer_cluster(mechanism) if mechanism else None
    manifests = render_run(spec, IMAGE, make_run(spec), spec.namespace, backend, cluster=cluster)
    assert {m["metadata"]["namespace"] for m in manifests} == {"ml-vision"}
    assert all(m["metadata"]["labels"]["vdk.io/team"] == "vision" for m in manifests)
    main = manifests[0]
    assert main["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "vision-gpus"
    if backend == "pytorchjob":
        assert main["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "vision-gpus"
    for manifest in manifests:
        assert schema_errors(manifest, mechanism or trainjob.RUNTIME_PATCHES) == []


def test_a_job_s_own_namespace_and_queue_win_over_its_team_s(tmp_path):
    spec = make_spec(tmp_path, team="vision", settings=TEAM_SETTINGS, namespace="ml-own", queue="own-queue")
    main = render_run(spec, IMAGE, make_run(spec), spec.namespace, "pytorchjob")[0]
    assert main["metadata"]["namespace"] == "ml-own"
    assert main["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "own-queue"


# --- the failure rules: what each backend can say about a disruption -----------------------------------------


def test_the_plain_job_s_failure_rules_ignore_a_disruption_first_and_the_server_takes_them(specs):
    job = render_run(specs["gpu-4x8"], IMAGE, make_run(specs["gpu-4x8"]), "ml", "job")[0]
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert [(r["action"], "onPodConditions" in r) for r in rules] == [("Ignore", True), ("FailJob", False)]
    assert native_errors(job, "V1Job") == []
    # what the server would refuse, and the shape checks find: both matchers in one rule, a condition without a
    # type, an exit code 0 that In would match, an action the Job does not know
    rules[0]["onExitCodes"] = {"containerName": "pytorch", "operator": "In", "values": [0]}
    rules[1]["onPodConditions"] = [{"status": "True"}]
    rules[1]["action"] = "Restart"
    fields = {e.field for e in native_errors(job, "V1Job")}
    assert fields == {
        "spec.podFailurePolicy.rules[0]",
        "spec.podFailurePolicy.rules[0].onExitCodes.values",
        "spec.podFailurePolicy.rules[1]",
        "spec.podFailurePolicy.rules[1].onPodConditions[0].type",
        "spec.podFailurePolicy.rules[1].action",
        "type",  # the kubernetes model says it too: V1PodFailurePolicyOnPodConditionsPattern requires a type
    }


def test_pytorchjob_restarts_in_place_and_the_crd_takes_its_restart_policy(specs):
    # OnFailure: the operator's backoffLimit counts restarts of containers in place (a bug, an OOM kill); a pod a
    # disruption deleted is created again, uncounted. ExitCode would make every code failure final and count none.
    manifest = render_run(specs["gpu-4x8"], IMAGE, make_run(specs["gpu-4x8"]), "ml", "pytorchjob")[0]
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert {r["restartPolicy"] for r in replicas.values()} == {"OnFailure"}
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == specs["gpu-4x8"].max_restarts
    assert schema_errors(manifest) == []


def test_a_trainjob_cannot_carry_failure_rules_its_runtime_holds_them(specs):
    """Why the TrainJob backend leaves disruptions to its runtime: runtimePatches (Trainer v2.3.0's CRD) patches
    the JobSet's replicated jobs' pod templates only; the JobSet's failurePolicy and the Jobs' podFailurePolicy are
    not fields of it, so a server with fieldValidation=Strict refuses them."""
    manifest = render_run(specs["gpu-4x8"], IMAGE, make_run(specs["gpu-4x8"]), "ml", "trainjob")[0]
    assert schema_errors(manifest) == []
    template = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]
    template["spec"]["failurePolicy"] = {
        "rules": [{"name": "disruptions", "action": "RestartJobSetAndIgnoreMaxRestarts"}]
    }
    job_spec = template["spec"]["replicatedJobs"][0]["template"]["spec"]
    job_spec["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    unknown = sorted(e.field for e in schema_errors(manifest) if e.unknown)
    assert unknown == [
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.failurePolicy",
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.podFailurePolicy",
    ]

"""The client through the real `kubernetes` package against the HTTP-level fake API server:
apply creates exactly the run's objects or none, runs are listed / read / deleted by their
labels, and every API failure reads as something a user can act on."""

import socket

import pytest
import yaml

from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs import record as run_record

ALL_OPERATORS = {"pytorchjob": True, "trainer_mechanism": "runtimePatches"}


@pytest.fixture
def spec(tmp_path):
    return make_spec(tmp_path, nodes="2", gpus_per_node="1", queue="team-a-queue")


def render(spec, backend, cluster=None, name=None):
    run = make_run(spec, name=name)
    return run, render_run(spec, IMAGE, run, "ml", backend, cluster=cluster or trainer_cluster("runtimePatches"))


@pytest.mark.parametrize(
    "backend, kinds",
    [
        ("pytorchjob", ["ConfigMap", "PyTorchJob"]),
        ("trainjob", ["ConfigMap", "TrainJob"]),
        ("job", ["ConfigMap", "Job", "Service"]),
    ],
)
def test_apply_creates_exactly_the_run_objects_owned_by_the_main_one(cluster, spec, backend, kinds):
    fake, client = cluster(**ALL_OPERATORS)
    run, manifests = render(spec, backend)
    created = client.apply(manifests)
    assert [o["kind"] for o in created] == [m["kind"] for m in manifests]
    suffix = {"ConfigMap": "-record"}
    assert fake.run_objects() == sorted(f"{k}/{run.name}{suffix.get(k, '')}" for k in kinds)
    main = created[0]
    for obj in created[1:]:
        assert obj["metadata"]["ownerReferences"] == [
            {"apiVersion": main["apiVersion"], "kind": main["kind"], "name": run.name, "uid": main["metadata"]["uid"]}
        ]
    # every create was checked by a server-side dry run first, and strict about unknown fields
    creates = [q for method, _, q in fake.requests if method == "POST"]
    assert [q.get("dryRun") for q in creates] == ["All"] * len(manifests) + [None] * len(manifests)
    assert all(q["fieldValidation"] == "Strict" for q in creates)
    # the stored object is what was rendered
    stored = client.get(manifests[0]["kind"], run.name)
    assert stored["spec"] == manifests[0]["spec"]
    assert stored["metadata"]["annotations"] == manifests[0]["metadata"]["annotations"]


def test_failure_in_the_middle_of_apply_leaves_nothing(cluster, spec, fast_retries):
    fake, client = cluster()
    run, manifests = render(spec, "job")
    fake.fail("POST", "services", 500, "InternalError", "etcdserver: request timed out", times=None)
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "etcdserver: request timed out" in e.value.problem
    assert f"tried {fast_retries.attempts} times" in e.value.problem
    assert (
        f"Nothing was left in the cluster: what was created was deleted again (Job/{run.name}, "
        f"ConfigMap/{run.name}-record)" in e.value.problem
    )
    assert fake.run_objects() == []
    assert ("DELETE", f"/apis/batch/v1/namespaces/ml/jobs/{run.name}") in [(m, p) for m, p, _ in fake.requests]

    fake.faults.clear()
    fake.fail("POST", "configmaps", 403, "Forbidden", 'configmaps is forbidden: User "tester" cannot create')
    with pytest.raises(MLTrainingError):
        client.apply(manifests)
    assert fake.run_objects() == []
    assert fake.requests_to("POST", "/configmaps") == 2  # one per apply: a refusal is not worth another attempt


def test_failed_cleanup_names_what_remains(cluster, spec, fast_retries):
    fake, client = cluster()
    run, manifests = render(spec, "job")
    fake.fail("POST", "services", 500, "InternalError", "boom", times=None)
    fake.fail("DELETE", "jobs", 500, "InternalError", "still boom", times=None)
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "boom" in e.value.problem and f"Job/{run.name}" in e.value.problem
    assert "these objects remain" in e.value.problem
    assert f"`kubectl delete --context fake -n ml jobs.batch/{run.name}`" in e.value.fix


def test_rejected_manifest_creates_nothing_and_names_the_field(cluster, spec):
    fake, client = cluster(**ALL_OPERATORS)
    run, manifests = render(spec, "pytorchjob")
    manifests[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "one"
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "422" in e.value.problem
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in e.value.problem
    assert "--dry-run" in e.value.fix
    assert fake.run_objects() == []
    assert not [1 for method, _, q in fake.requests if method == "POST" and q.get("dryRun") is None]


def test_operator_webhook_rules_are_respected_and_enforced(cluster, spec):
    fake, client = cluster(**ALL_OPERATORS)
    run, manifests = render(spec, "pytorchjob")
    client.apply(manifests)  # the renderer follows the webhook's rules
    run, manifests = render(spec, "pytorchjob")
    manifests[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "admission webhook" in e.value.problem and "a container named pytorch" in e.value.problem


def test_unknown_fields_for_the_installed_trainer_are_explained(cluster, spec):
    fake, client = cluster(trainer_mechanism="podTemplateOverrides")
    run, manifests = render(spec, "trainjob", cluster=trainer_cluster("runtimePatches"))
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "400" in e.value.problem and 'unknown field "spec.runtimePatches"' in e.value.problem
    assert "version" in e.value.fix
    assert fake.run_objects() == []
    run, manifests = render(spec, "trainjob", cluster=client.discover())
    assert [o["kind"] for o in client.apply(manifests)] == ["TrainJob", "ConfigMap"]


def test_missing_runtime_is_rejected_by_the_trainer_webhook(cluster, spec):
    fake, client = cluster(trainer_mechanism="runtimePatches", torch_runtime=False)
    run, manifests = render(spec, "trainjob")
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "torch-distributed" in e.value.problem and fake.run_objects() == []


def test_409_when_the_run_exists(cluster, spec):
    fake, client = cluster()
    run, manifests = render(spec, "job")
    client.apply(manifests)
    before = fake.run_objects()
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert f"a Job named {run.name} already exists in namespace ml (409 AlreadyExists)" in e.value.problem
    assert f"kubectl --context fake delete jobs.batch {run.name} -n ml" in e.value.fix
    assert fake.run_objects() == before  # the earlier run is untouched


def test_403_names_verb_resource_and_namespace(cluster, spec):
    fake, client = cluster(forbidden={("create", "pytorchjobs")}, **ALL_OPERATORS)
    run, manifests = render(spec, "pytorchjob")
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "you are not allowed to create pytorchjobs.kubeflow.org in namespace ml (403 Forbidden)" in e.value.problem
    assert 'User "tester" cannot create resource "pytorchjobs"' in e.value.problem
    assert "kubectl --context fake auth can-i create pytorchjobs.kubeflow.org -n ml" in e.value.fix
    assert "minimal Role" in e.value.fix


def test_401_says_to_log_in_again(cluster, spec, tmp_path, monkeypatch):
    fake, _ = cluster()
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "stale", token="expired")))
    with pytest.raises(MLTrainingError) as e:
        KubeClient().discover()
    assert "401 Unauthorized" in e.value.problem and "(kube context fake)" in e.value.problem
    assert "log in" in e.value.fix and "auth whoami" in e.value.fix


def test_404_on_a_crd_names_the_operator_to_install(cluster, spec):
    fake, client = cluster()  # no training operator
    run, manifests = render(spec, "pytorchjob")
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "does not serve PyTorchJob (kubeflow.org/v1 pytorchjobs)" in e.value.problem
    assert "Kubeflow Training Operator" in e.value.fix
    run, manifests = render(spec, "trainjob")
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "does not serve TrainJob" in e.value.problem and "Kubeflow Trainer v2" in e.value.fix


def test_404_on_a_missing_namespace(cluster, spec):
    fake, client = cluster(namespace="research")
    run = make_run(spec)
    manifests = render_run(spec, IMAGE, run, "research", "job")
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert e.value.problem == "the namespace research does not exist in kube context fake (404 NotFound)"
    assert "kubectl --context fake create namespace research" in e.value.fix


def test_check_namespace_says_how_to_fix_a_missing_one(cluster):
    fake, client = cluster(namespace="research")
    with pytest.raises(MLTrainingError) as e:
        client.check_namespace()
    assert e.value.problem == "the namespace research does not exist in kube context fake (404 NotFound)"
    assert "kubectl --context fake create namespace research" in e.value.fix
    assert "VDK_ML_TRAINING_NAMESPACE" in e.value.fix and "`namespace` in [ml-training]" in e.value.fix
    assert ("GET", "/api/v1/namespaces/research") in [(m, p) for m, p, _ in fake.requests]
    assert KubeClient(namespace="ml").check_namespace() is None


def test_check_namespace_passes_when_namespaces_may_not_be_read(cluster):
    # A namespaced Role cannot grant reading Namespace objects: a 403 proves nothing.
    fake, client = cluster(namespace="research", forbidden={("get", "namespaces")})
    assert client.check_namespace() is None
    assert ("GET", "/api/v1/namespaces/research") in [(m, p) for m, p, _ in fake.requests]


def test_check_namespace_of_an_unreachable_cluster(cluster):
    fake, client = cluster()
    fake.stop()
    with pytest.raises(MLTrainingError) as e:
        client.check_namespace()
    assert e.value.problem.startswith(f"cannot reach the Kubernetes API server at {fake.url} (kube context fake)")
    assert "cluster-info" in e.value.fix


def test_connection_refused(tmp_path, monkeypatch, cluster):
    fake, _ = cluster()
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "down", server=f"http://127.0.0.1:{port}")))
    with pytest.raises(MLTrainingError) as e:
        KubeClient().discover()
    assert (
        f"cannot reach the Kubernetes API server at http://127.0.0.1:{port} (kube context fake): connection refused"
        == e.value.problem
    )
    assert "cluster-info" in e.value.fix


def test_context_and_namespace_selection(tmp_path, monkeypatch, cluster):
    fake, client = cluster(namespace="ml")
    assert (client.context, client.namespace) == ("fake", "ml")
    assert KubeClient(namespace="default").namespace == "default"
    with pytest.raises(MLTrainingError) as e:
        KubeClient(context="prod")
    assert "the kube context 'prod' is not in" in e.value.problem and "use one of: fake" in e.value.fix
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    with pytest.raises(MLTrainingError) as e:
        KubeClient()
    assert "no Kubernetes cluster is configured" in e.value.problem
    broken = tmp_path / "broken"
    broken.write_text("clusters: [")
    with pytest.raises(MLTrainingError) as e:
        KubeClient(config_file=str(broken))
    assert "cannot be read" in e.value.problem


def test_list_show_and_delete_runs(cluster, tmp_path):
    fake, client = cluster(**ALL_OPERATORS)
    mnist = make_spec(tmp_path / "a", name="mnist-ddp", nodes="2")
    bert = make_spec(tmp_path / "b", name="bert-finetune", nodes="1")
    runs = {}
    for spec, backend in ((mnist, "pytorchjob"), (mnist, "job"), (bert, "trainjob")):
        run, manifests = render(spec, backend)
        client.apply(manifests)
        runs[backend] = run.name
    fake.set_status(
        "pytorchjobs",
        runs["pytorchjob"],
        {
            "conditions": [
                {"type": "Created", "status": "True"},
                {"type": "Running", "status": "True"},
            ]
        },
    )
    fake.set_status(
        "jobs",
        runs["job"],
        {"conditions": [{"type": "Failed", "status": "True", "message": "Pod failed: exit code 1"}]},
    )

    listed = {r.name: r for r in client.list_runs()}
    assert set(listed) == set(runs.values())
    assert (listed[runs["pytorchjob"]].phase, listed[runs["job"]].phase, listed[runs["trainjob"]].phase) == (
        "Running",
        "Failed",
        "Pending",
    )
    assert listed[runs["job"]].message == "Pod failed: exit code 1"
    assert listed[runs["job"]].team == "Vision Research" and listed[runs["job"]].image == IMAGE.reference
    assert {r.name for r in client.list_runs(job_name="mnist-ddp")} == {runs["pytorchjob"], runs["job"]}

    assert client.get_run(runs["trainjob"])["kind"] == "TrainJob"
    assert client.get_run(runs["trainjob"], "trainjob")["metadata"]["name"] == runs["trainjob"]
    rec = client.read_run_record(runs["job"])
    assert (rec.backend, rec.image) == ("job", IMAGE.reference)

    deleted = client.delete_run(runs["job"])
    assert sorted(deleted) == sorted(
        [f"Job/{runs['job']}", f"Service/{runs['job']}", f"ConfigMap/{runs['job']}-record"]
    )
    assert not [o for o in fake.run_objects() if runs["job"] in o]
    assert len(fake.run_objects()) == 4
    for backend in (None, "job"):
        with pytest.raises(MLTrainingError) as e:
            client.delete_run(runs["job"], backend)
        assert f"there is no run named {runs['job']} in namespace ml" == e.value.problem and "vdk list" in e.value.fix
    deleted = client.delete_run(runs["pytorchjob"], "pytorchjob")
    assert sorted(deleted) == sorted([f"PyTorchJob/{runs['pytorchjob']}", f"ConfigMap/{runs['pytorchjob']}-record"])
    assert not [o for o in fake.run_objects() if runs["pytorchjob"] in o]


def test_list_runs_on_a_cluster_without_operators(cluster, spec):
    fake, client = cluster()
    assert client.list_runs() == []
    run, manifests = render(spec, "job")
    client.apply(manifests)
    assert [r.name for r in client.list_runs()] == [run.name]


def test_a_recorded_run_runs_again_exactly(cluster, spec):
    fake, client = cluster(**ALL_OPERATORS)
    run, manifests = render(spec, "pytorchjob")
    client.apply(manifests)
    rec = client.read_run_record(run.name)
    again = run_record.rerun_manifests(
        rec, "mnist-ddp-again001", deployer="bob@example.com", deployed_at="2026-03-01T00:00:00Z"
    )
    created = client.apply(again)
    assert [o["kind"] for o in created] == ["PyTorchJob", "ConfigMap"]
    first, second = client.get("PyTorchJob", run.name), client.get("PyTorchJob", "mnist-ddp-again001")
    strip = lambda o: yaml.safe_dump(o["spec"]).replace(run.name, "RUN").replace("mnist-ddp-again001", "RUN")  # noqa: E731
    assert strip(first) == strip(second)
    assert second["metadata"]["annotations"]["vdk.io/rerun-of"] == run.name

"""What the renderers put into manifests: the semantics each backend and operator relies on."""

import dataclasses
import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.support.jobs import write_job
from tests.support.specs import IMAGE
from tests.support.specs import OUTSIDE_GIT
from tests.support.specs import PROVENANCE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MAX_JOB_NAME_LENGTH
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s import pod_template
from vdk.plugin.ml_training.k8s.backends import indexed_job
from vdk.plugin.ml_training.k8s.backends import pytorchjob
from vdk.plugin.ml_training.k8s.backends import trainjob
from vdk.plugin.ml_training.k8s.manifests import limitations
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.manifests import to_yaml
from vdk.plugin.ml_training.k8s.runs import record as run_record
from vdk.plugin.ml_training.k8s.runs.identity import new_run_name
from vdk.plugin.ml_training.k8s.storage import output_location
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.runtime import watchdog
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def containers_of(pytorch_job):
    return {
        rtype: spec["template"]["spec"]["containers"][0]
        for rtype, spec in pytorch_job["spec"]["pytorchReplicaSpecs"].items()
    }


def test_pytorchjob_single_node_cpu(tmp_path):
    spec = make_spec(tmp_path, nodes="1", gpus_per_node="0", cpu="2", memory="8Gi")
    run = make_run(spec)
    job = pytorchjob.render(spec, IMAGE, run, "ml")[0]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert list(replicas) == ["Master"]  # Worker omitted, not replicas: 0
    assert replicas["Master"]["replicas"] == 1
    container = replicas["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}
    assert "tolerations" not in replicas["Master"]["template"]["spec"]
    assert job["spec"]["nprocPerNode"] == "1"
    assert "elasticPolicy" not in job["spec"]


def test_pytorchjob_multi_node_gpus(tmp_path):
    spec = make_spec(tmp_path, nodes="4", gpus_per_node="8", memory="512Gi", shm_size="64Gi", max_restarts="2")
    run = make_run(spec)
    job = pytorchjob.render(spec, IMAGE, run, "ml")[0]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    for rtype, container in containers_of(job).items():
        assert container["name"] == "pytorch"
        assert container["image"] == IMAGE.reference
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
        assert container["command"] == layout.launch_command(spec, IMAGE.python, pod_template.torchrun_flags())
        assert container["command"][:3] == ["python", "-m", layout.LAUNCHER_MODULE]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        pod_spec = replicas[rtype]["template"]["spec"]
        assert pod_spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec["tolerations"]
        assert replicas[rtype]["template"]["metadata"]["labels"]["vdk.io/run"] == run.name
    assert job["spec"]["nprocPerNode"] == "8"
    assert job["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 7 * 86400,
        "backoffLimit": 2,
    }


def test_pytorchjob_elastic_queue_priority_deadline(tmp_path):
    spec = make_spec(
        tmp_path,
        nodes="2:8",
        gpus_per_node="8",
        queue="team-a-queue",
        priority_class="high-priority",
        max_runtime="12h",
        max_restarts="5",
        ttl_after_finished="1d",
    )
    job = pytorchjob.render(spec, IMAGE, make_run(spec), "ml")[0]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 7
    assert job["spec"]["elasticPolicy"] == {"minReplicas": 2, "maxReplicas": 8, "rdzvBackend": "c10d", "maxRestarts": 5}
    assert job["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 86400,
        "backoffLimit": 5,
        "activeDeadlineSeconds": 12 * 3600,
        "schedulingPolicy": {"queue": "team-a-queue", "priorityClass": "high-priority"},
    }
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    master_pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert master_pod["spec"]["priorityClassName"] == "high-priority"
    assert "kueue.x-k8s.io/queue-name" not in master_pod["metadata"]["labels"]  # Kueue reads it from the job


def test_mig_profile_is_requested_as_its_extended_resource(tmp_path):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="1g.10gb")
    for backend in ("pytorchjob", "trainjob", "job"):
        primary = render_run(spec, IMAGE, make_run(spec), "ml", backend)[0]
        text = yaml.safe_dump(primary)
        assert "nvidia.com/mig-1g.10gb: '1'" in text
        assert "nvidia.com/gpu:" not in text.replace("key: nvidia.com/gpu", "")


def test_every_backend_starts_the_interpreter_the_image_has(tmp_path):
    """The image's interpreter (found in its base) travels with its reference into every manifest."""
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="0")
    conda = JobImage(IMAGE.reference, "/opt/conda/bin/python")
    for backend, path in (
        ("pytorchjob", ["spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0]),
        ("trainjob", ["spec", "trainer"]),
        ("job", ["spec", "template", "spec", "containers", 0]),
    ):
        manifests = render_run(spec, conda, make_run(spec), "ml", backend)
        assert output_location.image_python(manifests) == "/opt/conda/bin/python", backend  # what `vdk outputs` runs
        container = manifests[0]
        for key in path:
            container = container[key]
        assert container["command"][:3] == ["/opt/conda/bin/python", "-m", layout.LAUNCHER_MODULE], backend
        assert container["image"] == IMAGE.reference


def test_labels_annotations_and_environment(tmp_path):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="0", env={"HF_HOME": "/cache", "PYTHONPATH": "/extra/lib"})
    run = make_run(spec, reason="nightly retrain")
    for backend in ("pytorchjob", "trainjob", "job"):
        manifests = render_run(spec, IMAGE, run, "ml", backend)
        for manifest in manifests:
            labels = manifest["metadata"]["labels"]
            assert labels["vdk.io/job-name"] == "mnist-ddp"
            assert labels["vdk.io/run"] == run.name
            assert labels["vdk.io/team"] == "Vision-Research"  # a label value; the exact team is annotated
            assert labels["vdk.io/backend"] == backend
        annotations = manifests[0]["metadata"]["annotations"]
        assert annotations == {
            "vdk.io/git-commit": PROVENANCE.git_commit,
            "vdk.io/git-dirty": "true",
            "vdk.io/git-diff-sha256": PROVENANCE.git_diff_sha256,
            "vdk.io/git-remote": PROVENANCE.git_remote,
            "vdk.io/deployed-by": "ada@example.com",
            "vdk.io/deployed-at": "2026-01-02T03:04:05Z",
            "vdk.io/reason": "nightly retrain",
            "vdk.io/image": IMAGE.reference,
            "vdk.io/image-digest": IMAGE.reference.split("@")[1],
            "vdk.io/spec-sha256": spec.fingerprint(),
            "vdk.io/team": "Vision Research",
        }
    env = pod_template.env(spec, make_run(spec))
    assert {"name": "HF_HOME", "value": "/cache"} in env
    assert {"name": "PYTHONPATH", "value": f"{layout.PYTHONPATH}:/extra/lib"} in env
    assert [e["name"] for e in env].count("PYTHONPATH") == 1


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob", "job"])
def test_every_backend_gives_its_pods_the_stall_watchdog_settings(tmp_path, backend):
    def training_env(spec) -> dict[str, str]:
        main = render_run(spec, IMAGE, make_run(spec), "ml", backend, trainer_cluster("runtimePatches"))[0]
        if backend == "trainjob":
            env = main["spec"]["trainer"]["env"]
        elif backend == "pytorchjob":
            env = containers_of(main)["Worker"]["env"]
        else:
            env = main["spec"]["template"]["spec"]["containers"][0]["env"]
        return {e["name"]: e.get("value") for e in env}

    default = training_env(make_spec(tmp_path / "a", nodes="2"))
    assert (default[watchdog.STALL_TIMEOUT], default[watchdog.STARTUP_TIMEOUT]) == ("1800", "3600")
    off = training_env(make_spec(tmp_path / "b", nodes="2", stall_timeout="0", startup_timeout="90m"))
    assert (off[watchdog.STALL_TIMEOUT], off[watchdog.STARTUP_TIMEOUT]) == ("0", "5400")
    assert WatchdogSettings.from_env(off) == WatchdogSettings(0, 5400)  # what the runtime reads of it


def test_git_annotations_say_only_what_is_known(tmp_path):
    spec = make_spec(tmp_path)
    outside = render_run(spec, IMAGE, make_run(spec, provenance=OUTSIDE_GIT), "ml", "job")[0]["metadata"]["annotations"]
    assert not [key for key in outside if key.startswith("vdk.io/git-")]  # no commit, so no dirty flag either
    clean = dataclasses.replace(PROVENANCE, git_dirty=False, git_diff_sha256=None)
    committed = render_run(spec, IMAGE, make_run(spec, provenance=clean), "ml", "job")[0]["metadata"]["annotations"]
    assert (committed["vdk.io/git-commit"], committed["vdk.io/git-dirty"]) == (PROVENANCE.git_commit, "false")
    assert "vdk.io/git-diff-sha256" not in committed


def test_generous_rendezvous_timeouts():
    (flag,) = pod_template.torchrun_flags()
    conf = dict(item.split("=") for item in flag.removeprefix("--rdzv-conf=").split(","))
    # static rendezvous reads `timeout`, c10d `join_timeout` and `read_timeout`; torch defaults 600/600/60
    assert int(conf["timeout"]) >= 1800 and int(conf["join_timeout"]) >= 1800 and int(conf["read_timeout"]) >= 300


@pytest.mark.parametrize("mechanism", trainjob.MECHANISMS)
def test_trainjob(tmp_path, mechanism):
    spec = make_spec(
        tmp_path, nodes="4", gpus_per_node="8", max_runtime="2h", queue="q1", env={"WANDB_MODE": "offline"}
    )
    run = make_run(spec)
    job = trainjob.render(spec, IMAGE, run, "ml", mechanism=mechanism)[0]
    assert job["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == IMAGE.reference
    assert trainer["command"] == layout.launch_command(spec, IMAGE.python, pod_template.torchrun_flags())
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (4, 8)
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    assert {"name": "WANDB_MODE", "value": "offline"} in trainer["env"]
    assert not any(e["name"].startswith("PET_") for e in trainer["env"])  # the runtime sets those
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q1"
    others = set(trainjob.MECHANISMS) - {mechanism}
    assert mechanism in job["spec"] and not others & set(job["spec"])
    assert ("activeDeadlineSeconds" in job["spec"]) == (mechanism == trainjob.RUNTIME_PATCHES)
    text = yaml.safe_dump(job["spec"][mechanism])
    assert "mountPath: /dev/shm" in text and "medium: Memory" in text and "name: node" in text
    assert "key: nvidia.com/gpu" in text
    if mechanism == trainjob.RUNTIME_PATCHES:
        patch = job["spec"]["runtimePatches"][0]
        replicated = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        template = replicated["template"]["spec"]["template"]
        assert template["metadata"]["labels"]["vdk.io/run"] == run.name
        assert template["spec"]["containers"] == [
            {"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
        ]


def test_trainer_version_to_mechanism():
    assert trainjob.mechanism_for_version("v2.0.1") == trainjob.POD_SPEC_OVERRIDES
    assert trainjob.mechanism_for_version("v2.1.0") == trainjob.POD_TEMPLATE_OVERRIDES
    assert trainjob.mechanism_for_version("2.2.0") == trainjob.RUNTIME_PATCHES
    assert trainjob.mechanism_for_version("v2.3.0-rc.1") == trainjob.RUNTIME_PATCHES
    assert trainjob.mechanism_for_version("v1.9.4") is None
    assert trainjob.mechanism_for_version("latest") is None
    assert trainjob.mechanism_from_fields({"runtimeRef", "podTemplateOverrides"}) == trainjob.POD_TEMPLATE_OVERRIDES
    assert trainjob.mechanism_from_fields({"runtimeRef", "trainer"}) is None


def test_indexed_job_and_headless_service(tmp_path):
    spec = make_spec(tmp_path, nodes="3", gpus_per_node="4", max_runtime="1h", max_restarts="2")
    run = make_run(spec)
    job, service = indexed_job.render(spec, IMAGE, run, "ml")
    js = job["spec"]
    assert (js["completionMode"], js["completions"], js["parallelism"]) == ("Indexed", 3, 3)
    # a disruption first: its container, told to stop, ends with 143, which the exit code rule would fail the Job on
    assert js["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": "pytorch", "operator": "NotIn", "values": [0]}},
    ]
    assert (js["backoffLimit"], js["activeDeadlineSeconds"], js["ttlSecondsAfterFinished"]) == (2, 3600, 7 * 86400)
    pod_spec = js["template"]["spec"]
    assert pod_spec["restartPolicy"] == "Never"
    assert pod_spec["subdomain"] == service["metadata"]["name"] == run.name
    env = {e["name"]: e for e in pod_spec["containers"][0]["env"]}
    assert env["PET_NNODES"]["value"] == "3" and env["PET_NPROC_PER_NODE"]["value"] == "4"
    assert (
        env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    # Rank 0 is pod <run>-0 under the Service: the hostname an Indexed Job gives its index 0.
    assert env["PET_MASTER_ADDR"]["value"] == f"{run.name}-0.{run.name}"
    assert env["PET_MASTER_PORT"]["value"] == str(pod_template.RENDEZVOUS_PORT)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    pod_labels = js["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"][0]["port"] == pod_spec["containers"][0]["ports"][0]["containerPort"]


def test_limitations_are_reported(tmp_path):
    spec = make_spec(tmp_path, nodes="2:8", priority_class="high", max_runtime="1h")
    assert limitations(spec, "pytorchjob") == []
    notes = " | ".join(limitations(spec, "trainjob", trainer_cluster(trainjob.POD_SPEC_OVERRIDES)))
    assert "runs at 8 nodes" in notes and "priority_class" in notes and "max_runtime" in notes
    assert "runs at 8 nodes" in " ".join(limitations(spec, "job"))
    assert indexed_job.render(spec, IMAGE, make_run(spec), "ml")[0]["spec"]["completions"] == 8


def test_run_record_holds_what_reruns_the_run(tmp_path):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="0")
    run = make_run(spec)
    manifests = render_run(spec, IMAGE, run, "ml", "job")
    configmap = manifests[-1]
    assert configmap["metadata"]["name"] == f"{run.name}-record"
    rec = run_record.parse(configmap)
    assert (rec.run_name, rec.backend, rec.image) == (run.name, "job", IMAGE.reference)
    assert rec.manifests == manifests[:-1]
    assert rec.spec == spec.to_dict() and rec.provenance["git_commit"] == PROVENANCE.git_commit

    again = run_record.rerun_manifests(
        rec, "mnist-ddp-zz000001", deployer="bob@example.com", deployed_at="2026-02-01T00:00:00Z"
    )
    job, service, new_record = again
    renamed = yaml.safe_dump([job, service]).replace(f"vdk.io/rerun-of: {run.name}", "")
    assert "mnist-ddp-zz000001" in renamed and run.name not in renamed
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE.reference
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"] == "mnist-ddp-zz000001-0.mnist-ddp-zz000001"
    annotations = job["metadata"]["annotations"]
    assert annotations["vdk.io/rerun-of"] == run.name
    assert annotations["vdk.io/deployed-by"] == "bob@example.com"
    assert annotations["vdk.io/git-commit"] == PROVENANCE.git_commit and "vdk.io/reason" not in annotations
    assert run_record.parse(new_record).manifests == [job, service]
    with pytest.raises(MLTrainingError, match="not a readable run record"):
        run_record.parse({"metadata": {"name": "x"}, "data": {"run": "x"}})


def test_dry_run_yaml_is_multi_document_and_round_trips(tmp_path):
    spec = make_spec(tmp_path, nodes="2")
    manifests = render_run(spec, IMAGE, make_run(spec), "ml", "job")
    text = to_yaml(manifests)
    assert text.count("\n---\n") == 2
    assert list(yaml.safe_load_all(text)) == manifests


@given(st.from_regex(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?", fullmatch=True))
def test_run_names_are_dns_labels_with_room_for_operator_suffixes(job_name):
    name = new_run_name(job_name)
    assert DNS_1035.match(name) and name.startswith(job_name + "-")
    assert len(f"{name}-worker-99") <= 63  # PyTorchJob pods/services
    assert len(f"{name}-node-0-99") <= 63  # TrainJob (JobSet) pod hostnames


def test_run_names_differ_and_bad_job_names_are_refused():
    assert len({new_run_name("job") for _ in range(50)}) == 50
    for bad in ("Job", "9job", "job-", "a" * (MAX_JOB_NAME_LENGTH + 1), "my_job"):
        with pytest.raises(MLTrainingError):
            new_run_name(bad)


SPAWNING_SCRIPT = """
import torch
import torch.multiprocessing as mp

if __name__ == "__main__":
    mp.spawn(print, nprocs=torch.cuda.device_count())
"""


def test_a_script_that_spawns_its_workers_gets_one_launcher_process_per_node(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "spawner", ml="gpus_per_node = 4", files={"train.py": SPAWNING_SCRIPT}))
    run = make_run(spec)
    assert pytorchjob.render(spec, IMAGE, run, "ml")[0]["spec"]["nprocPerNode"] == "1"
    assert (
        trainjob.render(spec, IMAGE, run, "ml", mechanism=trainjob.MECHANISMS[0])[0]["spec"]["trainer"][
            "numProcPerNode"
        ]
        == 1
    )
    env = {
        e["name"]: e.get("value")
        for e in indexed_job.render(spec, IMAGE, run, "ml")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["PET_NPROC_PER_NODE"] == "1"
    # the launcher gets the node's GPUs, which its workers share
    container = containers_of(pytorchjob.render(spec, IMAGE, run, "ml")[0])["Master"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_a_run_named_after_an_execution_has_the_same_name_for_every_attempt():
    from vdk.plugin.ml_training.k8s.runs.identity import run_name_for

    name = run_name_for("mnist-ddp", "mnist-ddp-1747130400")
    assert name == run_name_for("mnist-ddp", "mnist-ddp-1747130400")  # a retry finds the first attempt's run
    assert name != run_name_for("mnist-ddp", "mnist-ddp-1747130401")
    assert re.fullmatch(r"mnist-ddp-[a-z0-9]{8}", name) and len(name) == len(new_run_name("mnist-ddp"))

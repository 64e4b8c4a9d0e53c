"""What each backend's controller makes of the manifests a run renders: its pods, with the names,
hostnames, labels and environment the controller gives them. The one place where the local cluster
(local_cluster.py) knows a controller; every fact cites where it comes from.

Sources (read with the repositories at these tags):
- Kubeflow Training Operator v1 (PyTorchJob), kubeflow/trainer v1.9.4:
  pkg/controller.v1/pytorch/envvar.go (setPodEnv), pkg/controller.v1/pytorch/master.go
  (MasterEnvVarGenerator), pkg/controller.v1/common/pod.go (createNewPod: labels, pod names,
  SetClusterSpec, restart policy), pkg/controller.v1/common/job_controller.go (GenLabels),
  pkg/controller.v1/common/service.go (a headless Service per replica, named like its pod).
- Kubeflow Trainer v2.3.0 (TrainJob): pkg/runtime/framework/plugins/torch/torch.go (EnforceMLPolicy),
  pkg/runtime/framework/plugins/jobset/builder.go (Trainer: image, command, args, env),
  pkg/constants/constants.go (PET_* names, ContainerTrainerPort 29500, JobCompletionIndexFieldPath),
  manifests/base/runtimes/torch_distributed.yaml (replicated job and container `node`).
- JobSet (under a TrainJob): child Jobs `<jobset>-<replicatedJob>-<jobIndex>`, pod subdomain = the
  JobSet's name (its headless Service), labels jobset.sigs.k8s.io/jobset-name, replicatedjob-name.
- Trainer v2.3.0 with the TrainJobStatus feature gate: pkg/runtime/framework/plugins/trainjobstatus/
  trainjobstatus.go (EnforceMLPolicy: three variables, a projected volume of the status server's token and CA,
  upserted into every trainer container).
- Kubernetes Job controller (Indexed Jobs, under the plain Job and JobSet alike),
  pkg/controller/job/job_controller.go and indexed_job_utils.go: pod hostname `<job>-<index>`, the
  completion index as annotation and label, and JOB_COMPLETION_INDEX added to every container.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from dataclasses import field

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation and label (k8s Job controller)
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # k8s Job controller, addCompletionIndexEnvVariable
# kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1: OperatorNameLabel, JobNameLabel, ReplicaTypeLabel, ...
PYTORCHJOB_OPERATOR = "training.kubeflow.org/operator-name"
PYTORCHJOB_JOB_NAME = "training.kubeflow.org/job-name"
PYTORCHJOB_REPLICA_TYPE = "training.kubeflow.org/replica-type"
PYTORCHJOB_REPLICA_INDEX = "training.kubeflow.org/replica-index"
PYTORCHJOB_JOB_ROLE = "training.kubeflow.org/job-role"
PYTORCHJOB_PORT_NAME = "pytorchjob-port"  # kubeflowv1.PyTorchJobDefaultPortName
TRAINER_PORT = 29500  # Trainer v2.3.0 constants.ContainerTrainerPort


@dataclass
class Pod:
    """A pod as its controller creates it: what local_cluster.py runs as one container."""

    name: str
    hostname: str
    container: dict  # the training container: image, command, args, env, workingDir, volumeMounts, resources
    volumes: list[dict]
    restart_policy: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    subdomain: str | None = None
    # Names the other pods reach this one by (its hostname, hostname.subdomain, Services selecting it).
    dns_names: list[str] = field(default_factory=list)

    def rendezvous_port(self) -> int | None:
        """The port torch's rendezvous listens on when this pod is rank 0 (PET_MASTER_PORT)."""
        for entry in self.container.get("env") or []:
            if entry["name"] == "PET_MASTER_PORT" and "value" in entry:
                return int(entry["value"])
        return None


# trainjobstatus.go: where the trainer containers find the status server's token and CA
STATUS_VOLUME = "kubeflow-trainer-token"
STATUS_MOUNT = "/var/run/secrets/kubeflow/trainer"


def pods(manifests: list[dict], backend: str, port: int, status_url: str | None = None) -> list[Pod]:
    """The pods of a run, node rank 0 first. `port` replaces the fixed rendezvous port (23456 of the
    PyTorchJob's master port, 29500 of Trainer and of the plain Job), so that runs on the host network
    do not collide: the only thing the local cluster changes. `status_url`: Trainer's TrainJobStatus gate is on,
    and its status server listens there (`https://<service>.<namespace>.svc:<port>`)."""
    main = manifests[0]
    if backend == "pytorchjob":
        return _pytorchjob_pods(main, port)
    if backend == "trainjob":
        return _trainjob_pods(main, port, status_url)
    if backend == "job":
        return _indexed_job_pods(main, port)
    raise ValueError(f"no controller emulation for backend {backend!r}")


# --- Training Operator v1: PyTorchJob -------------------------------------------------------------


def _pytorchjob_pods(job: dict, port: int) -> list[Pod]:
    job = copy.deepcopy(job)
    name = job["metadata"]["name"]
    spec = job["spec"]
    if spec.get("elasticPolicy"):
        raise NotImplementedError("elastic PyTorchJobs (PET_RDZV_* from elastic.go) are not emulated")
    replicas = spec["pytorchReplicaSpecs"]
    for replica in replicas.values():  # the master port is the container port named pytorchjob-port
        for container in replica["template"]["spec"]["containers"]:
            for p in container.get("ports") or []:
                if p.get("name") == PYTORCHJOB_PORT_NAME:
                    p["containerPort"] = port
    master_port = _named_port(replicas["Master"], PYTORCHJOB_PORT_NAME)  # master.go getPortFromPyTorchJob
    total = sum(int(r["replicas"]) for r in replicas.values())  # envvar.go getTotalReplicas
    nproc = spec.get("nprocPerNode")
    nproc_int = int(nproc) if nproc is not None and str(nproc).isdigit() else 1  # getNprocPerNodeInt
    master_addr = f"{name}-master-0"  # replicaName(job, Master, 0): the Master's headless Service
    out = []
    for rtype in ("Master", "Worker"):  # common/pod.go: one pod per replica index
        replica = replicas.get(rtype)
        if replica is None:
            continue
        for index in range(int(replica["replicas"])):
            template = copy.deepcopy(replica["template"])
            pod_name = f"{name}-{rtype.lower()}-{index}"  # GenGeneralName
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                PYTORCHJOB_OPERATOR: "pytorchjob-controller",  # GenLabels
                PYTORCHJOB_JOB_NAME: name,
                PYTORCHJOB_REPLICA_TYPE: rtype.lower(),
                PYTORCHJOB_REPLICA_INDEX: str(index),
            }
            if rtype == "Master":
                labels[PYTORCHJOB_JOB_ROLE] = "master"  # IsMasterRole
            rank = index + 1 if rtype == "Worker" else index  # envvar.go: a Worker's rank is index + 1
            injected = [
                {"name": "PYTHONUNBUFFERED", "value": "1"},
                # master.go MasterEnvVarGenerator.Generate, in its order
                {"name": "MASTER_PORT", "value": str(master_port)},
                {"name": "PET_MASTER_PORT", "value": str(master_port)},
                {"name": "MASTER_ADDR", "value": master_addr},
                {"name": "PET_MASTER_ADDR", "value": master_addr},
                {"name": "WORLD_SIZE", "value": str(total * nproc_int)},
                {"name": "RANK", "value": str(rank)},
                {"name": "PET_NODE_RANK", "value": str(rank)},
            ]
            if nproc is not None:
                injected.append({"name": "PET_NPROC_PER_NODE", "value": str(nproc)})
            injected.append({"name": "PET_NNODES", "value": str(total)})
            for container in template["spec"]["containers"]:  # setPodEnv: every container, appended
                container["env"] = [*(container.get("env") or []), *injected]
            out.append(
                Pod(
                    name=pod_name,
                    hostname=pod_name,  # no hostname in the template: the kubelet uses the pod's name
                    container=_training_container(template, "pytorch"),
                    volumes=template["spec"].get("volumes") or [],
                    # core.SetRestartPolicy: the replica's policy (ExitCode becomes Never)
                    restart_policy="Never" if replica.get("restartPolicy") == "ExitCode" else replica["restartPolicy"],
                    labels=labels,
                    dns_names=[pod_name],  # common/service.go: a Service per replica, named like its pod
                )
            )
    return out


def _named_port(replica: dict, port_name: str) -> int:
    for container in replica["template"]["spec"]["containers"]:
        if container["name"] != "pytorch":
            continue
        for p in container.get("ports") or []:
            if p.get("name") == port_name:
                return int(p["containerPort"])
    raise ValueError(f"the Master has no port named {port_name} (the operator would refuse the job)")


# --- Trainer v2: TrainJob on the torch-distributed runtime ---------------------------------------


def _trainjob_pods(trainjob: dict, port: int, status_url: str | None = None) -> list[Pod]:
    name = trainjob["metadata"]["name"]
    trainer = trainjob["spec"]["trainer"]
    nodes = int(trainer.get("numNodes", 1))
    nproc = trainer.get("numProcPerNode")
    if nproc is None:
        raise NotImplementedError("numProcPerNode `auto` (derived from resourcesPerNode) is not emulated")
    # torch_distributed.yaml: replicated job `node`, container `node`, no command; builder.go Trainer()
    container: dict = {"name": "node", "image": trainer["image"]}
    if "command" in trainer:
        container["command"] = list(trainer["command"])
    if "args" in trainer:
        container["args"] = list(trainer["args"])
    if "resourcesPerNode" in trainer:
        container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
    env = _upsert([], trainer.get("env") or [])  # apply.UpsertEnvVars(trainJob.Spec.Trainer.Env)
    env = _upsert(  # torch.go EnforceMLPolicy: petEnvs, then masterEnvVars (not torchtune)
        env,
        [
            {"name": "PET_NNODES", "value": str(nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": _annotation(COMPLETION_INDEX)}}},
            {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(port)},  # constants.ContainerTrainerPort (29500) on a cluster
        ],
    )
    container["env"] = env
    patch = _runtime_patch(trainjob)
    pod_labels = dict((patch.get("metadata") or {}).get("labels") or {})
    pod_spec = patch.get("spec") or {}
    for change in pod_spec.get("containers") or []:
        if change.get("name") == "node":
            container["volumeMounts"] = [*(container.get("volumeMounts") or []), *(change.get("volumeMounts") or [])]
            container["env"] = _upsert(container["env"], change.get("env") or [])
    volumes = copy.deepcopy(pod_spec.get("volumes") or [])
    if status_url is not None:  # trainjobstatus.go EnforceMLPolicy
        namespace = trainjob["metadata"].get("namespace", "default")
        path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
        container["env"] = _upsert(
            container["env"],
            [
                {"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": status_url + path},
                {"name": "KUBEFLOW_TRAINER_SERVER_CA_CERT", "value": f"{STATUS_MOUNT}/ca.crt"},
                {"name": "KUBEFLOW_TRAINER_SERVER_TOKEN", "value": f"{STATUS_MOUNT}/token"},
            ],
        )
        mount = {"name": STATUS_VOLUME, "mountPath": STATUS_MOUNT, "readOnly": True}
        container["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]
        audience = path.removeprefix("/apis/")
        token = {"serviceAccountToken": {"audience": audience, "expirationSeconds": 3600, "path": "token"}}
        ca = {"configMap": {"name": f"{name}-tls-config", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
        volumes.append({"name": STATUS_VOLUME, "projected": {"sources": [token, ca]}})
    job_name = f"{name}-node-0"  # JobSet: <jobset>-<replicatedJob>-<jobIndex>
    out = []
    for index in range(nodes):
        pod_container = copy.deepcopy(container)
        _add_completion_index_env(pod_container)
        hostname = f"{job_name}-{index}"  # k8s Job controller: <job>-<index>
        out.append(
            Pod(
                name=f"{job_name}-{index}",
                hostname=hostname,
                subdomain=name,  # JobSet: the JobSet's headless Service
                container=pod_container,
                volumes=copy.deepcopy(volumes),
                # JobSet's webhook defaults a replicated job's pod restartPolicy to OnFailure
                restart_policy="OnFailure",
                labels={
                    **pod_labels,
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": "node",
                    "batch.kubernetes.io/job-name": job_name,
                    COMPLETION_INDEX: str(index),
                },
                annotations={COMPLETION_INDEX: str(index)},
                dns_names=[hostname, f"{hostname}.{name}"],
            )
        )
    return out


def _runtime_patch(trainjob: dict) -> dict:
    """The pod template patch of the `node` replicated job (runtimePatches, v2.2 and later)."""
    for patch in trainjob["spec"].get("runtimePatches") or []:
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if job["name"] == "node":
                return job["template"]["spec"]["template"]
    if trainjob["spec"].get("podTemplateOverrides") or trainjob["spec"].get("podSpecOverrides"):
        raise NotImplementedError("TrainJobs of Trainer v2.0/v2.1 (pod overrides) are not emulated")
    return {}


# --- Kubernetes: the plain Indexed Job ------------------------------------------------------------


def _indexed_job_pods(job: dict, port: int) -> list[Pod]:
    name = job["metadata"]["name"]
    spec = job["spec"]
    template = copy.deepcopy(spec["template"])
    for container in template["spec"]["containers"]:
        for entry in container.get("env") or []:
            if entry["name"] == "PET_MASTER_PORT":
                entry["value"] = str(port)
        for p in container.get("ports") or []:
            p["containerPort"] = port
    subdomain = template["spec"].get("subdomain")
    out = []
    for index in range(int(spec["completions"])):
        pod_template = copy.deepcopy(template)
        container = _training_container(pod_template, "pytorch")
        _add_completion_index_env(container)
        hostname = f"{name}-{index}"  # job_controller.go: template.Spec.Hostname = <job>-<index>
        out.append(
            Pod(
                name=f"{name}-{index}",
                hostname=hostname,
                subdomain=subdomain,
                container=container,
                volumes=pod_template["spec"].get("volumes") or [],
                restart_policy=pod_template["spec"].get("restartPolicy", "Never"),
                labels={
                    **(pod_template.get("metadata") or {}).get("labels", {}),
                    "batch.kubernetes.io/job-name": name,
                    COMPLETION_INDEX: str(index),
                },
                annotations={COMPLETION_INDEX: str(index)},
                dns_names=[hostname, *([f"{hostname}.{subdomain}"] if subdomain else [])],
            )
        )
    return out


# --- shared --------------------------------------------------------------------------------------


def _training_container(template: dict, name: str) -> dict:
    containers = template["spec"]["containers"]
    return next((c for c in containers if c["name"] == name), containers[0])


def _annotation(key: str) -> str:
    return f"metadata.annotations['{key}']"


def _add_completion_index_env(container: dict) -> None:
    """indexed_job_utils.go addCompletionIndexEnvVariable: appended unless the container sets it. (With the
    PodIndexLabel feature, on by default since 1.28, it reads the label; the annotation has the same value.)"""
    env = container.setdefault("env", [])
    if not any(e["name"] == COMPLETION_INDEX_ENV for e in env):
        field_path = f"metadata.labels['{COMPLETION_INDEX}']"
        env.append({"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": field_path}}})


def _upsert(env: list[dict], changes: list[dict]) -> list[dict]:
    """Trainer's apply.UpsertEnvVars: a variable of the same name is replaced in place, others appended."""
    out = [dict(e) for e in env]
    for change in changes:
        at = next((i for i, e in enumerate(out) if e["name"] == change["name"]), None)
        if at is None:
            out.append(dict(change))
        else:
            out[at] = dict(change)
    return out

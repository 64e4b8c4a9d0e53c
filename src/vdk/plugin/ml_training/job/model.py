"""The job model: `MLJobSpec` and the values it is made of (entrypoint, nodes, accelerators, data mounts, secret
variables), frozen dataclasses holding validated values. Built by load.py; read by everything else in the plugin
(local runs, images, Kubernetes manifests), never config.ini.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.job.config_file import CONFIG_FILE
from vdk.plugin.ml_training.job.config_file import ENV_SECTION
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.image_reference import ImageReference
from vdk.plugin.ml_training.job.image_reference import parse_reference
from vdk.plugin.ml_training.job.keys import WHERE_IT_RUNS
from vdk.plugin.ml_training.job.keys import default_of
from vdk.plugin.ml_training.job.literal_secrets import refuse_secret_arguments
from vdk.plugin.ml_training.job.literal_secrets import refuse_secret_env
from vdk.plugin.ml_training.job.literal_secrets import refuse_secret_parameters
from vdk.plugin.ml_training.job.names import kubernetes_job_name
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.nvidia import GPU_RESOURCE
from vdk.plugin.ml_training.vocabulary.nvidia import mig_resource

if TYPE_CHECKING:
    from vdk.plugin.ml_training.job.sweep import SweepSpec

PVC_SCHEME = "pvc:"


@dataclass(frozen=True)
class Entrypoint:
    """What the training process runs: a script in the job dir, or a module (`-m pkg.mod`)."""

    target: str
    is_module: bool = False

    def argv(self) -> list[str]:
        """The part of a `python ...` / `torchrun ...` command line that names the entrypoint."""
        return ["-m", self.target] if self.is_module else [self.target]

    def file(self, job_dir: Path) -> Path:
        """The file it runs in `job_dir`: the script, or the module's `.py` or `__main__.py`."""
        if not self.is_module:
            return job_dir / self.target
        base = job_dir.joinpath(*self.target.split("."))
        return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__main__.py"

    def __str__(self) -> str:
        return " ".join(self.argv())


@dataclass(frozen=True)
class NodeRange:
    """Number of machines; `min != max` means elastic training."""

    min: int
    max: int

    @property
    def elastic(self) -> bool:
        return self.min != self.max

    def __str__(self) -> str:
        return f"{self.min}:{self.max}" if self.elastic else str(self.min)


@dataclass(frozen=True)
class Accelerators:
    """GPUs per node: a count of whole GPUs, or one MIG slice of `mig_profile`."""

    count: int
    mig_profile: str | None = None

    @property
    def resource_name(self) -> str | None:
        """The Kubernetes extended resource to request, or None for CPU-only."""
        if self.mig_profile:
            return mig_resource(self.mig_profile)
        return GPU_RESOURCE if self.count else None

    @property
    def devices(self) -> int:
        """How many devices a node's processes see."""
        return 1 if self.mig_profile else self.count

    def __str__(self) -> str:
        return self.mig_profile or str(self.count)

    def describe(self) -> str:
        """What a node gets, in words: `1 GPU`, `8 GPUs`, `a MIG slice 1g.10gb`, `no GPU`."""
        if self.mig_profile:
            return f"a MIG slice {self.mig_profile}"
        if not self.count:
            return "no GPU"
        return f"{self.count} GPU" + ("s" if self.count != 1 else "")


@dataclass(frozen=True)
class DataMount:
    """An existing PersistentVolumeClaim (a directory of it, with `sub_path`) mounted read-only at `path`."""

    path: str
    claim: str
    sub_path: str = ""

    def source(self) -> str:
        return f"{PVC_SCHEME}{self.claim}" + (f"/{self.sub_path}" if self.sub_path else "")


@dataclass(frozen=True)
class DataSource:
    """A dataset by reference ([ml-training.data]): `source` (s3://, hf:// or pvc:) at `target`, an absolute path
    of the training containers or a path relative to the run's working directory. `line`: where config.ini
    names it (for messages)."""

    target: str
    source: str
    line: int | None = field(default=None, compare=False)

    @property
    def scheme(self) -> str:
        return "pvc" if self.source.startswith(PVC_SCHEME) else self.source.split("://", 1)[0]

    @property
    def relative(self) -> bool:
        return not self.target.startswith("/")

    @property
    def fetched(self) -> bool:
        """Fetched by the cluster into the data cache (a claim is mounted as it is)."""
        return self.scheme != "pvc"

    def claim(self) -> tuple[str, str]:
        """(claim, directory of it) of a `pvc:` source."""
        claim, _, sub_path = self.source[len(PVC_SCHEME) :].partition("/")
        return claim, sub_path.strip("/")


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable of the training processes whose value is a key of a Kubernetes Secret."""

    name: str
    secret: str
    key: str

    def reference(self) -> str:
        return f"{self.secret}/{self.key}"


@dataclass(frozen=True)
class Toleration:
    """A taint of nodes that the run's pods tolerate: `key` with `value` (operator Equal), or any value of `key`
    (Exists); `effect` None tolerates every effect."""

    key: str
    value: str | None = None
    effect: str | None = None

    @property
    def operator(self) -> str:
        return "Equal" if self.value is not None else "Exists"

    def to_dict(self) -> dict[str, str]:
        """As a pod's `tolerations` entry."""
        out = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out

    def __str__(self) -> str:
        return (
            self.key + (f"={self.value}" if self.value is not None else "") + (f":{self.effect}" if self.effect else "")
        )


@dataclass(frozen=True)
class JobIdentity:
    """Who a job is to the cluster verbs (`vdk show`, `list`, `execute`, `delete`, `diff`): its name, team, kube
    context and namespace, read from the few keys that say them (load.load_job_identity), so that a key those
    verbs do not use cannot stop them. The spec (`MLJobSpec`) says the same of a job it validated whole."""

    name: str  # the job directory's name
    job_dir: Path
    team: str | None
    kube_context: str | None
    namespace: str | None

    @property
    def config_path(self) -> Path:
        return self.job_dir / CONFIG_FILE

    def kubernetes_name(self, name: str | None = None) -> str:
        """The job name as Kubernetes will carry it (`name`: the one of -n); raises JobConfigError if it cannot be
        one."""
        return kubernetes_job_name(name or self.name, self.config_path, from_option=bool(name))


@dataclass(frozen=True)
class MLJobSpec:
    """One ml-training job, fully validated. Build it with `load_job_spec`."""

    name: str
    job_dir: Path
    team: str | None
    entrypoint: Entrypoint
    args: tuple[str, ...]
    nodes: NodeRange
    gpus_per_node: Accelerators
    procs_per_node: int  # processes the launcher (torchrun) starts per node: 1 when the script spawns its own
    cpu: str
    memory: str
    shm_size: str
    base_image: str
    base_python: str | None
    base_python_version: str | None
    base_provides: tuple[str, ...]
    backend: str
    queue: str | None
    priority_class: str | None
    max_restarts: int
    max_runtime_seconds: int | None
    ttl_after_finished_seconds: int
    smoke_steps: int
    smoke_processes: int
    smoke_timeout_seconds: int
    smoke_device_tracking: bool
    env: tuple[tuple[str, str], ...]
    registry: str | None
    namespace: str | None
    kube_context: str | None
    # The stall watchdog of cluster and full local runs (runtime/watchdog.py), in seconds; 0 turns it off.
    stall_timeout_seconds: int = default_of("stall_timeout")
    startup_timeout_seconds: int = default_of("startup_timeout")
    # The GPU sampler of every node (runtime/gpu_sampler.py) and the idle policy, in seconds; 0 turns each off.
    gpu_sample_period_seconds: int = default_of("gpu_sample_period")
    idle_timeout_seconds: int = default_of("idle_timeout")
    # The entrypoint starts its workers itself (mp.spawn, one per GPU): each node runs one launcher process.
    spawns_workers: bool = False
    smoke_args: tuple[str, ...] | None = None  # smoke runs' arguments instead of `args` (None: `args`)
    smoke_epoch_end: bool = default_of("smoke_epoch_end")  # smoke runs cut epochs and run the end of the first one
    # Frameworks resume from this run's last checkpoint and save one when told to stop (runtime/resume.py): auto, off
    resume: str = default_of("resume")
    # Seconds a pod told to stop has to save and exit (terminationGracePeriodSeconds); None: Kubernetes' default
    termination_grace_period_seconds: int | None = None
    smoke_resume: str = default_of("smoke_resume")  # the smoke run's second start (ops/resume_check.py)
    # Restarts after disruptions, which max_restarts does not count (runtime/lineage.py counts a run's starts)
    max_disruptions: int = default_of("max_disruptions")
    import_check: bool = default_of("import_check")  # `vdk run` and `vdk deploy` check the job's imports first
    # executions that the Control Service's schedule started run only when something changed (ops/cs_launch.py)
    if_changed: bool = default_of("if_changed")
    # pushed images get their SBOM and build provenance attached (image/attestations.py)
    attestations: bool = default_of("attestations")
    # Local runs put requirements.txt, installed by uv, on the ranks' path (local/overlay.py); False: vdk's env as is
    requirements_overlay: bool = default_of("requirements_overlay")
    # how uv searches several package indexes: every one, as pip does, or the first that has a package (uv_install.py)
    index_strategy: str = default_of("index_strategy")
    # Cluster runs: the PersistentVolumeClaim whose directory `<run>` is the working directory (job/mounts.py).
    output_pvc: str | None = None
    mlflow_tracking_uri: str | None = None  # the MLflow server its runs are logged to (runtime/mlflow_runs.py)
    mounts: tuple[DataMount, ...] = ()  # [ml-training.mounts]: datasets on existing claims, read-only
    secrets: tuple[SecretEnv, ...] = ()  # [ml-training.secrets]: variables whose values are Secret keys
    sweep: SweepSpec | None = None  # [ml-training.sweep]: a hyperparameter sweep (job/sweep.py)
    data: tuple[DataSource, ...] = ()  # [ml-training.data]: datasets by reference (job/datasets.py)
    data_cache_pvc: str | None = None  # the claim fetched data is cached in, a directory per version
    smoke_data: tuple[tuple[str, str], ...] = ()  # (target, local path) that local smoke runs use instead
    smoke_sample_files: int = default_of(
        "smoke_sample_files"
    )  # else a local smoke run fetches at most this many files of each dataset
    smoke_sample_size: str = default_of("smoke_sample_size")  # and at most this many bytes
    # Placement of the run's pods (k8s/placement.py): a GPU model (a value of the node label `gpu_type_label`),
    # node labels to select, taints to tolerate, Secrets to pull the image with, the pods' service account.
    gpu_type: str | None = None
    gpu_type_label: str = default_of("gpu_type_label")
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    # Where team, namespace and queue came from (key -> "[ml-training] queue of ...", "-t", ...), for the
    # dry run; not part of what the job is.
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The [ml-training] keys given for this run only (`--set KEY=VALUE`, `--args`: job/overrides.py), as given;
    # their values are in the fields above. Kept in a deployed run's record.
    overrides: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The plugin's keys in [vdk] of config.ini as the spec was read with them (job/settings.job_vdk_section), for
    # the VDK settings a verb reads after the spec (ml_training_run_mode): config.ini is not read again. None: a
    # spec made otherwise, whose verbs read [vdk] from job_dir.
    vdk_section: tuple[tuple[str, str], ...] | None = field(default=None, compare=False, repr=False)
    # `base_image` parsed, once: carried by dataclasses.replace (it is parsed again only when base_image changed).
    # Read it as `base_reference`.
    _base_reference: ImageReference | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        """No credential in what goes into images, manifests and records, whoever built the spec (load.py
        refuses them first, saying where they came from). The base image is parsed here unless the reference
        given is that of `base_image` already."""
        refuse_secret_arguments("args", self.args, self.config_path, SECTION)
        refuse_secret_arguments("smoke_args", self.smoke_args, self.config_path, SECTION)
        refuse_secret_env(self.env, self.config_path, ENV_SECTION)
        if self.sweep is not None:
            refuse_secret_parameters(
                [(p.name, p.values or (p.low, p.high)) for p in self.sweep.parameters],
                [("args", self.args), ("smoke_args", self.smoke_args or ())],
                self.env,
                self.config_path,
            )
        if self._base_reference is None or self._base_reference.written != self.base_image:
            object.__setattr__(self, "_base_reference", parse_reference(self.base_image))

    @property
    def base_reference(self) -> ImageReference:
        """The base image, parsed (registry, repository, tag, digest)."""
        assert self._base_reference is not None  # set by __post_init__
        return self._base_reference

    @property
    def vdk_settings(self) -> dict[str, str] | None:
        """The plugin's [vdk] keys read with the spec (None: not read with it)."""
        return None if self.vdk_section is None else dict(self.vdk_section)

    def origin(self, key: str) -> str | None:
        return dict(self.origins).get(key)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def config_path(self) -> Path:
        return self.job_dir / CONFIG_FILE

    @property
    def entrypoint_file(self) -> Path:
        """The file the entrypoint runs (a module's `.py` or `__main__.py`)."""
        return self.entrypoint.file(self.job_dir)

    @property
    def import_root(self) -> Path:
        """Where the entrypoint's absolute imports are looked up first: the script's directory, or the
        working directory (the job directory) for `-m`."""
        return self.job_dir if self.entrypoint.is_module else self.entrypoint_file.parent

    def command_args(self, smoke: bool = False) -> list[str]:
        """Entrypoint and its arguments (a smoke run's: `smoke_args` when set), as they follow `python` or
        `torchrun` on a command line."""
        return self.entrypoint.argv() + list(self.arguments(smoke))

    def arguments(self, smoke: bool = False) -> tuple[str, ...]:
        return self.smoke_args if smoke and self.smoke_args is not None else self.args

    def arguments_key(self, smoke: bool = False) -> str:
        """The [ml-training] key the arguments of a run come from."""
        return "smoke_args" if smoke and self.smoke_args is not None else "args"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able view of what defines the training run (not where the job dir lies)."""
        data = dataclasses.asdict(self)
        data.pop("job_dir")
        data.pop("origins")
        data.pop("overrides")
        data.pop("vdk_section")
        data.pop("_base_reference")
        data["entrypoint"] = str(self.entrypoint)
        data["nodes"] = str(self.nodes)
        data["gpus_per_node"] = str(self.gpus_per_node)
        data["args"] = list(self.args)
        data["smoke_args"] = None if self.smoke_args is None else list(self.smoke_args)
        data["base_provides"] = list(self.base_provides)
        data["env"] = dict(self.env)
        data["mounts"] = [dataclasses.asdict(m) for m in self.mounts]
        data["secrets"] = [dataclasses.asdict(s) for s in self.secrets]  # references, never values
        data["sweep"] = self.sweep.to_dict() if self.sweep is not None else None
        data["data"] = [{"target": d.target, "source": d.source} for d in self.data]
        data["smoke_data"] = dict(self.smoke_data)
        data["node_selector"] = dict(self.node_selector)
        data["tolerations"] = [str(t) for t in self.tolerations]
        data["image_pull_secrets"] = list(self.image_pull_secrets)
        return data

    def sweep_text(self) -> str:
        """`sweep: 8 trials, 2 at a time, each on 1 node with 1 GPU` (how a deploy, its dry run and its result say a
        sweep)."""
        assert self.sweep is not None  # asked of a sweep's spec
        trials = counted(self.sweep.trials, "trial")
        return f"sweep: {trials}, {self.sweep.parallel} at a time, each on 1 node with {self.gpus_per_node.describe()}"

    def trial(self, params: dict[str, Any]) -> MLJobSpec:
        """The spec of one trial of the sweep: `params` in place of their `${name}` in args, smoke_args and
        [ml-training.env] values; no sweep."""
        from vdk.plugin.ml_training.job.sweep import trial_values

        args, env = trial_values(self.args, self.env, params)
        smoke = None if self.smoke_args is None else trial_values(self.smoke_args, (), params)[0]
        return dataclasses.replace(self, args=args, smoke_args=smoke, env=env, sweep=None)

    def fingerprint(self) -> str:
        """sha256 of what defines the training (`to_dict()` without WHERE_IT_RUNS): equal for equal
        specs from any checkout, and the same image whichever namespace or registry it goes to."""
        training = {k: v for k, v in self.to_dict().items() if k not in WHERE_IT_RUNS}
        canonical = json.dumps(training, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def identity(self) -> JobIdentity:
        """Who the job is to the cluster verbs: its name, team, kube context and namespace."""
        return JobIdentity(self.name, self.job_dir, self.team, self.kube_context, self.namespace)

    def kubernetes_name(self, name: str | None = None) -> str:
        """The job name as Kubernetes will carry it (`name`: the one of -n); raises JobConfigError if it cannot be
        one."""
        return self.identity.kubernetes_name(name)

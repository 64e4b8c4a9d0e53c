"""THE catalogue of configuration keys: every key of `[ml-training]` and every VDK setting of the plugin, each
with its kind, default, one-line meaning, the verbs that use it, whether it says where a job runs (left out of
the fingerprint) and whether it is also a VDK setting (`ml_training_<key>` / `VDK_ML_TRAINING_<KEY>`).

Everything that lists keys is derived from here: the keys config.ini may hold (`KEYS`), the fingerprint's
exclusions (`WHERE_IT_RUNS`), the VDK configuration keys (`settings.CONFIG_KEYS`), the defaults the reader
(load.py) falls back to, and the documentation's tables (key_table.py). Adding a key: an entry here, its line in
load.py, its field in model.py (and the code that uses it, and tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vdk.plugin.ml_training.job.backend_registry import backend_choices
from vdk.plugin.ml_training.runtime import gpu_sampler
from vdk.plugin.ml_training.runtime import watchdog
from vdk.plugin.ml_training.runtime.idle_policy import IDLE_PERCENT
from vdk.plugin.ml_training.units import format_duration
from vdk.plugin.ml_training.vocabulary.nvidia import GPU_PRODUCT_LABEL
from vdk.plugin.ml_training.vocabulary.nvidia import GPU_RESOURCE
from vdk.plugin.ml_training.vocabulary.package_indexes import DEFAULT_INDEX_STRATEGY
from vdk.plugin.ml_training.vocabulary.package_indexes import INDEX_STRATEGIES
from vdk.plugin.ml_training.vocabulary.wire import setting_variable

DEFAULT_BASE_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
DEFAULT_SMOKE_TIMEOUT = 600
# The most machines a run may ask for, and GPUs per machine (the largest nodes have 16).
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 16
# A pod told to stop has this long to save a checkpoint and exit, when the run has an output volume (output_pvc);
# without one Kubernetes' own default (30 s) applies. Two minutes: a cloud's spot notice (AWS), and a checkpoint
# of a few GB to a network volume.
DEFAULT_TERMINATION_GRACE = 120
RESUME_CHOICES = ("auto", "off")
SMOKE_RESUME_CHOICES = ("check", "require", "off")

# Where a key is written.
JOB = "job"  # a key of [ml-training] (and, with `setting`, also a VDK setting that is its default)
TEAM = "team"  # a setting of `vdk` about teams, read with a job's spec: each team's namespace and queue
VDK = "vdk"  # a setting of the `vdk` command itself (how `vdk run` runs), never read into a spec

# Kinds: how a value is written (and read, see key_reader.py / load.py).
ARGUMENTS = "arguments"  # shell-quoted words; empty means none
BOOLEAN = "boolean"
CHOICE = "choice"
DURATION = "duration"  # 90s, 30m, 12h, 7d, 1w, 1h30m; read into seconds (the field ends in `_seconds`)
ENTRYPOINT = "entrypoint"
GPUS = "gpus"  # a number of GPUs or a MIG profile
IMAGE = "image reference"  # host/path:tag@digest
INTEGER = "integer"
LABEL_KEY = "label key"  # a Kubernetes label key: [prefix/]name
LABEL_VALUE = "label value"
LABELS = "node labels"  # `key=value, key=value`
NAME = "name"  # a Kubernetes object's name
NAMES = "names"  # comma-separated Kubernetes object names
NODES = "nodes"  # N or MIN:MAX
PACKAGES = "packages"  # comma-separated distribution names
QUANTITY = "quantity"  # a Kubernetes quantity
REGISTRY = "registry address"  # host[:port]/path
TEAM_MAPPING = "team mapping"  # `team:value, team:value`
DATA_PATHS = "data paths"  # `TARGET=PATH, TARGET=PATH`
TEXT = "text"
TOLERATIONS = "tolerations"  # `key=value:Effect, key:Effect, key` (comma-separated)

# Verbs (vdk ...) that use a key.
RUN = "run"
DEPLOY = "deploy"
RUN_AND_DEPLOY = (RUN, DEPLOY)
ON_THE_CLUSTER = (DEPLOY, "list", "show", "execute", "delete")
SETTING_PREFIX = "ml_training_"


@dataclass(frozen=True)
class Key:
    """One configuration key. `default`: the value when the key is not set (None: none, or one the reader computes,
    then `default_text` says which); `example`: a valid value (the docs show it, a test loads it)."""

    name: str
    kind: str
    meaning: str
    example: str
    default: int | bool | str | None = None
    default_text: str = ""
    verbs: tuple[str, ...] = RUN_AND_DEPLOY
    where_it_runs: bool = False  # says where and how a job is checked or started, not what it trains
    setting: bool = False  # also a VDK setting (always so for TEAM and VDK keys)
    scope: str = JOB
    setting_meaning: str = ""  # what `vdk config-help` says of the setting, when not `meaning`
    choices: Callable[[], tuple[str, ...]] | None = None  # a CHOICE's options, asked when needed
    # The largest sensible value (a number, a quantity, seconds of a duration): beyond it a value is a typo that
    # would reach the manifests (`nodes = 999999`, `cpu = 1e100`).
    maximum: int | str | None = None

    @property
    def field(self) -> str:
        """The MLJobSpec field the key fills (durations are held in seconds)."""
        return f"{self.name}_seconds" if self.kind == DURATION else self.name

    @property
    def is_setting(self) -> bool:
        return self.setting or self.scope != JOB

    @property
    def setting_name(self) -> str:
        """`ml_training_<key>`: the VDK configuration key ([vdk] of config.ini, `vdk config-help`)."""
        return SETTING_PREFIX + self.name

    @property
    def variable(self) -> str:
        """`VDK_ML_TRAINING_<KEY>`: the environment variable of the VDK setting."""
        return setting_variable(self.setting_name)

    @property
    def may_be_empty(self) -> bool:
        """Whether `key =` with no value means something (no arguments) rather than a mistake."""
        return self.kind == ARGUMENTS

    @property
    def setting_default(self) -> str | None:
        """The VDK setting's default: text for durations (VDK converts an environment value to the default's type,
        and "10m" is no int), the default of a `vdk` setting, else none (the job's own default applies)."""
        if self.scope != JOB:
            return None if self.default is None else str(self.default)
        if self.kind == DURATION and self.default is not None:
            return format_duration(int(self.default))
        return None

    @property
    def setting_description(self) -> str:
        return self.setting_meaning or self.meaning


def _job_keys() -> tuple[Key, ...]:
    """The keys of [ml-training], in the order messages and the documentation list them."""
    return (
        Key("entrypoint", ENTRYPOINT, "script path relative to the job dir, or `-m package.module`", "train.py",
            default_text="the only top-level `.py` with a `__main__` guard, else `train.py`"),
        Key("args", ARGUMENTS, "arguments for the entrypoint, shell-quoted", "--epochs 3 --lr 3e-4"),
        Key("nodes", NODES, "number of machines, or `MIN:MAX` for elastic training", "2", default="1",
            maximum=MAX_NODES),
        Key("gpus_per_node", GPUS, "`0`, a number of GPUs, or a MIG profile such as `1g.10gb`", "8", default="1",
            maximum=MAX_GPUS_PER_NODE),
        Key("procs_per_node", INTEGER, "processes per node", "8",
            default_text="`gpus_per_node` (1 when 0 or a MIG profile, and for scripts that spawn their workers)"),
        Key("cpu", QUANTITY, "CPU per node, a Kubernetes quantity", "8", default="4", verbs=(DEPLOY,),
            maximum="2048"),
        Key("memory", QUANTITY, "memory per node, a Kubernetes quantity", "32Gi", default="16Gi", verbs=(DEPLOY,),
            maximum="64Ti"),
        Key("shm_size", QUANTITY, "size of the memory-backed `/dev/shm`", "8Gi", default_text="half of `memory`"),
        Key("base_image", IMAGE, "image with Python + torch that the code is layered onto",
            DEFAULT_BASE_IMAGE, default=DEFAULT_BASE_IMAGE, setting=True,
            setting_meaning="default base image (Python + torch) for ml-training jobs"),
        Key("base_python", TEXT,
            "the interpreter of `base_image`: a command on its `PATH` (`python3`) or a path (`/opt/conda/bin/python`)",
            "python3", default_text="found in the base image"),
        Key("base_python_version", TEXT, "Python version of `base_image`", "3.11",
            default_text="found in the base image"),
        Key("base_provides", PACKAGES, "packages `base_image` has (comma-separated), in addition to those found",
            "torch, numpy", default_text="those found in the base image"),
        Key("backend", CHOICE, "what runs the job on Kubernetes (`auto`: the best the cluster serves)",
            "job", default="auto", verbs=(DEPLOY,), where_it_runs=True, choices=backend_choices),
        Key("queue", NAME, "Kueue local queue", "team-a-queue", verbs=(DEPLOY,), where_it_runs=True,
            default_text="the team's queue (`ml_training_team_queues`), else none"),
        Key("priority_class", NAME, "Kubernetes PriorityClass", "high-priority", verbs=(DEPLOY,)),
        Key("gpu_type", LABEL_VALUE,
            "GPU model the run's nodes must have: `H100`, `A100`, `L4`, ... (the values of `gpu_type_label` that "
            "NVIDIA's GPU feature discovery sets for that model), or the label's value as written",
            "H100", verbs=(DEPLOY,), where_it_runs=True, default_text="any GPU"),
        Key("gpu_type_label", LABEL_KEY, "the node label `gpu_type` is a value of", GPU_PRODUCT_LABEL,
            default=GPU_PRODUCT_LABEL, verbs=(DEPLOY,), where_it_runs=True, setting=True,
            setting_meaning="the node label that names a node's GPU model (the value `gpu_type` selects)"),
        Key("node_selector", LABELS, "node labels the run's pods require, `key=value` (comma-separated)",
            "pool=training, topology.kubernetes.io/zone=eu-west-1a", verbs=(DEPLOY,), where_it_runs=True,
            setting=True, default_text="none",
            setting_meaning="node labels every ml-training run's pods require, `key=value` (comma-separated)"),
        Key("tolerations", TOLERATIONS,
            "node taints the run's pods tolerate: `key=value:Effect`, `key:Effect` or `key` (any value and "
            f"effect), comma-separated; GPU runs tolerate `{GPU_RESOURCE}:NoSchedule` already",
            "dedicated=ml:NoSchedule, spot", verbs=(DEPLOY,), where_it_runs=True, setting=True,
            default_text=f"`{GPU_RESOURCE}:NoSchedule` when the run asks for GPUs",
            setting_meaning="node taints every ml-training run's pods tolerate (`key=value:Effect`, comma-separated)"),
        Key("image_pull_secrets", NAMES,
            "Secrets (type kubernetes.io/dockerconfigjson) the nodes pull the job image with, comma-separated",
            "registry-credentials", verbs=(DEPLOY,), where_it_runs=True, setting=True,
            default_text="none (the namespace's service account's)",
            setting_meaning="Secrets the nodes pull ml-training job images with (comma-separated)"),
        Key("service_account", NAME, "the ServiceAccount the run's pods run as", "trainer", verbs=(DEPLOY,),
            where_it_runs=True, setting=True, default_text="the namespace's `default`",
            setting_meaning="the ServiceAccount ml-training runs' pods run as"),
        Key("max_restarts", INTEGER, "restarts before the job is failed", "5", default=3, verbs=(DEPLOY,)),
        Key("max_disruptions", INTEGER,
            "restarts after a preemption, an eviction or a lost node, which `max_restarts` does not count, before "
            "the run stops restarting (counted in the output directory: with `output_pvc`)", "100", default=20,
            verbs=(DEPLOY,)),
        Key("resume", CHOICE,
            "whether a Hugging Face `Trainer`, Lightning or Accelerate run resumes from the last checkpoint this run "
            "(or the run it continues) wrote in its working directory, and saves one when it is told to stop "
            "(SIGTERM: preemption, eviction, drain, `vdk execute --cancel`)",
            "off", default="auto", where_it_runs=True, choices=lambda: RESUME_CHOICES),
        Key("termination_grace_period", DURATION,
            "how long a pod told to stop has to save its checkpoint and exit before it is killed "
            "(the pods' `terminationGracePeriodSeconds`)", "5m", verbs=(DEPLOY,), where_it_runs=True,
            default_text=f"`{format_duration(DEFAULT_TERMINATION_GRACE)}` with `output_pvc`, else Kubernetes' "
            "(30 s)", maximum=86400),
        Key("max_runtime", DURATION, "the job is stopped after this long, e.g. `12h`", "12h", maximum=365 * 86400),
        Key("ttl_after_finished", DURATION, "how long finished jobs are kept", "1d", default=7 * 86400,
            verbs=(DEPLOY,), maximum=365 * 86400),
        Key("smoke_steps", INTEGER,
            "optimizer steps a smoke run performs: batches per epoch (per pass of every DataLoader)", "2", default=1,
            where_it_runs=True),
        Key("smoke_processes", INTEGER, "processes in a smoke run (for a script that spawns its workers: workers)",
            "2", where_it_runs=True,
            default_text="`2` when nodes × procs_per_node (gpus_per_node for such a script) > 1, else `1`"),
        Key("smoke_timeout", DURATION, "a smoke run that takes longer is stopped", "15m",
            default=DEFAULT_SMOKE_TIMEOUT, where_it_runs=True, setting=True,
            setting_meaning="seconds (or 10m, 1h) after which a smoke run is stopped", maximum=86400),
        Key("smoke_device_tracking", BOOLEAN,
            "`false` turns off the smoke run's checks of where tensors are (CPU or which GPU)", "false", default=True,
            where_it_runs=True),
        Key("stall_timeout", DURATION,
            "a rank of a cluster or full local run with no optimizer step for this long is stopped, so its GPUs are "
            "freed; `0`: never", "45m", default=watchdog.DEFAULT_STALL_SECONDS, where_it_runs=True, setting=True,
            setting_meaning="a rank of a cluster or full local run with no optimizer step for this long is stopped "
            "(0: never)", maximum=7 * 86400),
        Key("startup_timeout", DURATION,
            "the same for a rank's first optimizer step (loading data and models, compiling); `0`: never", "2h",
            default=watchdog.DEFAULT_STARTUP_SECONDS, where_it_runs=True, setting=True,
            setting_meaning="the same for the first optimizer step of a rank (0: never)", maximum=7 * 86400),
        Key("gpu_sample_period", DURATION,
            "how often each node of a cluster or full local run samples its GPUs (SM activity, memory, power) "
            "for `vdk show` and `vdk list --usage`; `0`: never", "5s",
            default=round(gpu_sampler.DEFAULT_SAMPLE_SECONDS), where_it_runs=True, maximum=3600),
        Key("idle_timeout", DURATION,
            f"a run whose GPUs all stay below {IDLE_PERCENT:g}% SM activity for this long after its first optimizer "
            "step is stopped, so its GPUs are freed; `0`: never", "2h", default=0, where_it_runs=True, setting=True,
            setting_meaning="a run whose GPUs all stay idle for this long after its first step is stopped "
            "(0: never)", maximum=7 * 86400),
        Key("smoke_args", ARGUMENTS,
            "arguments for the entrypoint in smoke runs, instead of `args` (e.g. a smaller batch for the CPU), "
            "shell-quoted", "--batch-size 2", default_text="`args`", where_it_runs=True),
        Key("smoke_epoch_end", BOOLEAN,
            "`false`: a smoke run stops after `smoke_steps` optimizer steps instead of running the end of the first "
            "epoch", "false", default=True, where_it_runs=True),
        Key("smoke_resume", CHOICE,
            "whether a smoke run, after its cut epoch, stops its ranks as a preemption would and starts them again in "
            "the same working directory: `check` notes a script that starts over, `require` fails it, `off` skips "
            "the second start", "require", default="check", where_it_runs=True, choices=lambda: SMOKE_RESUME_CHOICES),
        Key("smoke_data", DATA_PATHS,
            "local files a smoke run uses for a dataset of [ml-training.data] instead of a sample of it: "
            "`TARGET=PATH, ...` (PATH relative to the job directory, or absolute)", "data/train=samples/train",
            verbs=(RUN, DEPLOY), where_it_runs=True,
            default_text="a sample fetched from each dataset (`smoke_sample_files`, `smoke_sample_size`)"),
        Key("smoke_sample_files", INTEGER,
            "a smoke run without `smoke_data` for a dataset fetches at most this many of its files (the first, "
            "in name order)", "10", default=20, where_it_runs=True),
        Key("smoke_sample_size", QUANTITY, "and at most this many bytes of them", "16Mi", default="64Mi",
            where_it_runs=True),
        Key("requirements_overlay", BOOLEAN,
            "`false`: local runs use the packages of the environment that runs vdk as they are, instead of "
            "requirements.txt installed by uv into an overlay for them (as the image installs it); for an "
            "environment you manage yourself", "false", default=True, where_it_runs=True),
        Key("index_strategy", CHOICE,
            "how requirements.txt's packages are looked up when there are several package indexes (pip's "
            "`index-url` and `extra-index-url`, uv's): `best-match` searches every index and takes the best "
            "version, as pip does; `first-index` takes a package only from the first index that has it (uv's "
            "guard against dependency confusion, for a private index beside a public one)", "first-index",
            default=DEFAULT_INDEX_STRATEGY, where_it_runs=True, choices=lambda: tuple(INDEX_STRATEGIES)),
        Key("import_check", BOOLEAN,
            "`false` skips the check that the job's image has everything the job imports (as `--skip-import-check` "
            "does)", "false", default=True, where_it_runs=True),
        Key("attestations", BOOLEAN,
            "`false`: `vdk deploy` attaches no SBOM and no build provenance to the images it pushes (for a registry "
            "that refuses OCI artifacts)", "false", default=True, verbs=(DEPLOY,), where_it_runs=True, setting=True,
            setting_meaning="`false`: ml-training job images are pushed without their SBOM and build provenance "
            "(OCI referrers), for a registry that refuses artifacts [true]"),
        Key("if_changed", BOOLEAN,
            "`true`: an execution through the VDK Control Service that its schedule started (`schedule_cron`) "
            "starts no run when neither the code, the requirements, the configuration, the base image nor a dataset "
            "changed since the job's last successful run, and says so in its log (as `vdk deploy --if-changed`)",
            "true", default=False, verbs=(DEPLOY,), where_it_runs=True),
        Key("registry", REGISTRY, "registry (and path) the job image is pushed to", "registry.example.com/ml",
            verbs=(DEPLOY,), where_it_runs=True, setting=True,
            setting_meaning="OCI registry (and path) that ml-training job images are pushed to, e.g. "
            "registry.example.com/ml"),
        Key("namespace", NAME, "Kubernetes namespace", "ml-team", verbs=ON_THE_CLUSTER, where_it_runs=True,
            setting=True, default_text="the team's namespace (`ml_training_team_namespaces`), else "
            "`VDK_ML_TRAINING_NAMESPACE`, else the kube context's",
            setting_meaning="Kubernetes namespace for ml-training jobs [the kube context's namespace]"),
        Key("kube_context", TEXT, "kubeconfig context", "kind-ml", verbs=ON_THE_CLUSTER, where_it_runs=True,
            setting=True, default_text="the current context",
            setting_meaning="kubeconfig context for ml-training jobs [the current context]"),
        Key("output_pvc", NAME,
            "PersistentVolumeClaim of cluster runs' outputs: a directory per run, the run's working directory",
            "ml-outputs", verbs=(DEPLOY,), where_it_runs=True, setting=True,
            default_text="none (what a run writes goes with its pods)",
            setting_meaning="PersistentVolumeClaim that holds cluster runs' outputs: a directory per run, the run's "
            "working directory"),
        Key("data_cache_pvc", NAME,
            "PersistentVolumeClaim that the datasets of [ml-training.data] are fetched into, once per version "
            "(a directory per version, shared by every run that pins it)", "ml-data-cache", verbs=(DEPLOY,),
            where_it_runs=True, setting=True,
            default_text="none (each pod fetches its datasets into a directory of its own)",
            setting_meaning="PersistentVolumeClaim that ml-training jobs' datasets are fetched into, once per "
            "version"),
        Key("mlflow_tracking_uri", TEXT,
            "MLflow tracking server that each run is logged to (its config, series and tags; a sweep as a parent run "
            "of its trials): set for the pods as MLFLOW_TRACKING_URI", "http://mlflow.ml.svc:5000",
            where_it_runs=True, setting=True,
            default_text="MLFLOW_TRACKING_URI of the shell for local runs; none on the cluster",
            setting_meaning="MLflow tracking server that ml-training runs are logged to (a cluster-wide setting)"),
    )  # fmt: skip


def _vdk_settings() -> tuple[Key, ...]:
    """Settings of `vdk`, not of a job: config.ini's [ml-training] has no such keys."""
    return (
        Key("team_namespaces", TEAM_MAPPING,
            "each team's Kubernetes namespace, e.g. `vision:ml-vision, nlp:ml-nlp` (a job's `namespace` key wins; "
            "teams without an entry use ml_training_namespace)", "vision:ml-vision, nlp:ml-nlp",
            verbs=ON_THE_CLUSTER, scope=TEAM),
        Key("team_queues", TEAM_MAPPING,
            "each team's Kueue local queue, e.g. `vision:vision-gpus, nlp:nlp-gpus` (a job's `queue` key wins)",
            "vision:vision-gpus, nlp:nlp-gpus", verbs=(DEPLOY,), scope=TEAM),
        Key("control_service_entry", TEXT,
            "`vdk deploy` of an ml-training job goes through the VDK Control Service (when its URL is set) if the "
            "service lists this key among its supported Python versions: the entry its operator set up for "
            "ml-training (base, vdk and builder images)", "3.11-ml-training", default="ml-training",
            verbs=(DEPLOY,), scope=VDK),
        Key("launcher", BOOLEAN,
            "`true` in the VDK Control Service's data-job pods (its operator sets it in vdkOptions): `vdk run` of an "
            "ml-training job starts the job's run on the cluster, follows it into the execution's log and ends with "
            "its result, instead of a smoke run", "true", default=False, verbs=(RUN,), scope=VDK),
        Key("run_mode", CHOICE,
            "`vdk run` of an ml-training job: smoke (a few optimizer steps on CPU), full (to completion) or "
            "container (the smoke run inside the job's image)", "full", default="smoke", verbs=(RUN,), scope=VDK),
        Key("container_engine", TEXT,
            "`vdk run --container`: the container engine's command, with global options [podman, else docker]",
            "podman --storage-driver vfs", verbs=(RUN,), scope=VDK, default_text="podman, else docker"),
        Key("container_run_options", TEXT,
            "`vdk run --container`: options added to the engine's `run`, e.g. --network host", "--network host",
            verbs=(RUN,), scope=VDK),
    )  # fmt: skip


CATALOGUE: tuple[Key, ...] = _job_keys() + _vdk_settings()
_BY_NAME = {key.name: key for key in CATALOGUE}

# The keys of [ml-training], with their meaning (unknown keys are refused, with the one meant).
KEYS: dict[str, str] = {key.name: key.meaning for key in CATALOGUE if key.scope == JOB}
# Fields of MLJobSpec that say where and how a job is checked or started, not what it trains: left out of the
# fingerprint (image labels, run annotations), so that they do not change an image's digest. The queue too: a
# team's queue may come from VDK configuration (ml_training_team_queues).
WHERE_IT_RUNS = frozenset(key.field for key in CATALOGUE if key.where_it_runs)


def default_of(name: str) -> Any:
    """The default of key `name` (the MLJobSpec field's, when the key is not set)."""
    return _BY_NAME[name].default


def variable(name: str) -> str:
    """The environment variable of setting `name` (`namespace`: `VDK_ML_TRAINING_NAMESPACE`)."""
    return _BY_NAME[name].variable


def key(name: str) -> Key:
    """The catalogue's entry of `name` (a key of [ml-training] or a setting without its `ml_training_` prefix)."""
    return _BY_NAME[name]


def job_keys() -> tuple[Key, ...]:
    """Every key of [ml-training], in catalogue order."""
    return tuple(key for key in CATALOGUE if key.scope == JOB)


def settings() -> tuple[Key, ...]:
    """Every key that is a VDK setting, in catalogue order."""
    return tuple(key for key in CATALOGUE if key.is_setting)

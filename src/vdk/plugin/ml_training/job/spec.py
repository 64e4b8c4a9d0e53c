"""The ML job model: a job directory's config.ini parsed and validated into one `MLJobSpec`.

Everything else in the plugin (local runs, images, Kubernetes manifests) reads the spec, never
config.ini. The spec knows no screen, no cluster and no registry: it only holds validated values.
"""

from __future__ import annotations

import ast
import configparser
import dataclasses
import difflib
import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import storage
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.job.storage import DataMount
from vdk.plugin.ml_training.job.storage import SecretEnv
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.progress_lines import ProgressSettings
from vdk.plugin.ml_training.source import spawn_scan
from vdk.plugin.ml_training.units import format_bytes
from vdk.plugin.ml_training.units import parse_duration
from vdk.plugin.ml_training.units import parse_quantity

JOB_TYPE = "ml-training"
SECTION = "ml-training"
ENV_SECTION = "ml-training.env"
CONFIG_FILE = "config.ini"

DEFAULT_BASE_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
AUTO_BACKEND = "auto"
# Job name + "-" + an 8-character run id + suffixes such as "-worker-15" must stay a 63-char DNS label.
MAX_JOB_NAME_LENGTH = 40

# Launchers and operators set these; a job that sets them too breaks distributed start-up.
RESERVED_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "JOB_COMPLETION_INDEX",
    }
)
RESERVED_ENV_PREFIXES = ("PET_", "TORCHELASTIC_", "VDK_ML_TRAINING_")

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MIG_PROFILE = re.compile(r"^([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\+me)?$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAIN_GUARD = re.compile(r"^if\s+(__name__\s*==\s*['\"]__main__['\"]|['\"]__main__['\"]\s*==\s*__name__)\s*:", re.M)
# host[:port]/path[:tag][@digest], as in the distribution reference grammar (kept lenient on hosts).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?)"
_IMAGE_REFERENCE = re.compile(
    rf"^(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
_REGISTRY = re.compile(rf"^{_HOST}(?:/{_PATH_COMPONENT})*$")
_PYTHON_VERSION = re.compile(r"^3\.[0-9]{1,2}$")
# An interpreter: a command name looked up on the image's PATH, or an absolute path.
_INTERPRETER = re.compile(r"^(/[^\s]+|[A-Za-z0-9][A-Za-z0-9._+-]*)$")
# The stall watchdog's defaults (its runtime module reads the values the renderers put in the pods).
DEFAULT_STALL_TIMEOUT = 1800
DEFAULT_STARTUP_TIMEOUT = 3600
_MEMORY_KEYS = ("memory", "shm_size")
_MIN_MEMORY = 1 << 20  # less is a unit mistake (`100m` is a tenth of a byte), not a memory size
# Keys whose empty value means something: no arguments.
_MAY_BE_EMPTY = ("args", "smoke_args")
# An inline comment as users write it in other ini dialects: `;` or `#` at the start or after whitespace.
_INLINE_COMMENT = re.compile(r"(?:^|(?<=\s))[;#]")
_BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


@dataclass(frozen=True)
class Entrypoint:
    """What the training process runs: a script in the job dir, or a module (`-m pkg.mod`)."""

    target: str
    is_module: bool = False

    def argv(self) -> list[str]:
        """The part of a `python ...` / `torchrun ...` command line that names the entrypoint."""
        return ["-m", self.target] if self.is_module else [self.target]

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
            return f"nvidia.com/mig-{self.mig_profile}"
        return "nvidia.com/gpu" if self.count else None

    @property
    def devices(self) -> int:
        """How many devices a node's processes see."""
        return 1 if self.mig_profile else self.count

    def __str__(self) -> str:
        return self.mig_profile or str(self.count)


# Keys that say where and how a job is checked or started, not what it trains: left out of the
# fingerprint (image labels, run annotations), so that they do not change an image's digest.
# The queue too: a team's queue may come from VDK configuration (ml_training_team_queues).
WHERE_IT_RUNS = frozenset(
    {
        "registry",
        "namespace",
        "queue",
        "kube_context",
        "backend",
        "smoke_steps",
        "smoke_processes",
        "smoke_timeout_seconds",
        "smoke_device_tracking",
        "stall_timeout_seconds",
        "startup_timeout_seconds",
        "smoke_args",
        "smoke_epoch_end",
        "import_check",
        "output_pvc",
    }
)


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
    stall_timeout_seconds: int = DEFAULT_STALL_TIMEOUT
    startup_timeout_seconds: int = DEFAULT_STARTUP_TIMEOUT
    # The entrypoint starts its workers itself (mp.spawn, one per GPU): each node runs one launcher process.
    spawns_workers: bool = False
    smoke_args: tuple[str, ...] | None = None  # smoke runs' arguments instead of `args` (None: `args`)
    smoke_epoch_end: bool = True  # smoke runs cut epochs and run the end of the first one
    import_check: bool = True  # `vdk run` and `vdk deploy` check the job's imports first
    # Cluster runs: the PersistentVolumeClaim whose directory `<run>` is the working directory (job/storage.py).
    output_pvc: str | None = None
    mounts: tuple[DataMount, ...] = ()  # [ml-training.mounts]: datasets on existing claims, read-only
    secrets: tuple[SecretEnv, ...] = ()  # [ml-training.secrets]: variables whose values are Secret keys
    # Where team, namespace and queue came from (key -> "[ml-training] queue of ...", "-t", ...), for the
    # dry run; not part of what the job is.
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False)

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
        return _entrypoint_file(self.job_dir, self.entrypoint)

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
        data["entrypoint"] = str(self.entrypoint)
        data["nodes"] = str(self.nodes)
        data["gpus_per_node"] = str(self.gpus_per_node)
        data["args"] = list(self.args)
        data["smoke_args"] = None if self.smoke_args is None else list(self.smoke_args)
        data["base_provides"] = list(self.base_provides)
        data["env"] = dict(self.env)
        data["mounts"] = [dataclasses.asdict(m) for m in self.mounts]
        data["secrets"] = [dataclasses.asdict(s) for s in self.secrets]  # references, never values
        return data

    def fingerprint(self) -> str:
        """sha256 of what defines the training (`to_dict()` without WHERE_IT_RUNS): equal for equal
        specs from any checkout, and the same image whichever namespace or registry it goes to."""
        training = {k: v for k, v in self.to_dict().items() if k not in WHERE_IT_RUNS}
        canonical = json.dumps(training, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def kubernetes_name(self, name: str | None = None) -> str:
        """The job name as Kubernetes will carry it (`name`: the one of -n); raises JobConfigError if it cannot be
        one."""
        return kubernetes_job_name(name or self.name, self.config_path, from_option=bool(name))


def backend_choices() -> tuple[str, ...]:
    """`auto` and the name of every backend in the registry (k8s/backends). Looked up when asked, not
    when this module is imported: the backends render specs, so they import this module."""
    from vdk.plugin.ml_training.k8s import backends

    return (AUTO_BACKEND, *backends.NAMES)


def is_kubernetes_job_name(name: str) -> bool:
    """Whether `name` is a DNS-1035 label short enough for the run and pod names derived from it."""
    return bool(_DNS_1035.match(name)) and len(name) <= MAX_JOB_NAME_LENGTH


def kubernetes_job_name(name: str, config_path: Path, from_option: bool = False) -> str:
    """`name` if it can be a job's name on Kubernetes (`is_kubernetes_job_name`), else a JobConfigError (an
    MLTrainingError about -n when `from_option`: the name given with -n/--name)."""
    if is_kubernetes_job_name(name):
        return name
    suggestion = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    suggestion = re.sub(r"^[^a-z]+", "", suggestion)[:MAX_JOB_NAME_LENGTH].rstrip("-") or "my-job"
    rule = (
        f"cannot be a Kubernetes name (lower-case letters, digits and '-', starting with a letter, at most "
        f"{MAX_JOB_NAME_LENGTH} characters)"
    )
    if from_option:
        raise MLTrainingError(f"-n {name}: the job name {name!r} {rule}", f"use `-n {suggestion}`")
    raise JobConfigError(
        config_path.parent,
        f"the job name {name!r} (the job directory's name) {rule}",
        f"rename the job directory, or deploy with `-n {suggestion}`",
    )


def read_config(job_dir: Path) -> configparser.ConfigParser:
    """config.ini of a job dir, keys case-preserved (environment names are case-sensitive)."""
    path = Path(job_dir) / CONFIG_FILE
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        if b"\0" in path.read_bytes():
            raise JobConfigError(
                path,
                "is not a text file (it holds binary data, such as NUL bytes)",
                "write config.ini as UTF-8 text: `key = value` lines under [section] headers (see the README's job "
                "format)",
            )
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        raise JobConfigError(
            path, "no config.ini in the job directory", "pass the job's directory, which holds config.ini"
        ) from None
    except (configparser.Error, UnicodeDecodeError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, configparser.ParsingError) and e.errors:
            line_number, line = e.errors[0]
            detail = f"line {line_number}: {_unrepr(line).strip()!r} is not `key = value`"
        raise JobConfigError(path, f"cannot be read: {detail}", _syntax_fix(e)) from None
    return parser


def _unrepr(text: str) -> str:
    """configparser keeps a bad line as its repr()."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def _syntax_fix(error: Exception) -> str:
    if isinstance(error, configparser.DuplicateOptionError):
        return f"keep one `{error.option} = ...` line in [{error.section}]"
    if isinstance(error, configparser.DuplicateSectionError):
        return f"merge the two [{error.section}] sections into one"
    if isinstance(error, configparser.MissingSectionHeaderError):
        return "start config.ini with a section header such as [job]"
    if isinstance(error, UnicodeDecodeError):
        return "save config.ini as UTF-8"
    return "write every line as `key = value` under a [section] header (see the README's job format)"


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _job_type(parser: configparser.ConfigParser) -> str | None:
    for section in parser.sections():
        if section.lower() == "job":
            for key, value in parser.items(section):
                if key.lower() == "type":
                    return value.strip()
    return None


def is_ml_job(job_dir: Path | str) -> bool:
    """True if config.ini says `[job] type = ml-training`. Unreadable configs count as not ML."""
    try:
        parser = read_config(Path(job_dir))
    except JobConfigError:
        return False
    return (_job_type(parser) or "").lower() == JOB_TYPE


def ml_config_problem(job_dir: Path | str) -> JobConfigError | None:
    """Why a job dir that looks meant as an ml-training job is not one: a config.ini that cannot be
    read but mentions ml-training, a misspelt `type`, or an [ml-training] section without the type.
    None for ml-training jobs and for anything that does not look like one (data jobs)."""
    path = Path(job_dir) / CONFIG_FILE
    try:
        parser = read_config(Path(job_dir))
    except JobConfigError as e:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if not _is_text(data):
            return e  # no job of any kind: vdk-core fails on it with a traceback
        text = data.decode("utf-8", errors="replace").lower()
        return e if "ml-training" in text or "ml_training" in text else None
    job_type = _job_type(parser)
    if (job_type or "").lower() == JOB_TYPE:
        return None
    if job_type and difflib.get_close_matches(job_type.lower().replace("_", "-"), [JOB_TYPE], n=1, cutoff=0.75):
        return JobConfigError(
            path, f"type {job_type!r} is not a job type", f"did you mean `type = {JOB_TYPE}`?", "job", "type"
        )
    if any(s.lower().replace("_", "-") in (SECTION, ENV_SECTION) for s in parser.sections()):
        found = f"type = {job_type}" if job_type else "no type"
        return JobConfigError(
            path,
            f"it has an [{SECTION}] section but [job] says {found}, so VDK would run it as a data job",
            f"add `type = {JOB_TYPE}` under [job]",
            "job",
            "type",
        )
    return None


# --- parsing of single keys -----------------------------------------------------------------


class _Keys:
    """Reads one [ml-training] section; every failure names the file, key and fix."""

    def __init__(self, path: Path, values: Mapping[str, str], settings: Mapping[str, Any]):
        self.path = path
        self.values = values
        self.settings = settings

    def error(self, key: str, problem: str, fix: str) -> JobConfigError:
        if not self.values.get(key, "").strip() and key in self.settings:
            variable = f"VDK_ML_TRAINING_{key.upper()}"
            origin = self.setting_origin(key)
            if origin.startswith("[vdk]"):
                vdk_key = f"ml_training_{key}"
                problem = f"the value of {origin}: {problem}"
                fix = fix.replace(f"`{key} = ", f"`{vdk_key} = ") + f" (in [vdk], or `{key} = ...` in [{SECTION}])"
            else:
                problem = f"the value from VDK configuration ({variable}): {problem}"
                fix = fix.replace(f"`{key} = ", f"`{variable}=") + f" (in {variable}, or `{key} = ...` in [{SECTION}])"
        return JobConfigError(self.path, problem, fix, SECTION, key)

    def setting_origin(self, key: str) -> str:
        """Where the VDK setting of `key` came from: its environment variable, or a [vdk] line of config.ini."""
        origins = getattr(self.settings, "origins", None) or {}
        return origins.get(key) or f"VDK_ML_TRAINING_{key.upper()}"

    def raw(self, key: str) -> str | None:
        value = self.values.get(key)
        if value is None or value.strip() == "":
            value = self.settings.get(key)
            value = None if value is None or str(value).strip() == "" else str(value)
        return None if value is None else value.strip()

    def integer(self, key: str, default: int, minimum: int, maximum: int = 1_000_000) -> int:
        text = self.raw(key)
        if text is None:
            return default
        if not re.fullmatch(r"[0-9]+", text) or not minimum <= int(text) <= maximum:
            raise self.error(
                key,
                f"{text!r} is not a whole number from {minimum} to {maximum}",
                f"set `{key} = {max(default, minimum)}` or another whole number in that range",
            )
        return int(text)

    def boolean(self, key: str, default: bool) -> bool:
        text = self.raw(key)
        if text is None:
            return default
        value = _BOOLEANS.get(text.lower())
        if value is None:
            raise self.error(key, f"{text!r} is not true or false", f"write `{key} = {str(not default).lower()}`")
        return value

    def duration(self, key: str, default: int | None, minimum: int) -> int | None:
        text = self.raw(key)
        if text is None:
            return default
        try:
            seconds = parse_duration(text)
        except ValueError:
            seconds = -1
        if seconds < minimum:
            raise self.error(
                key,
                f"{text!r} is not a duration" + (" above zero" if minimum else ""),
                f"write it like `{key} = 12h` (units s, m, h, d, w; `1h30m` works too)",
            )
        return seconds

    def quantity(self, key: str, default: str) -> str:
        text = self.raw(key) or default
        try:
            value = parse_quantity(text)
        except ValueError:
            value = None
        if value is None or value <= 0:
            example = "16Gi" if key in _MEMORY_KEYS else "4"
            raise self.error(
                key,
                f"{text!r} is not a positive Kubernetes quantity",
                f"write it like `{key} = {example}` (suffixes Ki Mi Gi Ti, k M G T, or m for milli)",
            )
        if key in _MEMORY_KEYS and value < _MIN_MEMORY:
            milli = re.fullmatch(r"([0-9.]+)m", text)
            size = format(value.normalize(), "f")
            what = f" (`m` means a thousandth: {text} is {size} bytes)" if milli else f" ({size} bytes)"
            example = f"{milli.group(1)}Mi" if milli else "16Gi"
            raise self.error(
                key,
                f"{text!r} is less than a mebibyte{what}",
                f"write it like `{key} = {example}` (Mi for mebibytes, Gi for gibibytes)",
            )
        return text

    def choice(self, key: str, default: str, options: tuple[str, ...]) -> str:
        text = (self.raw(key) or default).lower()
        if text not in options:
            close = difflib.get_close_matches(text, options, n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise self.error(
                key, f"{text!r} is not one of {', '.join(options)}", f"{hint}use one of {', '.join(options)}"
            )
        return text

    def matching(self, key: str, pattern: re.Pattern, what: str, example: str) -> str | None:
        text = self.raw(key)
        if text is not None and (not pattern.match(text) or len(text) > 253):
            scheme = " without a scheme such as https://" if "://" in text else ""
            raise self.error(key, f"{text!r} is not {what}", f"write it like `{key} = {example}`{scheme}")
        return text


# --- the whole spec -------------------------------------------------------------------------

# Keys of [ml-training], with a one-line meaning (used for suggestions and documentation).
KEYS: dict[str, str] = {
    "entrypoint": "script path relative to the job dir, or `-m package.module`",
    "args": "arguments for the entrypoint, shell-quoted",
    "nodes": "number of machines, or MIN:MAX for elastic",
    "gpus_per_node": "0, an integer, or a MIG profile such as 1g.10gb",
    "procs_per_node": "processes per node",
    "cpu": "CPU per node (Kubernetes quantity)",
    "memory": "memory per node (Kubernetes quantity)",
    "shm_size": "size of the memory-backed /dev/shm",
    "base_image": "image with Python + torch that the code is layered onto",
    "base_python": "interpreter of base_image (`python3`, `/opt/conda/bin/python`), instead of finding it",
    "base_python_version": "Python version of base_image, instead of finding it",
    "base_provides": "packages base_image has (comma-separated), in addition to those found",
    "backend": "auto, pytorchjob, trainjob or job",
    "queue": "Kueue local queue",
    "priority_class": "Kubernetes PriorityClass",
    "max_restarts": "restarts before the job is failed",
    "max_runtime": "the job is stopped after this long, e.g. 12h",
    "ttl_after_finished": "how long finished jobs are kept",
    "smoke_steps": "optimizer steps a smoke run performs",
    "smoke_processes": "processes in a smoke run",
    "smoke_timeout": "a smoke run that takes longer is stopped",
    "smoke_device_tracking": "false turns off the smoke run's checks of where tensors are (CPU or which GPU)",
    "stall_timeout": "a rank with no optimizer step for this long is stopped (0: never)",
    "startup_timeout": "the same for the first optimizer step (0: never)",
    "smoke_args": "arguments for the entrypoint in smoke runs instead of `args` (a smaller batch), shell-quoted",
    "smoke_epoch_end": "false: smoke runs stop after smoke_steps steps instead of running the end of an epoch",
    "import_check": "false skips the check that the job's image has everything the job imports",
    "registry": "OCI registry (and path) the job image is pushed to",
    "namespace": "Kubernetes namespace",
    "kube_context": "kubeconfig context",
    "output_pvc": "PersistentVolumeClaim for cluster runs' outputs (a directory per run, their working directory)",
}
DEFAULT_SMOKE_TIMEOUT = 600


def load_job_spec(
    job_dir: Path | str,
    settings: Mapping[str, Any] | None = None,
    team: str | None = None,
    default_team: str | None = None,
) -> MLJobSpec:
    """Parse and validate a job directory into an `MLJobSpec`.

    `settings` are cluster-wide defaults from VDK configuration (`settings.job_settings`), which
    the job's [ml-training] section overrides. The team is `team` (-t), else `[owner] team`, else
    `default_team` (VDK's default team); its namespace and queue come from the team mappings of
    `settings` unless the job sets them. Raises JobConfigError (SettingError for a malformed VDK
    setting), and nothing else, on bad input.
    """
    job_dir = Path(job_dir).resolve()
    parser = read_config(job_dir)
    path = job_dir / CONFIG_FILE
    _check_sections(parser, path)
    raw = dict(parser.items(SECTION)) if parser.has_section(SECTION) else {}
    values = _normalise_keys(raw, path)
    keys = _Keys(path, values, settings or {})
    origins: dict[str, str] = {}
    team_name = _choose_team(team, _team(parser), default_team, path, origins)
    namespace = _team_setting(keys, "namespace", teams.TEAM_NAMESPACES, team_name, origins)
    queue = _team_setting(keys, "queue", teams.TEAM_QUEUES, team_name, origins)

    nodes = _nodes(keys)
    gpus = _gpus(keys)
    entrypoint = _entrypoint(keys, job_dir)
    spawn = _spawn_call(keys, job_dir, entrypoint, nodes, gpus)
    procs = keys.integer("procs_per_node", default=1 if spawn else max(gpus.devices, 1), minimum=1, maximum=1024)
    memory = keys.quantity("memory", "16Gi")
    shm_size = keys.quantity("shm_size", format_bytes(parse_quantity(memory) / 2))
    if parse_quantity(shm_size) > parse_quantity(memory):
        raise keys.error(
            "shm_size",
            f"{shm_size} is more than memory ({memory}); /dev/shm counts against the memory limit",
            "lower shm_size or raise memory (by default shm_size is half of memory)",
        )
    smoke_default = 2 if (gpus.devices if spawn else nodes.max * procs) > 1 else 1
    return MLJobSpec(
        name=job_dir.name,
        job_dir=job_dir,
        team=team_name,
        entrypoint=entrypoint,
        args=_args(keys, "args") or (),
        nodes=nodes,
        gpus_per_node=gpus,
        procs_per_node=procs,
        cpu=keys.quantity("cpu", "4"),
        memory=memory,
        shm_size=shm_size,
        base_image=keys.matching("base_image", _IMAGE_REFERENCE, "an image reference", DEFAULT_BASE_IMAGE)
        or DEFAULT_BASE_IMAGE,
        base_python=keys.matching("base_python", _INTERPRETER, "an interpreter name or absolute path", "python3"),
        base_python_version=keys.matching("base_python_version", _PYTHON_VERSION, "a Python version", "3.11"),
        base_provides=_base_provides(keys),
        backend=keys.choice("backend", AUTO_BACKEND, backend_choices()),
        queue=queue,
        priority_class=keys.matching("priority_class", _DNS_1123_SUBDOMAIN, "a PriorityClass name", "high-priority"),
        max_restarts=keys.integer("max_restarts", default=3, minimum=0, maximum=1000),
        max_runtime_seconds=keys.duration("max_runtime", default=None, minimum=1),
        ttl_after_finished_seconds=keys.duration("ttl_after_finished", default=7 * 86400, minimum=0) or 0,
        smoke_steps=keys.integer("smoke_steps", default=1, minimum=1, maximum=100_000),
        smoke_processes=keys.integer("smoke_processes", default=smoke_default, minimum=1, maximum=64),
        smoke_timeout_seconds=keys.duration("smoke_timeout", default=DEFAULT_SMOKE_TIMEOUT, minimum=1)
        or DEFAULT_SMOKE_TIMEOUT,
        smoke_device_tracking=keys.boolean("smoke_device_tracking", default=True),
        smoke_args=_args(keys, "smoke_args"),
        smoke_epoch_end=keys.boolean("smoke_epoch_end", default=True),
        import_check=keys.boolean("import_check", default=True),
        env=_env(parser, path),
        registry=keys.matching("registry", _REGISTRY, "a registry address", "registry.example.com/ml"),
        namespace=namespace,
        kube_context=keys.raw("kube_context"),
        stall_timeout_seconds=_timeout(keys, "stall_timeout", DEFAULT_STALL_TIMEOUT),
        startup_timeout_seconds=_timeout(keys, "startup_timeout", DEFAULT_STARTUP_TIMEOUT),
        spawns_workers=spawn is not None,
        output_pvc=keys.matching("output_pvc", _DNS_1123_SUBDOMAIN, "a PersistentVolumeClaim name", "ml-outputs"),
        mounts=storage.parse_mounts(parser, path),
        secrets=_secrets(parser, path),
        origins=tuple(origins.items()),
    )


def _entrypoint_file(job_dir: Path, entrypoint: Entrypoint) -> Path:
    if not entrypoint.is_module:
        return job_dir / entrypoint.target
    base = job_dir.joinpath(*entrypoint.target.split("."))
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__main__.py"


def _spawn_call(keys: _Keys, job_dir: Path, entrypoint: Entrypoint, nodes: NodeRange, gpus: Accelerators):
    """The entrypoint's mp.spawn call when it starts its own workers (spawn_scan), checked against the
    layout: such a script runs on one node, with one launcher process that spawns the workers."""
    spawn = spawn_scan.scan_file(_entrypoint_file(job_dir, entrypoint))
    if spawn is None:
        return None
    call = spawn.describe(str(entrypoint))
    if nodes.max > 1:
        raise keys.error(
            "nodes",
            f"{call} starts its own worker processes on one machine (they meet on localhost), so with nodes = "
            f"{nodes} every node would train alone",
            "set `nodes = 1`, or let torchrun start the processes on every node: take the rank, local rank and "
            "world size from the RANK, LOCAL_RANK and WORLD_SIZE environment variables instead of mp.spawn",
        )
    if spawn.per_gpu and gpus.devices == 0:
        raise keys.error(
            "gpus_per_node",
            f"{call} starts one worker per GPU, and gpus_per_node = 0 gives it none",
            "set `gpus_per_node` to the GPUs the script should train on, e.g. `gpus_per_node = 8`",
        )
    procs = keys.raw("procs_per_node")
    if procs is not None and procs != "1":
        raise keys.error(
            "procs_per_node",
            f"{call} starts its own worker processes: each node runs one launcher process, which spawns them",
            "remove procs_per_node (or set `procs_per_node = 1`); the workers are one per GPU of gpus_per_node",
        )
    return spawn


def _choose_team(
    option: str | None, owner: str | None, default: str | None, path: Path, origins: dict[str, str]
) -> str | None:
    """-t, else [owner] team, else VDK's default team (None when none is known; `-t ''` means no team)."""
    if option is not None:
        origins["team"] = teams.FROM_OPTION
        return option.strip() or None
    for value, source in ((owner, teams.from_owner(path)), (default, teams.FROM_DEFAULT)):
        if value and value.strip():
            origins["team"] = source
            return value.strip()
    return None


_TEAM_KEYS = {
    "namespace": (_DNS_1123_LABEL, "a Kubernetes namespace", "ml-team"),
    "queue": (_DNS_1123_SUBDOMAIN, "a Kueue queue name", "team-a-queue"),
}


def _team_setting(keys: _Keys, key: str, mapping_key: str, team: str | None, origins: dict[str, str]) -> str | None:
    """`namespace` or `queue`: the job's key, else the team's entry in the VDK mapping `mapping_key`,
    else the cluster-wide VDK setting (namespace only)."""
    pattern, what, example = _TEAM_KEYS[key]
    mapped = teams.mapping(keys.settings, mapping_key).get(team)
    if (keys.values.get(key) or "").strip():
        origins[key] = f"[{SECTION}] {key} of {keys.path}"
    elif mapped:
        origins[key] = teams.mapped_from(mapping_key, team or "")
        return mapped
    elif keys.raw(key) is not None:
        origin = keys.setting_origin(key)
        origins[key] = origin if origin.startswith("[vdk]") else f"ml_training_{key} of VDK configuration ({origin})"
    return keys.matching(key, pattern, what, example)


def _check_sections(parser: configparser.ConfigParser, path: Path) -> None:
    known = (SECTION, ENV_SECTION, storage.MOUNTS_SECTION, storage.SECRETS_SECTION)
    for section in parser.sections():
        if section in known:
            continue
        lowered = section.lower().replace("_", "-")
        if lowered in known or (lowered.startswith("ml") and difflib.get_close_matches(lowered, known, n=1)):
            close = difflib.get_close_matches(lowered, known, n=1, cutoff=0.0)[0]
            raise JobConfigError(path, f"unknown section [{section}]", f"rename it to [{close}]", section=section)


def _normalise_keys(raw: Mapping[str, str], path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in raw.items():
        name = key.strip().lower().replace("-", "_")
        if name not in KEYS:
            close = closest(name, list(KEYS))
            fix = f"did you mean `{close}`?" if close else f"valid keys are: {', '.join(KEYS)}"
            raise JobConfigError(path, f"unknown key {key!r}", fix, SECTION, key)
        if name in values:
            raise JobConfigError(path, "the key is set twice", "keep one of them", SECTION, key)
        if not value.strip() and name not in _MAY_BE_EMPTY:
            raise JobConfigError(
                path,
                "the value is empty",
                f"remove the `{key} =` line to use the default (or the VDK setting), or give it a value",
                SECTION,
                key,
            )
        _refuse_inline_comment(name, key, value, path)
        values[name] = value
    return values


def inline_comment(text: str) -> int | None:
    """Where an unquoted `;` or `#` that starts a word begins in `text` (None: nowhere). configparser keeps
    such a "comment" as part of the value."""
    for match in _INLINE_COMMENT.finditer(text):
        if _open_quote(text[: match.start()]) is None:
            return match.start()
    return None


def _open_quote(text: str) -> str | None:
    """The quote character left open at the end of `text`, split as a POSIX shell would."""
    quote = None
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
    return quote


def _refuse_inline_comment(name: str, key: str, value: str, path: Path) -> None:
    start = inline_comment(value)
    if start is None:
        return
    meant = value[:start].rstrip()
    comment = value[start:].strip()
    if name in _MAY_BE_EMPTY:
        try:
            received = shlex.split(value)
        except ValueError:
            received = value.split()
        what = f"the script would receive the arguments {received}"
        fix = f"write `{key} = {meant}` and put the comment on a line of its own; an argument that starts with "
        fix += f"{comment[0]} goes in quotes ('{comment[0]}...')"
    else:
        what = f"the value would be {value.strip()!r}"
        fix = f"write `{key} = {meant}` and put the comment on a line of its own"
    raise JobConfigError(
        path,
        f"{comment!r} looks like a comment, but config.ini has no inline comments: {what}",
        fix,
        SECTION,
        key,
    )


def closest(word: str, options: list[str]) -> str | None:
    """The option a user most likely meant: a near spelling, else one that starts with the word."""
    near = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if near:
        return near[0]
    starts = [o for o in options if word and o.startswith(word)]
    return starts[0] if len(starts) == 1 else None


def owner_team(job_dir: Path | str) -> str | None:
    """The `[owner] team` of a job directory's config.ini (None when it has none)."""
    return _team(read_config(Path(job_dir)))


def _team(parser: configparser.ConfigParser) -> str | None:
    for section in parser.sections():
        if section.lower() == "owner":
            for key, value in parser.items(section):
                if key.lower() == "team" and value.strip():
                    return value.strip()
    return None


def _nodes(keys: _Keys) -> NodeRange:
    text = keys.raw("nodes") or "1"
    match = re.fullmatch(r"([0-9]{1,6})(?::([0-9]{1,6}))?", text)
    low, high = (int(match.group(1)), int(match.group(2) or match.group(1))) if match else (0, 0)
    if match and low >= 1 and high < low:
        raise keys.error(
            "nodes",
            f"{text!r} has MIN ({low}) above MAX ({high}): an elastic range is MIN:MAX",
            f"write `nodes = {high}:{low}` (at least {high}, at most {low} machines), "
            f"or `nodes = {low}` for a fixed size",
        )
    if match and (low < 1 or high < 1):
        raise keys.error(
            "nodes",
            f"{text!r}: a run needs at least 1 machine",
            "write `nodes = 1` (or more), or `nodes = 1:4` (MIN:MAX) for elastic training",
        )
    if not match:
        raise keys.error(
            "nodes",
            f"{text!r} is not a number of machines of at least 1",
            "write `nodes = 2` for a fixed size, or `nodes = 2:8` (MIN:MAX, MIN <= MAX) for elastic training",
        )
    return NodeRange(low, high)


def _gpus(keys: _Keys) -> Accelerators:
    text = keys.raw("gpus_per_node") or "1"
    if re.fullmatch(r"[0-9]{1,4}", text):
        return Accelerators(int(text))
    if _MIG_PROFILE.match(text):
        return Accelerators(1, text)
    raise keys.error(
        "gpus_per_node",
        f"{text!r} is neither a number of GPUs nor a MIG profile",
        "write `gpus_per_node = 0` for CPU only, `gpus_per_node = 8`, or a MIG profile such as `1g.10gb`",
    )


def _timeout(keys: _Keys, key: str, default: int) -> int:
    """A watchdog timeout: a duration, or 0 for none."""
    seconds = keys.duration(key, default=default, minimum=0)
    return default if seconds is None else seconds


def _args(keys: _Keys, key: str) -> tuple[str, ...] | None:
    text = keys.values.get(key) if key == "smoke_args" else keys.raw(key)
    if text is None:
        return None
    try:
        return tuple(shlex.split(text))
    except ValueError as e:
        raise keys.error(key, f"cannot be split into arguments ({e})", "quote it as a shell would") from None


def _base_provides(keys: _Keys) -> tuple[str, ...]:
    text = keys.raw("base_provides")
    if text is None:
        return ()
    names = tuple(n.strip() for n in re.split(r"[,\s]+", text) if n.strip())
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", n)]
    if bad:
        raise keys.error("base_provides", f"{bad[0]!r} is not a package name", "list names like `torch, numpy`")
    return names


def _entrypoint(keys: _Keys, job_dir: Path) -> Entrypoint:
    text = keys.raw("entrypoint")
    if text is None:
        return _detect_entrypoint(keys, job_dir)
    if text.startswith("-m"):
        module = text[2:].strip()
        if not _MODULE.match(module):
            raise keys.error("entrypoint", f"{module!r} is not a module name", "write `entrypoint = -m package.module`")
        base = job_dir.joinpath(*module.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            raise keys.error(
                "entrypoint",
                f"module {module!r} is not in the job directory (no {base.relative_to(job_dir)}.py "
                f"or {base.relative_to(job_dir)}/__main__.py)",
                "put the module in the job directory or correct the name",
            )
        return Entrypoint(module, is_module=True)
    return Entrypoint(_script_path(keys, job_dir, text))


def _script_path(keys: _Keys, job_dir: Path, text: str) -> str:
    candidate = (job_dir / text).resolve()
    if not candidate.is_relative_to(job_dir):
        raise keys.error("entrypoint", f"{text!r} is outside the job directory", "use a path inside the job directory")
    if candidate.is_dir():
        raise keys.error("entrypoint", f"{text!r} is a directory, not a script", _directory_fix(job_dir, candidate))
    if not candidate.is_file():
        scripts = _top_level_scripts(job_dir)
        hint = f" (scripts here: {', '.join(scripts)})" if scripts else ""
        raise keys.error(
            "entrypoint",
            f"{text!r} does not exist in {job_dir}{hint}",
            "correct the path, relative to the job directory",
        )
    return candidate.relative_to(job_dir).as_posix()


def _directory_fix(job_dir: Path, directory: Path) -> str:
    """What to write instead of a directory as the entrypoint: the package as a module, or a script in it."""
    relative = directory.relative_to(job_dir)
    module = ".".join(relative.parts)
    if (directory / "__main__.py").is_file() and _MODULE.match(module):
        return f"run the package as a module: `entrypoint = -m {module}` (it has a __main__.py)"
    scripts = sorted(p.name for p in directory.glob("*.py") if p.is_file() and p.name != "__init__.py")
    if scripts:
        return f"name the script in it, e.g. `entrypoint = {(relative / scripts[0]).as_posix()}`"
    return "name a script, relative to the job directory, e.g. `entrypoint = train.py`"


def _top_level_scripts(job_dir: Path) -> list[str]:
    return sorted(p.name for p in job_dir.glob("*.py") if p.is_file())


def _detect_entrypoint(keys: _Keys, job_dir: Path) -> Entrypoint:
    """The only top-level script with a `__main__` guard, else train.py."""
    guarded = [name for name in _top_level_scripts(job_dir) if _has_main_guard(job_dir / name)]
    if len(guarded) == 1:
        return Entrypoint(guarded[0])
    if (job_dir / "train.py").is_file():
        return Entrypoint("train.py")
    found = f"scripts with a __main__ guard: {', '.join(guarded)}" if guarded else "no script with a __main__ guard"
    raise keys.error(
        "entrypoint",
        f"cannot tell which script to run ({found}, and no train.py)",
        "set `entrypoint = your_script.py` in [ml-training]",
    )


def _has_main_guard(path: Path) -> bool:
    try:
        return bool(_MAIN_GUARD.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def _check_runtime_setting(name: str, value: str, path: Path) -> None:
    """Runtime settings are checked here, where a mistake is cheap, by the rule the runtime applies."""
    if name in protocol.SWITCHES:
        if value.strip().lower() not in protocol.SWITCH_VALUES:
            problem = f"{name} is {value!r}, which is neither on nor off"
            raise JobConfigError(path, problem, "set it to 1 (on) or 0 (off)", ENV_SECTION, name)
        return
    problems = ProgressSettings({name: value}).problems
    if problems:
        example = "10 (seconds), or 0 for no progress lines" if name == protocol.PROGRESS_SECONDS else "5000"
        raise JobConfigError(path, problems[0], f"set it to a number such as {example}", ENV_SECTION, name)


def _env(parser: configparser.ConfigParser, path: Path) -> tuple[tuple[str, str], ...]:
    if not parser.has_section(ENV_SECTION):
        return ()
    out = []
    for name, value in parser.items(ENV_SECTION):
        _check_env_name(name, path, ENV_SECTION)
        if name in protocol.USER_SETTINGS:
            _check_runtime_setting(name, value, path)
        credential = storage.literal_secret(name, value)
        if credential:
            raise storage.literal_secret_error(name, credential, path, ENV_SECTION)
        out.append((name, value))
    return tuple(out)


def _secrets(parser: configparser.ConfigParser, path: Path) -> tuple[SecretEnv, ...]:
    """[ml-training.secrets], its names checked as those of [ml-training.env], none set in both."""
    secrets = storage.parse_secrets(parser, path)
    env = dict(parser.items(ENV_SECTION)) if parser.has_section(ENV_SECTION) else {}
    for secret in secrets:
        _check_env_name(secret.name, path, storage.SECRETS_SECTION)
        if secret.name in protocol.USER_SETTINGS:
            raise JobConfigError(
                path,
                f"{secret.name} is a setting of the plugin, not a secret",
                f"set it in [{ENV_SECTION}]",
                storage.SECRETS_SECTION,
                secret.name,
            )
        if secret.name in env:
            raise JobConfigError(
                path,
                f"{secret.name} is also set in [{ENV_SECTION}]",
                f"keep one: the Secret reference here, or a value that is no secret in [{ENV_SECTION}]",
                storage.SECRETS_SECTION,
                secret.name,
            )
    return secrets


def _check_env_name(name: str, path: Path, section: str) -> None:
    """A variable the job may set for its training processes (rank layout and plugin names refused)."""
    if not _ENV_NAME.match(name):
        raise JobConfigError(
            path, f"{name!r} is not an environment variable name", "use letters, digits and _", section, name
        )
    if name in protocol.USER_SETTINGS:
        return
    if name.startswith("VDK_ML_TRAINING_"):
        raise JobConfigError(
            path,
            f"{name} is not a setting the training processes read; VDK_ML_TRAINING_* names are the plugin's own",
            f"remove {name}; of these names only {', '.join(protocol.USER_SETTINGS)} may be set here "
            "(VDK settings such as the registry go in [ml-training] or the environment of `vdk`)",
            section,
            name,
        )
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        raise JobConfigError(
            path,
            f"{name} is set by the launcher for every process (rank layout); setting it breaks start-up",
            f"remove {name}; set nodes / procs_per_node in [{SECTION}] instead",
            section,
            name,
        )

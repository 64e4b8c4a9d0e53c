"""`load_job_spec`: a job directory read and validated into one `MLJobSpec`, a line per key of the catalogue; and
`load_job_identity`: who the job is to the cluster verbs (name, team, kube context, namespace), from those keys only.

The sections come from config_file.py, the typed values from key_reader.py (with the catalogue's defaults), the
entrypoint, environment and mounts from their modules; what is left here is what no other key needs: the values
of a particular grammar (nodes, gpus_per_node, arguments, base_provides), the defaults computed from other keys
(procs_per_node, shm_size, smoke_processes), and which team the job is for, with that team's namespace and queue.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.config_file import JobConfig
from vdk.plugin.ml_training.job.config_file import check_sections
from vdk.plugin.ml_training.job.config_file import job_config
from vdk.plugin.ml_training.job.config_file import section_values
from vdk.plugin.ml_training.job.datasets import parse_data
from vdk.plugin.ml_training.job.datasets import parse_smoke_data
from vdk.plugin.ml_training.job.entrypoint import read_entrypoint
from vdk.plugin.ml_training.job.entrypoint import spawn_call
from vdk.plugin.ml_training.job.environment import read_env
from vdk.plugin.ml_training.job.environment import read_secrets
from vdk.plugin.ml_training.job.key_reader import KeyReader
from vdk.plugin.ml_training.job.keys import DEFAULT_TERMINATION_GRACE
from vdk.plugin.ml_training.job.keys import MAX_GPUS_PER_NODE
from vdk.plugin.ml_training.job.keys import MAX_NODES
from vdk.plugin.ml_training.job.keys import SETTING_PREFIX
from vdk.plugin.ml_training.job.keys import default_of
from vdk.plugin.ml_training.job.literal_secrets import secret_argument
from vdk.plugin.ml_training.job.literal_secrets import secret_argument_error
from vdk.plugin.ml_training.job.model import Accelerators
from vdk.plugin.ml_training.job.model import JobIdentity
from vdk.plugin.ml_training.job.model import MLJobSpec
from vdk.plugin.ml_training.job.model import NodeRange
from vdk.plugin.ml_training.job.mounts import parse_mounts
from vdk.plugin.ml_training.job.names import DNS_1123_LABEL
from vdk.plugin.ml_training.job.names import DNS_1123_SUBDOMAIN
from vdk.plugin.ml_training.job.names import IMAGE_REFERENCE
from vdk.plugin.ml_training.job.names import INTERPRETER
from vdk.plugin.ml_training.job.names import MAX_MIG_GB
from vdk.plugin.ml_training.job.names import PYTHON_VERSION
from vdk.plugin.ml_training.job.names import REGISTRY
from vdk.plugin.ml_training.job.names import TRACKING_SERVER
from vdk.plugin.ml_training.job.names import mig_profile_is_possible
from vdk.plugin.ml_training.job.placement_keys import read_placement
from vdk.plugin.ml_training.job.settings import job_vdk_section
from vdk.plugin.ml_training.job.sweep import read_sweep
from vdk.plugin.ml_training.source.requirements import is_distribution_name
from vdk.plugin.ml_training.units import format_bytes
from vdk.plugin.ml_training.units import format_duration
from vdk.plugin.ml_training.units import parse_quantity
from vdk.plugin.ml_training.vocabulary.nvidia import MIG_PROFILE
from vdk.plugin.ml_training.vocabulary.nvidia import SLICES

# Less than a training process can run with, and less than Kubernetes can ask for.
MIN_MEMORY_BYTES = 256 << 20  # Python with torch imported holds about 220 MiB before the first step
MIN_CPU = parse_quantity("1m")


def load_job_spec(
    job_dir: Path | str | JobConfig,
    settings: Mapping[str, Any] | None = None,
    team: str | None = None,
    default_team: str | None = None,
    overrides: Mapping[str, str] | None = None,
) -> MLJobSpec:
    """Parse and validate a job directory into an `MLJobSpec`.

    `settings` are cluster-wide defaults from VDK configuration (`settings.job_settings`), which
    the job's [ml-training] section overrides; `overrides` ({key: value}, job/overrides.py: `--set`,
    `--args`) override that section for one run, read as its lines would be. The team is `team`
    (-t), else `[owner] team`, else `default_team` (VDK's default team); its namespace and queue
    come from the team mappings of `settings` unless the job sets them. `job_dir` may be its config.ini read
    already (config_file.read_job_config): it is not read again. Raises JobConfigError (SettingError for a
    malformed VDK setting), and nothing else, on bad input.
    """
    config = job_config(job_dir)
    job_dir = config.job_dir.resolve()
    parser = config.parser
    path = job_dir / config.path.name
    check_sections(parser, path)
    keys = KeyReader(path, {**section_values(parser, path), **(overrides or {})}, settings or {}, overrides)
    spec = _spec(keys, config, job_dir, team, default_team)
    return dataclasses.replace(spec, overrides=tuple((overrides or {}).items())) if overrides else spec


# What the cluster verbs read of a job: the keys that say where its runs are.
IDENTITY_KEYS = ("namespace", "kube_context")


def load_job_identity(
    job_dir: Path | str | JobConfig,
    settings: Mapping[str, Any] | None = None,
    team: str | None = None,
    default_team: str | None = None,
) -> JobIdentity:
    """Who the job is to the cluster verbs: its name, its team (`team`, else `[owner] team`, else `default_team`),
    its kube context and namespace (as `load_job_spec` reads them, over the same `settings`). Only these keys are
    read and checked: a key the verbs do not use (a sweep being written, a typo elsewhere) does not stop them."""
    config = job_config(job_dir)
    path = config.job_dir.resolve() / config.path.name
    keys = KeyReader(path, section_values(config.parser, path, only=IDENTITY_KEYS), settings or {})
    team_name, origins = _team(config, path, team, default_team)
    namespace = _team_setting(keys, "namespace", team_name, origins)
    return JobIdentity(path.parent.name, path.parent, team_name, keys.raw("kube_context"), namespace)


def _team(config: JobConfig, path: Path, team: str | None, default_team: str | None) -> tuple[str | None, dict]:
    """The job's team (-t, else `[owner] team`, else the default team), and where it came from in `origins`."""
    origins: dict[str, str] = {}
    choice = teams.choose_team(team, teams.OwnerTeam(config.team, path), default_team)
    if choice is not None:
        origins["team"] = choice.source
    return ((choice.name or None) if choice else None), origins


def _spec(keys: KeyReader, config: JobConfig, job_dir: Path, team: str | None, default_team: str | None) -> MLJobSpec:
    path = keys.path
    parser = config.parser
    team_name, origins = _team(config, path, team, default_team)
    namespace = _team_setting(keys, "namespace", team_name, origins)
    queue = _team_setting(keys, "queue", team_name, origins)

    nodes = _nodes(keys)
    gpus = _gpus(keys)
    entrypoint = read_entrypoint(keys, job_dir)
    spawn = spawn_call(keys, job_dir, entrypoint, nodes, gpus)
    procs = keys.integer("procs_per_node", minimum=1, maximum=1024, default=1 if spawn else max(gpus.devices, 1))
    memory = keys.quantity("memory")
    if parse_quantity(memory) < MIN_MEMORY_BYTES:
        raise keys.error(
            "memory",
            f"{memory} is less than a training process takes: Python with torch imported holds about 220 MiB before "
            f"its first step, so the pods would be killed for memory as they start (and /dev/shm, half of memory "
            "unless shm_size says otherwise, takes from it too)",
            "write what one node of the run needs, such as `memory = 16Gi` (at least 256Mi)",
        )
    shm_size = keys.quantity("shm_size", format_bytes(parse_quantity(memory) / 2))
    if parse_quantity(shm_size) > parse_quantity(memory):
        raise keys.error(
            "shm_size",
            f"{shm_size} is more than memory ({memory}); /dev/shm counts against the memory limit",
            "lower shm_size or raise memory (by default shm_size is half of memory)",
        )
    smoke_default = 2 if (gpus.devices if spawn else nodes.max * procs) > 1 else 1
    args, smoke_args, env = _args(keys, "args") or (), _args(keys, "smoke_args"), read_env(parser, path)
    mounts = parse_mounts(parser, path)
    data = parse_data(parser, path, mounts, entrypoint)
    base_image = keys.matching("base_image", IMAGE_REFERENCE, "an image reference") or default_of("base_image")
    output_pvc = keys.matching("output_pvc", DNS_1123_SUBDOMAIN, "a PersistentVolumeClaim name")
    return MLJobSpec(
        name=job_dir.name,
        job_dir=job_dir,
        team=team_name,
        entrypoint=entrypoint,
        args=args,
        nodes=nodes,
        gpus_per_node=gpus,
        procs_per_node=procs,
        cpu=_cpu(keys),
        memory=memory,
        shm_size=shm_size,
        base_image=base_image,
        base_python=keys.matching("base_python", INTERPRETER, "an interpreter name or absolute path"),
        base_python_version=keys.matching("base_python_version", PYTHON_VERSION, "a Python version"),
        base_provides=_base_provides(keys),
        backend=keys.choice("backend"),
        queue=queue,
        priority_class=keys.matching("priority_class", DNS_1123_SUBDOMAIN, "a PriorityClass name"),
        max_restarts=keys.integer("max_restarts", minimum=0, maximum=1000),
        max_disruptions=keys.integer("max_disruptions", minimum=0, maximum=10000),
        max_runtime_seconds=keys.duration("max_runtime", minimum=1),
        ttl_after_finished_seconds=keys.duration("ttl_after_finished", minimum=0) or 0,
        smoke_steps=keys.integer("smoke_steps", minimum=1, maximum=100_000),
        smoke_processes=keys.integer("smoke_processes", minimum=1, maximum=64, default=smoke_default),
        smoke_timeout_seconds=keys.duration("smoke_timeout", minimum=1) or default_of("smoke_timeout"),
        smoke_device_tracking=keys.boolean("smoke_device_tracking"),
        smoke_args=smoke_args,
        smoke_epoch_end=keys.boolean("smoke_epoch_end"),
        resume=keys.choice("resume"),
        termination_grace_period_seconds=_grace(keys, output_pvc),
        smoke_resume=keys.choice("smoke_resume"),
        import_check=keys.boolean("import_check"),
        requirements_overlay=keys.boolean("requirements_overlay"),
        index_strategy=keys.choice("index_strategy"),
        env=env,
        registry=keys.matching("registry", REGISTRY, "a registry address"),
        attestations=keys.boolean("attestations"),
        if_changed=keys.boolean("if_changed"),
        namespace=namespace,
        kube_context=keys.raw("kube_context"),
        stall_timeout_seconds=_timeout(keys, "stall_timeout"),
        startup_timeout_seconds=_timeout(keys, "startup_timeout"),
        gpu_sample_period_seconds=_timeout(keys, "gpu_sample_period"),
        idle_timeout_seconds=_idle_timeout(keys),
        spawns_workers=spawn is not None,
        output_pvc=output_pvc,
        mlflow_tracking_uri=keys.matching("mlflow_tracking_uri", TRACKING_SERVER, "an http or https address"),
        mounts=mounts,
        secrets=read_secrets(parser, path),
        sweep=read_sweep(parser, path, args, smoke_args, env),
        data=data,
        data_cache_pvc=keys.matching("data_cache_pvc", DNS_1123_SUBDOMAIN, "a PersistentVolumeClaim name"),
        smoke_data=parse_smoke_data(keys.raw("smoke_data"), path, data),
        smoke_sample_files=keys.integer("smoke_sample_files", minimum=1, maximum=100_000),
        smoke_sample_size=keys.quantity("smoke_sample_size"),
        origins=tuple(origins.items()),
        vdk_section=tuple(job_vdk_section(config).items()),
        **read_placement(keys, gpus),
    )


def _grace(keys: KeyReader, output_pvc: str | None) -> int | None:
    """The pods' terminationGracePeriodSeconds: the key, else a default long enough to save a checkpoint when the run
    has an output volume to save it in (without one, what a pod saves goes with it: Kubernetes' default)."""
    seconds = keys.duration("termination_grace_period", minimum=1)
    if seconds is None and output_pvc:
        return DEFAULT_TERMINATION_GRACE
    return seconds


# --- values of their own grammar ------------------------------------------------------------------------------


def _nodes(keys: KeyReader) -> NodeRange:
    text = keys.raw("nodes") or default_of("nodes")
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
    if high > MAX_NODES:
        raise keys.error(
            "nodes",
            f"{text!r} asks for more than {MAX_NODES} machines",
            f"write the number of machines the run needs, at most {MAX_NODES} (`nodes = 2`, `nodes = 2:8`)",
        )
    return NodeRange(low, high)


def _gpus(keys: KeyReader) -> Accelerators:
    text = keys.raw("gpus_per_node") or default_of("gpus_per_node")
    if re.fullmatch(r"[0-9]{1,4}", text):
        if int(text) > MAX_GPUS_PER_NODE:
            raise keys.error(
                "gpus_per_node",
                f"{text!r} is more GPUs than a machine has (the largest have {MAX_GPUS_PER_NODE})",
                "write the GPUs of one machine (`gpus_per_node = 8`); more machines with `nodes = N`",
            )
        return Accelerators(int(text))
    if MIG_PROFILE.match(text):
        if not mig_profile_is_possible(text):
            raise keys.error(
                "gpus_per_node",
                f"{text!r} is not a MIG profile a GPU has "
                f"(at most {SLICES} compute slices, `{SLICES}g`, and {MAX_MIG_GB} GB)",
                "write a profile your GPUs offer, such as `1g.10gb` or `3g.40gb` (`nvidia-smi mig -lgip` lists them)",
            )
        return Accelerators(1, text)
    raise keys.error(
        "gpus_per_node",
        f"{text!r} is neither a number of GPUs nor a MIG profile",
        "write `gpus_per_node = 0` for CPU only, `gpus_per_node = 8`, or a MIG profile such as `1g.10gb`",
    )


def _cpu(keys: KeyReader) -> str:
    """`cpu`: Kubernetes counts a CPU in thousandths (1m); less cannot be asked for (it would be rounded up to 1m)."""
    cpu = keys.quantity("cpu")
    if parse_quantity(cpu) < MIN_CPU:
        raise keys.error(
            "cpu",
            f"{cpu} is less than Kubernetes can ask for: it counts a CPU in thousandths of a core (1m), and a "
            "training process needs whole cores (the launcher, the data loader's workers, the ranks themselves)",
            "write the cores one node of the run needs, such as `cpu = 8` (at least 1m; `500m` is half a core)",
        )
    return cpu


def _idle_timeout(keys: KeyReader) -> int:
    """`idle_timeout`: at least two GPU samples long, so that no single sample (a checkpoint, an evaluation) stops
    a run."""
    seconds = _timeout(keys, "idle_timeout")
    period = _timeout(keys, "gpu_sample_period")
    if seconds and period and seconds < 2 * period:
        raise keys.error(
            "idle_timeout",
            f"idle_timeout = {format_duration(seconds)} is shorter than two GPU samples (gpu_sample_period = "
            f"{format_duration(period)}): a single sample of idle GPUs (a checkpoint being written, an evaluation, "
            "the data loader between epochs) would stop the run",
            f"write `idle_timeout = {format_duration(max(2 * period, 30 * 60))}` or more (a healthy run's GPUs pause "
            "for minutes), or `0` for no idle policy",
        )
    return seconds


def _timeout(keys: KeyReader, key: str) -> int:
    """A watchdog timeout: a duration, or 0 for none."""
    seconds = keys.duration(key, minimum=0)
    return default_of(key) if seconds is None else seconds


def _args(keys: KeyReader, key: str) -> tuple[str, ...] | None:
    # `smoke_args =` (empty) means no arguments, not "as args"; it has no VDK setting to fall back on.
    text = keys.own(key) if key == "smoke_args" else keys.raw(key)
    if text is None:
        return None
    try:
        args = tuple(shlex.split(text))
    except ValueError as e:
        raise keys.error(key, f"cannot be split into arguments ({e})", "quote it as a shell would") from None
    found = secret_argument(args)
    if found is not None:
        refusal = secret_argument_error(key, found[0], found[1], keys.path, SECTION)
        raise keys.error(key, refusal.problem.split(": ", 1)[1], refusal.fix)
    return args


def _base_provides(keys: KeyReader) -> tuple[str, ...]:
    text = keys.raw("base_provides")
    if text is None:
        return ()
    names = tuple(n.strip() for n in re.split(r"[,\s]+", text) if n.strip())
    bad = [n for n in names if not is_distribution_name(n)]
    if bad:
        raise keys.error("base_provides", f"{bad[0]!r} is not a package name", "list names like `torch, numpy`")
    return names


# --- the team, and its namespace and queue ----------------------------------------------------------------------

_TEAM_KEYS = {
    "namespace": (DNS_1123_LABEL, "a Kubernetes namespace"),
    "queue": (DNS_1123_SUBDOMAIN, "a Kueue queue name"),
}


def _team_setting(keys: KeyReader, key: str, team: str | None, origins: dict[str, str]) -> str | None:
    """`namespace` or `queue`: the job's key, else the team's value from VDK configuration (teams.team_value: its
    entry in the team mapping, else the cluster-wide setting, which is validated as the job's key would be)."""
    pattern, what = _TEAM_KEYS[key]
    value, source = teams.team_value(keys.settings, key, team)
    if (keys.own(key) or "").strip():
        origins[key] = f"[{SECTION}] {key} of {keys.path}"
    elif source is not None:
        origins[key] = source
        return value
    elif keys.raw(key) is not None:
        origin = keys.setting_origin(key)
        origins[key] = (
            origin if origin.startswith("[vdk]") else f"{SETTING_PREFIX}{key} of VDK configuration ({origin})"
        )
    return keys.matching(key, pattern, what)

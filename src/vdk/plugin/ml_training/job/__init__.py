"""The job spec: what a job directory's config.ini declares, read and validated into one `MLJobSpec`.

Everything else in the plugin (local runs, images, Kubernetes manifests) reads the spec, never config.ini.
The spec knows no screen, no cluster and no registry: it only holds validated values. It knows no backend
either: their names come from the entry points backends register (backend_registry.py).

This face re-exports what the rest of the plugin imports; inside the package, modules import each other directly.

- model.py: MLJobSpec and its values (frozen dataclasses)
- keys.py: THE catalogue of keys and VDK settings; key_table.py renders it as Markdown for the docs
- config_file.py: reading config.ini, once per command (JobConfig: sections, is_ml_job, ml_config_problem, [owner]
  team)
- key_reader.py: typed reading of one key, errors naming file, key and fix
- load.py: load_job_spec, a line per key; load_job_identity, what the cluster verbs read (name, team, namespace)
- names.py: every name pattern (job, Kubernetes, label value, run, image, registry, MIG, module, env var)
- image_reference.py: an image reference parsed (the spec's base image, `MLJobSpec.base_reference`)
- entrypoint.py, environment.py, mounts.py: the entrypoint, [ml-training.env] / .secrets, [ml-training.mounts]
- datasets.py: [ml-training.data] (datasets by reference) and smoke_data
- teams.py: team names as label values, which team a command is for, a team's namespace and queue
- settings.py: the plugin's VDK configuration keys and how every verb reads them
- backend_registry.py: the registered backends' names
"""

from vdk.plugin.ml_training.job.backend_registry import AUTO_BACKEND
from vdk.plugin.ml_training.job.backend_registry import backend_choices
from vdk.plugin.ml_training.job.backend_registry import backend_names
from vdk.plugin.ml_training.job.config_file import CONFIG_FILE
from vdk.plugin.ml_training.job.config_file import DATA_SECTION
from vdk.plugin.ml_training.job.config_file import ENV_SECTION
from vdk.plugin.ml_training.job.config_file import MOUNTS_SECTION
from vdk.plugin.ml_training.job.config_file import SECRETS_SECTION
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.config_file import JobConfig
from vdk.plugin.ml_training.job.config_file import closest
from vdk.plugin.ml_training.job.config_file import is_ml_job
from vdk.plugin.ml_training.job.config_file import ml_config_problem
from vdk.plugin.ml_training.job.config_file import owner_team
from vdk.plugin.ml_training.job.config_file import read_config
from vdk.plugin.ml_training.job.config_file import read_job_config
from vdk.plugin.ml_training.job.environment import RESERVED_ENV
from vdk.plugin.ml_training.job.keys import CATALOGUE
from vdk.plugin.ml_training.job.keys import DEFAULT_BASE_IMAGE
from vdk.plugin.ml_training.job.keys import DEFAULT_SMOKE_TIMEOUT
from vdk.plugin.ml_training.job.keys import KEYS
from vdk.plugin.ml_training.job.keys import WHERE_IT_RUNS
from vdk.plugin.ml_training.job.keys import Key
from vdk.plugin.ml_training.job.load import load_job_identity
from vdk.plugin.ml_training.job.load import load_job_spec
from vdk.plugin.ml_training.job.model import Accelerators
from vdk.plugin.ml_training.job.model import DataMount
from vdk.plugin.ml_training.job.model import DataSource
from vdk.plugin.ml_training.job.model import Entrypoint
from vdk.plugin.ml_training.job.model import JobIdentity
from vdk.plugin.ml_training.job.model import MLJobSpec
from vdk.plugin.ml_training.job.model import NodeRange
from vdk.plugin.ml_training.job.model import SecretEnv
from vdk.plugin.ml_training.job.names import MAX_JOB_NAME_LENGTH
from vdk.plugin.ml_training.job.names import is_kubernetes_job_name
from vdk.plugin.ml_training.job.names import kubernetes_job_name

__all__ = [
    "AUTO_BACKEND",
    "CATALOGUE",
    "CONFIG_FILE",
    "DATA_SECTION",
    "DEFAULT_BASE_IMAGE",
    "DEFAULT_SMOKE_TIMEOUT",
    "ENV_SECTION",
    "KEYS",
    "MAX_JOB_NAME_LENGTH",
    "MOUNTS_SECTION",
    "RESERVED_ENV",
    "SECRETS_SECTION",
    "SECTION",
    "WHERE_IT_RUNS",
    "Accelerators",
    "DataMount",
    "DataSource",
    "Entrypoint",
    "JobConfig",
    "JobIdentity",
    "Key",
    "MLJobSpec",
    "NodeRange",
    "SecretEnv",
    "backend_choices",
    "backend_names",
    "closest",
    "is_kubernetes_job_name",
    "is_ml_job",
    "kubernetes_job_name",
    "load_job_identity",
    "load_job_spec",
    "ml_config_problem",
    "owner_team",
    "read_config",
    "read_job_config",
]

"""The job spec: what a job directory's config.ini declares, read and validated into one `MLJobSpec`.

Everything else in the plugin (local runs, images, Kubernetes manifests) reads the spec, never config.ini.
The spec knows no screen, no cluster and no registry: it only holds validated values.
"""

from vdk.plugin.ml_training.job.spec import AUTO_BACKEND
from vdk.plugin.ml_training.job.spec import CONFIG_FILE
from vdk.plugin.ml_training.job.spec import DEFAULT_BASE_IMAGE
from vdk.plugin.ml_training.job.spec import DEFAULT_SMOKE_TIMEOUT
from vdk.plugin.ml_training.job.spec import DEFAULT_STALL_TIMEOUT
from vdk.plugin.ml_training.job.spec import DEFAULT_STARTUP_TIMEOUT
from vdk.plugin.ml_training.job.spec import KEYS
from vdk.plugin.ml_training.job.spec import MAX_JOB_NAME_LENGTH
from vdk.plugin.ml_training.job.spec import RESERVED_ENV
from vdk.plugin.ml_training.job.spec import MLJobSpec
from vdk.plugin.ml_training.job.spec import backend_choices
from vdk.plugin.ml_training.job.spec import closest
from vdk.plugin.ml_training.job.spec import is_kubernetes_job_name
from vdk.plugin.ml_training.job.spec import is_ml_job
from vdk.plugin.ml_training.job.spec import load_job_spec
from vdk.plugin.ml_training.job.spec import ml_config_problem
from vdk.plugin.ml_training.job.spec import owner_team
from vdk.plugin.ml_training.job.spec import read_config

__all__ = [
    "read_config",
    "owner_team",
    "closest",
    "CONFIG_FILE",
    "AUTO_BACKEND",
    "DEFAULT_BASE_IMAGE",
    "DEFAULT_SMOKE_TIMEOUT",
    "DEFAULT_STALL_TIMEOUT",
    "DEFAULT_STARTUP_TIMEOUT",
    "KEYS",
    "MAX_JOB_NAME_LENGTH",
    "RESERVED_ENV",
    "MLJobSpec",
    "backend_choices",
    "is_kubernetes_job_name",
    "is_ml_job",
    "load_job_spec",
    "ml_config_problem",
]

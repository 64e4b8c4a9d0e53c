"""The local run inside the job's image (`vdk run --container JOB`): the smoke run, or with --full the whole run.

The image is assembled exactly as `vdk deploy` builds it (same layers, same config, so the same
digest), then loaded into the local container engine through a loopback endpoint (image/serve.py):
the engine keeps the base's layers after the first time, and takes only the job's layers later.
No registry of the user's is involved. The run itself is a local run (local/container.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.settings import CONTAINER_ENGINE
from vdk.plugin.ml_training.job.settings import CONTAINER_RUN_OPTIONS
from vdk.plugin.ml_training.job.settings import setting
from vdk.plugin.ml_training.local.container import ContainerStarter
from vdk.plugin.ml_training.local.container import inherited_env
from vdk.plugin.ml_training.local.container_engine import LOCAL_REPOSITORY
from vdk.plugin.ml_training.local.container_engine import ContainerEngine
from vdk.plugin.ml_training.local.container_engine import find_engine
from vdk.plugin.ml_training.local.launch_plan import FORK
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.local.launch_plan import visible_gpus
from vdk.plugin.ml_training.ops.imports import check_job_imports
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.vocabulary.human_units import counted

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image.build_progress import Progress


def container_plan(spec: MLJobSpec, mode: str) -> tuple[LaunchPlan, int]:
    """The local plan of `mode` for a run in the image, and the GPUs it passes in (full runs only)."""
    if mode == protocol.SMOKE:  # ranks forked from torchrun, as in a local smoke run (the image is Linux)
        return smoke_plan(spec, FORK, inherited=inherited_env(0, spec)), 0
    gpus = visible_gpus()
    return full_plan(spec, gpus, inherited=inherited_env(gpus, spec)), gpus


def engine_from(configuration: Any, job_dir: Path | None = None) -> ContainerEngine:
    """The engine of ml_training_container_engine and its run options (the environment, else [vdk] of the job)."""
    return find_engine(
        setting(configuration, CONTAINER_ENGINE, job_dir)[0], setting(configuration, CONTAINER_RUN_OPTIONS, job_dir)[0]
    )


def prepare(
    spec: MLJobSpec, mode: str, engine: ContainerEngine, progress: Progress, recheck_imports: bool = False
) -> tuple[LaunchPlan, ContainerStarter]:
    """Load the job's image into the engine (its assembly shown to `progress`) and plan the run in it; the plan
    notes which image it is.
    `recheck_imports`: the import check ran without knowing the base's packages, so it runs again once the base
    is read, before anything is built (ImportCheckFailed)."""
    engine.check()
    image, digest = load_image(spec, engine, progress, recheck_imports)
    plan, gpus = container_plan(spec, mode)
    where = f"in the job's image {image.reference} ({digest}: the image `vdk deploy` pushes), with {engine.name}"
    gpu_note = [f"{counted(gpus, 'GPU')} passed into the container"] if gpus else []
    limits = (
        [f"this machine's limits, which it cannot raise to {engine.name}'s defaults: {' '.join(engine.host_options)}"]
        if engine.host_options
        else []
    )
    plan = dataclasses.replace(plan, notes=(where, *gpu_note, *limits, *plan.notes))
    return plan, ContainerStarter(engine, image, spec, gpus)


def load_image(
    spec: MLJobSpec, engine: ContainerEngine, progress: Progress, recheck_imports: bool = False
) -> tuple[layout.JobImage, str]:
    """The job's image in the engine's store, as `vdk deploy` would build it: (its local reference and
    interpreter, its digest). Built and loaded only when the engine does not have it yet. `recheck_imports`: the
    job's imports are checked against the base's packages once they are read, before building."""
    from vdk.plugin.ml_training.image.build import assemble
    from vdk.plugin.ml_training.image.build_session import BuildSession
    from vdk.plugin.ml_training.image.serve import serve

    repository = f"{LOCAL_REPOSITORY}/{spec.name}"
    with BuildSession(spec, None, progress) as session:  # no registry to push to: the base's only
        recheck = (lambda base: check_job_imports(spec, base.provides)) if recheck_imports else None
        image = assemble(spec, LOCAL_REPOSITORY, audit.collect(spec.job_dir), session, progress, base_known=recheck)
        local = f"{repository}:{image.target.tag}"
        if engine.image_id(local) == image.config_digest:
            progress.stage(f"{engine.name} has this image already")
        else:
            if engine.image_id(image.config_digest) is None:
                progress.stage(
                    f"Loading it into {engine.name} (the base's layers only the first time, then the job's layers)"
                )
                with serve(image, session.base_client, spec.name) as served:
                    engine.pull(served, progress.stage)
            engine.tag(image.config_digest, local)
            engine.keep_only(repository, local)  # one image per job: those of earlier runs go
        return layout.JobImage(local, image.python), image.digest

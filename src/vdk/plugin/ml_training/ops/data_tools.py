"""The data tools on this machine: the data command (`python -m vdk.plugin.ml_training.datafetch`, the code the
pods run) started in an environment of its own that has boto3 and huggingface_hub, made once and cached by uv
(`uv run --with ...`, on top of this interpreter; package indexes as the dependency layer finds them: `uv_run`).

Why apart: botocore wants python-dateutil<3 and kubernetes 37 wants >=3, so boto3 cannot be installed next to
the plugin's kubernetes client; and running the pods' own code is what makes a version resolved here the one
a pod fetches. Used to resolve references at deploy (ops/data_resolution.py) and to fetch samples, or
everything, for local runs (ops/local_data.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training import helper_processes
from vdk.plugin.ml_training.datafetch import DATA_TOOLS
from vdk.plugin.ml_training.datafetch import MODULE
from vdk.plugin.ml_training.datafetch import fetch_step
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.vocabulary.package_indexes import DEFAULT_INDEX_STRATEGY
from vdk.plugin.ml_training.vocabulary.package_indexes import INDEX_STRATEGIES
from vdk.plugin.ml_training.vocabulary.wire import ENV_PREFIX

DEFAULT_TIMEOUT = 600
# Settings of the user's shell that would send the tools to another store than the job's.
_SHELL_SETTINGS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "HF_ENDPOINT")

ProgressLine = Callable[[dict], None]


def requirements(schemes: Iterable[str]) -> list[str]:
    """What the tools for these schemes need (nothing for claims)."""
    out: list[str] = []
    for scheme in sorted(set(schemes)):
        out += DATA_TOOLS.get(scheme, ())
    return out


def uv_run(
    packages: Iterable[str], index_strategy: str = DEFAULT_INDEX_STRATEGY, job_dir: Path | None = None
) -> list[str]:
    """`uv run` in an environment of its own with `packages` on top of this interpreter (the command follows), its
    packages found as a job's installs find theirs (dependencies/uv_install.py): the same variables (`environment`),
    the job's `index_strategy`, and uv's configuration files from `job_dir` up, where the installs run (`--project`:
    uv discovers them from there, and the command keeps the caller's directory); without a job, the default
    strategy and the files from the caller's directory."""
    from vdk.plugin.ml_training.dependencies.uv_install import uv_command

    argv = [uv_command(), "run", "--no-project", "--quiet", "--python", sys.executable]
    argv += ["--index-strategy", INDEX_STRATEGIES[index_strategy]]
    if job_dir is not None:
        argv += ["--project", str(job_dir)]
    for package in packages:
        argv += ["--with", package]
    return argv


def command(
    schemes: Iterable[str],
    arguments: list[str],
    index_strategy: str = DEFAULT_INDEX_STRATEGY,
    job_dir: Path | None = None,
) -> list[str]:
    """The data command with the tools for `schemes`, for the job in `job_dir` searching indexes as its
    `index_strategy` says (`uv_run`)."""
    return [*uv_run(requirements(schemes), index_strategy, job_dir), "python", "-m", MODULE, *arguments]


def environment(job_env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment (uv's cache and indexes, the user's home) without the shell's endpoints, plus
    the job's: its [ml-training.env] and the values of its data secrets."""
    from vdk.plugin.ml_training.dependencies import package_index

    env = {k: v for k, v in os.environ.items() if k not in _SHELL_SETTINGS and not k.startswith(ENV_PREFIX)}
    env.update(package_index.uv_environment(os.environ))
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
    env["UV_NO_PROGRESS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    env.update(job_env)
    return env


def run(
    schemes: Iterable[str],
    arguments: list[str],
    job_env: Mapping[str, str],
    timeout: float = DEFAULT_TIMEOUT,
    progress: ProgressLine | None = None,
    index_strategy: str = DEFAULT_INDEX_STRATEGY,
    job_dir: Path | None = None,
) -> Any:
    """The command's JSON answer; SourceError for a problem of a source, MLTrainingError when the tools cannot
    run. `progress`: each progress line ({"target", "files", "bytes", ...}) as it comes. `index_strategy`,
    `job_dir`: the job's, whose index rules the tools' install follows (`uv_run`)."""
    errors: list[str] = []

    def told(line: str) -> None:  # stderr: progress lines as they come, the rest kept for the error message
        data = fetch_step.parse_progress_line(line)
        if data is None:
            errors.append(line)
        elif progress is not None:
            progress(data)

    try:
        done = helper_processes.run(
            command(schemes, arguments, index_strategy, job_dir),
            env=environment(job_env),
            timeout=timeout,
            on_stderr_line=told,
        )
    except OSError as e:
        raise MLTrainingError(
            f"the data tools cannot start ({e})", "reinstall vdk-ml-training (it brings uv)"
        ) from None
    except subprocess.TimeoutExpired:
        raise MLTrainingError(
            f"the data tools took longer than {timeout:.0f} s ({' '.join(arguments[:1])})",
            "check the connection to the data's store, then try again",
        ) from None
    answer = _json(done.stdout)
    error = fetch_step.answer_error(answer)
    if error is not None:
        raise error
    if done.returncode != 0 or answer is None:
        detail = "\n".join(line for line in errors if line.strip())[-2000:]
        raise MLTrainingError(
            f"the data tools (boto3, huggingface_hub, run by uv) failed (exit status {done.returncode}):\n{detail}",
            "check that the package index is reachable (the tools are installed from it once, then cached); "
            "`uv run --with boto3 python -c 'import boto3'` shows the same",
        )
    return answer


def _json(text: str) -> Any:
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None

"""The one job-directory factory of the tests (a config.ini as users write it, and the job's files), and
the jobs made with it that several test modules share."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.support.job_trees import write
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import load_job_spec

TRAIN = 'import torch\n\nif __name__ == "__main__":\n    print("train")\n'


def write_job(
    parent: Path,
    name: str = "my-job",
    *,
    ml: str | Mapping[str, str] = "",
    env: str | Mapping[str, str] | None = None,
    team: str | None = None,
    extra: str = "",
    files: Mapping[str, str | bytes] | None = None,
    config: str | None = None,
) -> Path:
    """`parent/name` with `files` (default: a train.py) and a config.ini: `[owner] team` when given,
    `[job] type = ml-training`, `[ml-training]` with `ml`, `[ml-training.env]` with `env` when given,
    then `extra` as written; or exactly `config` (a broken file, a data job's)."""
    job = parent / name
    job.mkdir(parents=True, exist_ok=True)
    for relative, content in ({"train.py": TRAIN} if files is None else files).items():
        write(job, relative, content)
    (job / "config.ini").write_text(config if config is not None else config_ini(ml, env, team, extra))
    return job


def config_ini(
    ml: str | Mapping[str, str] = "",
    env: str | Mapping[str, str] | None = None,
    team: str | None = None,
    extra: str = "",
) -> str:
    text = f"[owner]\nteam = {team}\n\n" if team else ""
    text += f"[job]\ntype = ml-training\n\n[ml-training]\n{_lines(ml)}"
    if env is not None:
        text += f"\n[ml-training.env]\n{_lines(env)}"
    return text + extra


def _lines(values: str | Mapping[str, str]) -> str:
    if isinstance(values, Mapping):
        return "".join(f"{key} = {value}\n" for key, value in values.items())
    return values if not values or values.endswith("\n") else values + "\n"


def job_on(parent: Path, base_image: str, name: str = "job", extra: str = "") -> MLJobSpec:
    """The spec of a job with nothing about its base but `base_image` (and `extra`, more [ml-training] keys)."""
    ml = f"base_image = {base_image}\ngpus_per_node = 0\n{extra}"
    return load_job_spec(
        write_job(parent, name, ml=ml, files={"train.py": "if __name__ == '__main__':\n    print('training')\n"})
    )


API_TRAIN = """\
import torch

if __name__ == "__main__":
    torch.nn.Linear(4, 1)
"""


def api_job(parent: Path, base_image: str, name: str = "api-job") -> Path:
    """A job of team ml-platform on 2 nodes of 1 GPU, whose base `base_image` is described by its keys
    (Python 3.11 with torch): for the use cases of ops/ called as a notebook calls them."""
    return write_job(
        parent,
        name,
        team="ml-platform",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\nnodes = 2\n"
        "gpus_per_node = 1\n",
        files={"train.py": API_TRAIN},
    )


CS_TRAIN = """\
import argparse
import sys
import time

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    for step in range(args.steps):
        print(f"step {step}: loss={1.0 / (step + 1):.3f}", flush=True)
        time.sleep(args.sleep)
    if args.fail:
        print("Traceback (most recent call last):\\nRuntimeError: the loss diverged", file=sys.stderr, flush=True)
        sys.exit(1)
    print("training done", flush=True)
"""


def cs_job(
    parent: Path, name: str = "cs-train", *, args: str = "--steps 3", extra: str = "", team: str = "ml-team"
) -> Path:
    """A job for deploys through the test Control Service: one CPU pod (backend `job`), no base image of its own
    (the Control Service's ml-training entry gives it), its base described (Python 3.11 with torch), in a git
    repository of its own (its commit travels with the upload); train.py prints steps (`--steps`, `--sleep`,
    `--fail`)."""
    import subprocess

    ml = {"base_python_version": "3.11", "base_provides": "torch", "gpus_per_node": "0", "cpu": "1",
          "memory": "1Gi", "backend": "job", "args": args, "smoke_timeout": "2m"}  # fmt: skip
    job = write_job(parent, name, team=team, ml=ml, extra=extra, files={"train.py": CS_TRAIN})
    git = ["git", "-c", "user.email=ada@example.com", "-c", "user.name=Ada"]
    subprocess.run([*git, "init", "--quiet", str(parent)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=parent, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "the job"], cwd=parent, check=True)
    return job

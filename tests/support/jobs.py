"""The one job-directory factory of the tests: a config.ini as users write it, and the job's files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

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
        path = job / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
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

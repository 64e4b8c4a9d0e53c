"""The data step of a rendered pod run for real, as a process: the command and environment exactly as the
manifest renders them (the init container's, or a TrainJob's training container's), with what a kubelet and the
job's image supply — the image's interpreter with its dependency layer (here: the data tools' environment,
which has the same boto3 and huggingface_hub), each `secretKeyRef` resolved from the test's Secrets, and the
pod's mount paths rewritten to host directories (there is no container filesystem here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from vdk.plugin.ml_training.datafetch import MODULE
from vdk.plugin.ml_training.ops import data_tools


def container_env(entries: list[dict], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    env = {}
    for entry in entries:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = secrets[ref["name"]][ref["key"]]
    env.pop("PYTHONPATH", None)  # the image's layout; the data tools' environment has its own
    return env


def run_data_step(
    command: list[str],
    env_entries: list[dict],
    paths: dict[str, Path],
    secrets: dict[str, dict[str, str]] | None = None,
    schemes: tuple[str, ...] = ("s3", "hf"),
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    assert command[1:3] == ["-m", MODULE], command[:4]
    arguments = []
    for arg in command[3:]:
        for mounted, host in sorted(paths.items(), key=lambda item: -len(item[0])):
            arg = arg.replace(mounted, str(host))
        arguments.append(arg)
    env = data_tools.environment(container_env(env_entries, secrets or {}))
    return subprocess.run(
        data_tools.command(schemes, arguments), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )

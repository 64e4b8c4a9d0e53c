"""The runtime bootstrap started as a job image starts it (`python -m vdk.plugin.ml_training.runtime.bootstrap
ENTRY`, alone or under torchrun, no local launcher), in an environment without the plugin's own settings."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from vdk.plugin.ml_training import layout

BOOTSTRAP = "vdk.plugin.ml_training.runtime.bootstrap"


def environ_without(*prefixes: str, names: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment without the variables that start with one of `prefixes` or are in `names`."""
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in names}


def bootstrap_script(cwd: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`script` (dedented) as cwd/train.py, run by the bootstrap alone on no GPU: none of the plugin's
    settings and no RANK but those in `env`."""
    (cwd / "train.py").write_text(textwrap.dedent(script))
    return subprocess.run(
        [sys.executable, "-m", BOOTSTRAP, "train.py"],
        cwd=cwd,
        env={**environ_without("VDK_ML_TRAINING_", names=("RANK",)), "CUDA_VISIBLE_DEVICES": "", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def torchrun_command(*entry: str, processes: int = 2) -> list[str]:
    """torchrun starting `processes` ranks of the bootstrap on `entry` (a script and its arguments) on this machine."""
    return [
        sys.executable,
        "-m",
        layout.LAUNCHER_MODULE,
        "--standalone",
        f"--nproc-per-node={processes}",
        "-m",
        BOOTSTRAP,
        *entry,
    ]

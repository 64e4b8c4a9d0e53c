"""What README installs must give a working `vdk` next to torch, transformers 5 and accelerate.

Guards the measured trap: transformers 5 needs pydantic 2, the newest Control Service CLI needs
pydantic<2, and pip then silently picks an old vdk-control-cli with which every `vdk` command fails.
"""

import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
# Runs in both environments that `make test` builds (with and without the Control Service CLI).
pytestmark = pytest.mark.control_cli


def has(dist: str) -> bool:
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


def test_pip_check_is_clean():
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.needs_transformers  # `make test` runs it in .venv only
@pytest.mark.skipif(has("vdk-plugin-control-cli"), reason="the Control Service environment has no transformers")
def test_training_stack_is_installed():
    assert int(md.version("transformers").split(".")[0]) >= 5
    assert md.version("torch").startswith("2.")
    assert has("accelerate")
    done = subprocess.run(
        [sys.executable, "-c", "import torch, transformers, accelerate; from transformers import Trainer"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_vdk_cli_loads_the_plugin_and_offers_the_verbs():
    done = subprocess.run([str(BIN / "vdk"), "--help"], capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Plugin load failed" not in out
    assert "pkg_resources is deprecated" not in out  # setuptools<80.9 keeps vdk quiet
    commands = out.split("Commands:")[1]
    for verb in ("run", "deploy", "list", "show", "execute", "delete"):
        assert f"\n  {verb} " in commands, f"`vdk {verb}` missing:\n{out}"
    listed = subprocess.run([str(BIN / "vdk"), "version"], capture_output=True, text=True, timeout=120)
    assert "vdk-ml-training" in listed.stdout + listed.stderr

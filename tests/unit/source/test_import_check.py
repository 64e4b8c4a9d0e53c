"""The import check: every module a job imports must be in its image (standard library, the job's own
modules, requirements.txt and what those depend on, the base image), read from the source alone."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from vdk.plugin.ml_training.source.import_check import check_imports
from vdk.plugin.ml_training.source.import_check import collect_imports
from vdk.plugin.ml_training.source.import_check import distribution_for
from vdk.plugin.ml_training.source.import_check import listed_for
from vdk.plugin.ml_training.source.requirements import RequirementsFile

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PYTORCH_BASE = ("torch", "torchvision", "torchaudio", "numpy", "pyyaml", "triton", "torchelastic")


def job(tmp_path: Path, files: dict[str, str], requirements: str | None = None) -> Path:
    root = tmp_path / "job"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    if requirements is not None:
        (root / "requirements.txt").write_text(textwrap.dedent(requirements))
    return root


def check(root: Path, base=("torch",), entry: str = "train.py", search: str = ""):
    requirements = root / "requirements.txt"
    return check_imports(root, root / entry, root / search, requirements if requirements.exists() else None, base)


def undeclared(result) -> list[tuple[str, int, str, str]]:
    return [(u.site.path, u.site.line, u.site.module, u.distribution) for u in result.undeclared]


@pytest.mark.parametrize("example", ["ddp-nccl", "hf-trainer", "single-gpu-loop"])
def test_the_examples_pass_on_their_base(example):
    root = EXAMPLES / example
    requirements = root / "requirements.txt"
    result = check_imports(root, root / "train.py", root, requirements if requirements.exists() else None, PYTORCH_BASE)
    assert result.passed and result.files == ("train.py",)


def test_an_undeclared_import_names_file_line_module_and_the_distribution_to_add(tmp_path):
    root = job(
        tmp_path,
        {"train.py": "import os\nimport torch\nimport yaml\nfrom PIL import Image\nimport sklearn.metrics\n"},
        "torch\n",
    )
    result = check(root)
    # the distribution as it names itself where it is installed (Pillow 13 spells itself `pillow`), else the table's
    found = [(path, line, module, canonicalize_name(name)) for path, line, module, name in undeclared(result)]
    assert found == [
        ("train.py", 3, "yaml", "pyyaml"),
        ("train.py", 4, "PIL", "pillow"),
        ("train.py", 5, "sklearn.metrics", "scikit-learn"),
    ]
    assert result.undeclared[0].site.statement == "import yaml"
    assert result.undeclared[0].version  # PyYAML is installed here: its version is the pin to suggest
    assert result.undeclared[1].site.statement == "from PIL import Image"


def test_declared_imports_pass_whatever_their_spelling(tmp_path):
    root = job(
        tmp_path,
        {"train.py": "import yaml, cv2, sklearn, google.protobuf, PIL.Image, huggingface_hub, attr\n"},
        """
        # pinned, with extras, markers, hashes and comments
        PyYAML==6.0.2 --hash=sha256:abc
        opencv-python-headless>=4 ; sys_platform == "linux"
        Scikit_Learn[alldeps]  # any spelling of the name
        -r more.txt
        --index-url https://example.com/simple
        pillow @ https://example.com/Pillow-10.0.0-cp311-cp311-manylinux_2_28_x86_64.whl
        """,
    )
    (root / "more.txt").write_text("google-cloud-storage\nhuggingface-hub\nattrs\n")
    assert check(root).passed


def test_what_the_requirements_depend_on_is_in_the_image_too(tmp_path):
    # transformers depends on numpy, PyYAML, safetensors... as this machine's metadata says
    root = job(tmp_path, {"train.py": "import transformers, yaml, safetensors, numpy\n"}, "transformers\n")
    assert check(root, base=()).passed
    # an extra's dependencies only when the extra is asked for: accelerate is transformers[torch]'s
    root = job(tmp_path / "x", {"train.py": "import transformers, accelerate\n"}, "transformers\n")
    assert undeclared(check(root, base=())) == [("train.py", 1, "accelerate", "accelerate")]


def test_the_base_image_provides_what_it_has(tmp_path):
    root = job(tmp_path, {"train.py": "import torch, numpy, yaml\n"})
    assert check(root, base=PYTORCH_BASE).passed
    assert undeclared(check(root, base=())) == [
        ("train.py", 1, "torch", "torch"),
        ("train.py", 1, "numpy", "numpy"),
        ("train.py", 1, "yaml", "PyYAML"),
    ]
    unknown = check(root, base=None)
    assert not unknown.passed and not unknown.base_known  # never read: what it has is not known


def test_guarded_optional_and_type_checking_imports_are_left_alone(tmp_path):
    root = job(
        tmp_path,
        {
            "train.py": """
                import contextlib, sys, importlib.util
                from typing import TYPE_CHECKING
                try:
                    import wandb
                except ImportError:
                    wandb = None
                try:
                    import apex
                except (ModuleNotFoundError, AttributeError):
                    pass
                with contextlib.suppress(ImportError):
                    import deepspeed
                if TYPE_CHECKING:
                    import pandas
                if sys.version_info < (3, 11):
                    import tomli
                if importlib.util.find_spec("bitsandbytes"):
                    import bitsandbytes
                try:
                    import yaml
                except ValueError:  # not a guard against a missing module
                    pass

                def main():
                    import matplotlib  # runs when main() does
            """
        },
    )
    assert [u.site.module for u in check(root).undeclared] == ["yaml", "matplotlib"]


def test_the_jobs_own_modules_are_followed_and_their_imports_checked(tmp_path):
    root = job(
        tmp_path,
        {
            "src/train.py": "import utils\nfrom models import net\nfrom models.heads import Head\n",
            "src/utils.py": "import yaml\n",
            "src/models/__init__.py": "from .layers import Block\n",
            "src/models/layers.py": "from . import helpers\n",
            "src/models/helpers.py": "import pandas\n",
            "src/models/net.py": "import cv2\n",
            "src/models/heads.py": "import torch\n",
            "src/data/readme.md": "a data directory is no module",
            "unused.py": "import scipy\n",
        },
    )
    result = check(root, entry="src/train.py", search="src")
    assert sorted(undeclared(result)) == [
        ("src/models/helpers.py", 1, "pandas", "pandas"),
        ("src/models/net.py", 1, "cv2", "opencv-python"),
        ("src/utils.py", 1, "yaml", "PyYAML"),
    ]
    assert set(result.files) == {
        "src/train.py",
        "src/utils.py",
        "src/models/__init__.py",
        "src/models/layers.py",
        "src/models/helpers.py",
        "src/models/net.py",
        "src/models/heads.py",
    }


def test_a_module_entrypoint_imports_from_the_job_directory(tmp_path):
    root = job(
        tmp_path, {"pkg/__init__.py": "", "pkg/train.py": "from pkg import data\n", "pkg/data.py": "import h5py\n"}
    )
    sites, files = collect_imports(root, root / "pkg" / "train.py", root)
    assert [(s.path, s.module) for s in sites] == [("pkg/data.py", "h5py")]
    assert "pkg/data.py" in files


def test_syntax_errors_are_left_to_the_run(tmp_path):
    root = job(tmp_path, {"train.py": "import yaml\ndef broken(:\n"})
    assert check(root).passed  # the smoke run shows the SyntaxError where Python finds it


def test_distribution_names_of_import_names():
    assert distribution_for("yaml") == "PyYAML"  # installed here: its metadata says so
    assert distribution_for("cv2.dnn") == "opencv-python"  # not installed: the table
    assert distribution_for("some_unknown_module") == "some_unknown_module"


def test_a_listed_distribution_is_found_by_its_import_name(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("PyYAML>=6\ntransformers\n")
    listed = RequirementsFile.read(path)
    assert listed_for(listed, "yaml.constructor") == "PyYAML" and listed_for(listed, "transformers") == "transformers"
    assert listed_for(listed, "numpy") is None and listed_for(RequirementsFile.read(None), "yaml") is None

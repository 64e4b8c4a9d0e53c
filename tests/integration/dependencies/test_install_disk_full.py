"""A full disk while installing requirements.txt is reported as a full disk (where, how much is free, what to do),
not as a bad requirement, wherever the requirements are installed: the image's dependency layer and a local run's
overlay. Real uv, a real full filesystem (a small tmpfs in a private mount namespace)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.wheels import make_wheel

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")

INSTALL = textwrap.dedent(
    """
    import subprocess, sys
    full, job, size, where = sys.argv[1:5]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", full], check=True)
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.image import dependency_layer
    from vdk.plugin.ml_training.image.base_facts import base_info
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.job import load_job_spec
    from vdk.plugin.ml_training.local import overlay
    spec = load_job_spec(job)
    try:
        if where == "layer":
            dependency_layer.dependency_layer(spec, base_info(spec), Progress())
        else:
            overlay.prepare(spec, note=lambda text: None)
    except MLTrainingError as e:
        print(type(e).__name__, type(e.__context__).__name__)  # OSError: the plugin's own write failed
        print(e)
    """
)


@pytest.fixture(scope="module")
def big_wheel_job(tmp_path_factory):
    """A job whose one requirement is a wheel of 4 MB that does not compress."""
    root = tmp_path_factory.mktemp("diskfull")
    wheels = root / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "bigdata", "1.0", files={"bigdata/blob.bin": os.urandom(4 * 1024 * 1024)})
    files = {
        "train.py": "if __name__ == '__main__':\n    pass\n",
        "requirements.txt": f"--no-index\n--find-links {wheels}\nbigdata==1.0\n",
    }
    return root, write_job(root, "job", ml="base_image = pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime\n", files=files)


@pytest.mark.parametrize(
    "where, size, uv_cache_on_the_full_disk, failed_write",
    [
        ("layer", "1m", True, "NoneType"),  # uv fails (its download)
        ("layer", "6m", False, "OSError"),  # the layer's tarball fails
        ("overlay", "1m", True, "NoneType"),  # uv fails (its download)
        ("overlay", "3m", False, "NoneType"),  # uv fails (its copy into the overlay)
    ],
    ids=["layer-uv-fails", "the-layer-write-fails", "overlay-uv-download-fails", "overlay-uv-copy-fails"],
)
def test_a_full_disk_is_named_as_such(big_wheel_job, tmp_path, where, size, uv_cache_on_the_full_disk, failed_write):
    root, job = big_wheel_job
    full = tmp_path / "full"
    full.mkdir()
    env = dict(os.environ, VDK_ML_TRAINING_CACHE_DIR=str(full / "cache"), PYTHONPATH=str(REPO))
    env["UV_CACHE_DIR"] = str(full / "uv" if uv_cache_on_the_full_disk else tmp_path / "uv")
    done = subprocess.run(
        ["unshare", "-rm", sys.executable, "-c", INSTALL, str(full), str(job), size, where],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    kind, message = done.stdout.split("\n", 1)
    assert kind == f"DiskFullError {failed_write}", done.stdout + done.stderr
    assert "the disk is full: no space left on the device of" in message and str(full) in message
    assert re.search(r"\d+(\.\d)? [KMGT]?B free once the unfinished install was removed", message), message
    assert "the requirements themselves are not at fault" in message
    assert "cannot be installed" not in message and "fix the requirement" not in message
    assert "Fix: free space on that disk" in message and "VDK_ML_TRAINING_CACHE_DIR" in message
    assert not os.listdir(full)  # the mount is gone with its namespace; nothing was left on the real disk

"""The busybox test base (a root filesystem pushed by podman) and a job to layer onto it."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.registry import podman

# Stands in for Python in the busybox test base: reports what the job image set up for the
# launch command (`python -m <launcher> -m <bootstrap> <entrypoint> <args>`; the last `-m` names the bootstrap).
FAKE_PYTHON = r"""#!/bin/sh
echo "argv=$*"
echo "cwd=$(pwd)"
echo "PYTHONPATH=$PYTHONPATH"
echo "PYTHONUNBUFFERED=$PYTHONUNBUFFERED"
echo "PATH=$PATH"
echo "BASE_MARKER=$BASE_MARKER"
module=""; previous=""
for arg in "$@"; do
  [ "$previous" = "-m" ] && module="$arg"
  previous="$arg"
done
module_path=$(echo "$module" | tr . /).py
IFS=:
for dir in $PYTHONPATH; do
  [ -f "$dir/$module_path" ] && echo "module_file=$dir/$module_path"
  for pkg in "$dir"/*/__init__.py; do [ -f "$pkg" ] && echo "package=$pkg"; done
done
unset IFS
for arg in "$@"; do
  case "$arg" in *.py) [ -f "$arg" ] && echo "entrypoint_file=$(pwd)/$arg";; esac
done
"""

BUSYBOX_TOOLS = ("sh", "ls", "cat", "env", "pwd", "echo", "tr", "test", "[", "find", "head")


def build_rootfs(root: Path, env_marker: str = "from-base") -> Path:
    """A tiny Linux root: busybox-static and a fake `python`."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (apt-get install busybox-static)")
    (root / "bin").mkdir(parents=True)
    shutil.copy(busybox, root / "bin" / "busybox")
    for tool in BUSYBOX_TOOLS:
        (root / "bin" / tool).symlink_to("busybox")
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    python = root / "usr" / "local" / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    (root / "tmp").mkdir()
    tarball = root.parent / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        for path in sorted(root.iterdir()):
            tar.add(path, arcname=path.name)
    return tarball


def push_base(podman_root: Path, tarball: Path, destination: str, format: str = "oci") -> str:
    """Import a root filesystem with podman and push it (OCI) to a registry: a third-party client
    makes the test base, so the builder is tested against images it did not write itself."""
    local = "localhost/vdk-test-base:1"
    podman(
        podman_root,
        "import",
        "--change",
        "ENV PATH=/usr/local/bin:/bin",
        "--change",
        "ENV PYTHONPATH=/base/lib",
        "--change",
        "ENV BASE_MARKER=from-base",
        str(tarball),
        local,
    )
    podman(podman_root, "push", "--tls-verify=false", "--format", format, local, destination)
    return destination


def image_job(job_dir: Path, base_image: str, extra: str = "") -> Path:
    """A small ml-training job: a script, a package, data that .gitignore drops, secrets."""
    job = write_job(
        job_dir.parent,
        job_dir.name,
        team="ml-platform",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\ngpus_per_node = 0\nargs = --epochs 2\n" + extra,
        files={
            "train.py": "import model\n\nif __name__ == '__main__':\n    model.train()\n",
            "model.py": "def train():\n    print('training')\n",
            "run.sh": "#!/bin/sh\nexec python train.py\n",
            "lib/__init__.py": "",
            "lib/util.py": "X = 1\n",
            ".gitignore": "data/\n*.log\n",
            "data/big.csv": "a,b\n1,2\n",
            "train.log": "old log\n",
            ".env": "API_TOKEN=secret\n",
            "__pycache__/model.cpython-311.pyc": b"\x00",
        },
    )
    (job / "run.sh").chmod(0o755)
    return job

"""Fixtures of the image tests: a real registry, a busybox base image in it, job directories."""
from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from vdk.plugin.ml_training.image import sources
from image_servers import Registry
from image_servers import have_registry
from image_servers import podman

# Stands in for Python in the busybox test base: reports what the job image set up for the
# launch command (`python -m torch.distributed.run -m <bootstrap> <entrypoint> <args>`).
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


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch, tmp_path):
    """No credentials, CA bundles, caches or timestamps of the machine leak into a test."""
    for name in ("REGISTRY_AUTH_FILE", "SOURCE_DATE_EPOCH", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg-runtime"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def runtime_package(monkeypatch, tmp_path_factory):
    """The plugin's runtime package as it ships in images. Until runtime/ exists in the source tree,
    a placeholder package with the same layout stands in for it (tests only)."""
    real = sources.runtime_package_dir()
    if (real / "runtime" / "bootstrap.py").is_file():
        return real
    fake = tmp_path_factory.getbasetemp() / "fake-runtime" / "ml_training"
    if not fake.exists():
        (fake / "runtime").mkdir(parents=True)
        (fake / "__init__.py").write_text('"""vdk-ml-training (test placeholder)."""\n')
        (fake / "runtime" / "__init__.py").write_text("")
        (fake / "runtime" / "bootstrap.py").write_text("print('bootstrap placeholder')\n")
    monkeypatch.setattr(sources, "runtime_package_dir", lambda: fake)
    return fake


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    if not have_registry():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    server = Registry(tmp_path_factory.mktemp("registry"))
    yield server
    server.stop()


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


@pytest.fixture(scope="session")
def podman_root(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    return tmp_path_factory.mktemp("podman")


def push_base(podman_root: Path, tarball: Path, destination: str) -> str:
    """Import a root filesystem with podman and push it (OCI) to a registry: a third-party client
    makes the test base, so the builder is tested against images it did not write itself."""
    local = "localhost/vdk-test-base:1"
    podman(
        podman_root, "import",
        "--change", "ENV PATH=/usr/local/bin:/bin",
        "--change", "ENV PYTHONPATH=/base/lib",
        "--change", "ENV BASE_MARKER=from-base",
        str(tarball), local,
    )
    podman(podman_root, "push", "--tls-verify=false", "--format", "oci", local, destination)
    return destination


@pytest.fixture(scope="session")
def base_image(registry, podman_root, tmp_path_factory) -> str:
    """`127.0.0.1:PORT/base/busybox:1`: busybox + a fake python, pushed by podman."""
    tarball = build_rootfs(tmp_path_factory.mktemp("base") / "rootfs")
    return push_base(podman_root, tarball, f"{registry.host}/base/busybox:1")


def write_job(job_dir: Path, base_image: str, extra: str = "") -> Path:
    """A small ml-training job: a script, a package, data that .gitignore drops, secrets."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.ini").write_text(
        "[owner]\nteam = ml-platform\n\n[job]\ntype = ml-training\n\n"
        f"[ml-training]\nbase_image = {base_image}\nbase_python_version = 3.11\ngpus_per_node = 0\n"
        "args = --epochs 2\n" + extra
    )
    (job_dir / "train.py").write_text("import model\n\nif __name__ == '__main__':\n    model.train()\n")
    (job_dir / "model.py").write_text("def train():\n    print('training')\n")
    (job_dir / "run.sh").write_text("#!/bin/sh\nexec python train.py\n")
    (job_dir / "run.sh").chmod(0o755)
    (job_dir / "lib").mkdir()
    (job_dir / "lib" / "__init__.py").write_text("")
    (job_dir / "lib" / "util.py").write_text("X = 1\n")
    (job_dir / ".gitignore").write_text("data/\n*.log\n")
    (job_dir / "data").mkdir()
    (job_dir / "data" / "big.csv").write_text("a,b\n1,2\n")
    (job_dir / "train.log").write_text("old log\n")
    (job_dir / ".env").write_text("API_TOKEN=secret\n")
    (job_dir / "__pycache__").mkdir()
    (job_dir / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\x00")
    return job_dir


@pytest.fixture
def job_dir(tmp_path, base_image) -> Path:
    return write_job(tmp_path / "train-job", base_image)

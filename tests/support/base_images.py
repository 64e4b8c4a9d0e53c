"""The bases of issue 13, each a real image in the test registry, built on first use from the
Debian bookworm root filesystem (debian_base.py):

- `debian`: python3 only, no `python` (Debian's own CPython 3.11; nothing installed but the stdlib);
- `python_only`: `python` only: a later layer deletes `python3` (a whiteout) and adds `python`;
- `venv`: the interpreter under /opt/venv/bin, first on the PATH, with a package of its own;
- `torch_dist_packages`: torch 2.13.0+cpu and numpy in /usr/local/lib/python3.11/dist-packages (where
  `pip install` as root puts them on Debian; their metadata and package directories, not the real
  code), a Debian-packaged egg-info, and a package that a later layer's `rm -rf` removed again.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from functools import cached_property
from pathlib import Path

from tests.support.debian_base import DEBIAN_ENV
from tests.support.debian_base import PACKAGES
from tests.support.debian_base import RootFS
from tests.support.debian_base import debian_rootfs
from tests.support.debian_base import derive
from tests.support.debian_base import image_key
from tests.support.debian_base import import_image
from tests.support.debian_base import load_image
from tests.support.debian_base import push
from tests.support.debian_base import rootfs_key
from tests.support.debian_base import save_image
from tests.support.registry import podman

SITE = "/usr/local/lib/python3.11/dist-packages"
# One repository: the Debian layer they share is pushed once.
REPOSITORY = "base/debian"
FORMAT = "bases-v1"  # bump when how the bases are made changes


def dist_info(directory: str, name: str, version: str) -> str:
    """A shell command writing a distribution's metadata, as pip leaves it."""
    info = f"{directory}/{name}-{version}.dist-info"
    return (
        f"mkdir -p {info} && printf 'Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n\\nLong text\\n' "
        f"> {info}/METADATA"
    )


class LocalBases:
    """Built and pushed when a test first asks for one; each at most once per test session, and
    built with podman at most once per machine (then its bytes come from the cache)."""

    def __init__(self, podman_root: Path, registry_host: str):
        self.podman_root = podman_root
        self.registry_host = registry_host
        self.build_seconds: dict[str, float] = {}  # per base: how long making it took this session

    @cached_property
    def rootfs(self) -> RootFS:
        return debian_rootfs()

    @cached_property
    def _debian_local(self) -> str:
        return import_image(self.podman_root, self.rootfs, f"vdk-test-debian:{self.rootfs.key}", DEBIAN_ENV)

    def _image(self, tag: str, containerfile: str | None) -> str:
        """base/debian:<tag>: the Debian image (containerfile None) or one derived from it."""
        started = time.monotonic()
        destination = f"{self.registry_host}/{REPOSITORY}:{tag}"
        key = image_key(FORMAT, rootfs_key(PACKAGES), json.dumps(DEBIAN_ENV), containerfile or "")
        if not load_image(key, destination):
            local = self._debian_local
            if containerfile is not None:
                local = derive(self.podman_root, local, f"vdk-test-{tag}:{key}", containerfile)
            push(self.podman_root, local, destination)
            save_image(destination, key)
        self.build_seconds[tag] = time.monotonic() - started
        return destination

    @cached_property
    def debian(self) -> str:
        return self._image("python3-bookworm", None)

    @cached_property
    def python_only(self) -> str:
        return self._image("python-only", "RUN rm /usr/bin/python3 && ln -s python3.11 /usr/bin/python\n")

    @cached_property
    def venv(self) -> str:
        return self._image(
            "venv",
            "RUN python3 -m venv --without-pip /opt/venv"
            f" && {dist_info('/opt/venv/lib/python3.11/site-packages', 'venvdep', '2.0')}"
            f" && {dist_info('/usr/lib/python3/dist-packages', 'systemonly', '1.0')}\n"
            f"ENV PATH=/opt/venv/bin:{DEBIAN_ENV['PATH']}\n",
        )

    @cached_property
    def torch_dist_packages(self) -> str:
        return self._image(
            "torch-dist-packages",
            f"RUN {dist_info(SITE, 'oldpkg', '1.0')}\n"
            f"RUN rm -rf {SITE} && mkdir -p {SITE}/torch {SITE}/numpy"
            f" && echo '__version__ = \"2.13.0+cpu\"' > {SITE}/torch/__init__.py"
            f" && {dist_info(SITE, 'torch', '2.13.0+cpu')} && {dist_info(SITE, 'numpy', '2.1.3')}"
            " && printf 'Metadata-Version: 1.1\\nName: six\\nVersion: 1.16.0\\n'"
            " > /usr/lib/python3/dist-packages/six-1.16.0.egg-info\n",
        )


# --- layouts of well-known bases, to check the table against inspection ----------------------
# The real pytorch/pytorch and python images cannot be pulled here. These rebuild what inspection
# looks at (files, links, metadata, environment; no real binaries) as their public Dockerfiles make
# it: docker-library/python (Python built into /usr/local, `python` -> `python3` -> `python3.11`,
# ENV PATH=/usr/local/bin:..., PYTHON_VERSION) and pytorch/pytorch's Dockerfile (Ubuntu 22.04,
# conda in /opt/conda with `conda install python=3.11 pyyaml numpy ipython`, then
# `pip install torch torchvision torchaudio` and `pip install torchelastic`, ENV PATH=/opt/conda/bin:...).

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n'
UBUNTU_2204 = (
    'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'
)
ELF = b"\x7fELF not a real interpreter"  # inspection never runs it


def _metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()


def _site(prefix: str, distributions: dict[str, str]) -> dict:
    return {
        f"{prefix}/{name.replace('-', '_')}-{version}.dist-info/METADATA": _metadata(name, version)
        for name, version in distributions.items()
    }


PYTHON_311_SLIM_BOOKWORM = {
    "files": {
        "etc/os-release": DEBIAN_12.encode(),
        "usr/local/bin/python3.11": (ELF, 0o755),
        "usr/local/bin/python3": "->python3.11",
        "usr/local/bin/python": "->python3",
        "usr/local/lib/python3.11/os.py": b"",
        **_site("usr/local/lib/python3.11/site-packages", {"pip": "24.0", "setuptools": "65.5.1", "wheel": "0.43.0"}),
    },
    "env": {
        "PATH": "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "PYTHON_VERSION": "3.11.10",
    },
}

PYTORCH_2_13_RUNTIME = {
    "files": {
        "etc/os-release": UBUNTU_2204.encode(),
        "opt/conda/bin/python3.11": (ELF, 0o755),
        "opt/conda/bin/python3": "->python3.11",
        "opt/conda/bin/python": "->python3.11",
        "opt/conda/lib/python3.11/os.py": b"",
        **_site(
            "opt/conda/lib/python3.11/site-packages",
            {
                "conda": "24.9.2",
                "PyYAML": "6.0.2",
                "numpy": "2.1.3",
                "ipython": "8.29.0",
                "torch": "2.13.0",
                "torchvision": "0.28.0",
                "torchaudio": "2.13.0",
                "triton": "3.7.0",
                "nvidia-cublas-cu13": "13.0.0.19",
                "nvidia-cudnn-cu13": "9.13.0.50",
                "filelock": "3.16.1",
                "torchelastic": "0.2.2",
            },
        ),
    },
    "env": {
        "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin"
        ":/usr/bin:/sbin:/bin",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "PYTORCH_VERSION": "2.13.0",
    },
}


def layout_tarball(path: Path, files: dict) -> Path:
    """A root filesystem tarball: path -> bytes, (bytes, mode), or "->target" for a symbolic link."""
    with tarfile.open(path, "w") as tar:
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            data = b""
            if isinstance(content, str) and content.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, content[2:]
            else:
                data, mode = content if isinstance(content, tuple) else (content, 0o644)
                info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return path


def push_layout(podman_root: Path, layout: dict, destination: str) -> str:
    """The layout as an image (podman import), pushed to `destination`."""
    directory = podman_root / "layouts"
    directory.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(destination.encode()).hexdigest()[:12]
    tarball = layout_tarball(directory / f"{name}.tar", layout["files"])
    local = f"localhost/vdk-test-layout-{name}:1"
    changes = [arg for key, value in layout["env"].items() for arg in ("--change", f"ENV {key}={value}")]
    podman(podman_root, "import", *changes, str(tarball), local)
    return push(podman_root, local, destination)

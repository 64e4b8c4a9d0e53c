"""Hand-made wheels and sdists, so dependency tests need no package index."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    console_script: str | None = None,
    files: dict[str, bytes] | None = None,
) -> Path:
    """A minimal valid wheel with one module `name` (dashes -> underscores) that knows its version,
    plus `files` (path in the wheel -> content)."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    content = {
        f"{module}/__init__.py": f"__version__ = {version!r}\n".encode(),
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
        **(files or {}),
    }
    if console_script:
        content[f"{dist_info}/entry_points.txt"] = f"[console_scripts]\n{console_script} = {module}:main\n".encode()
        content[f"{module}/__init__.py"] += b"def main():\n    print('hello')\n"
    record = "\n".join(_record_line(n, d) for n, d in content.items()) + f"\n{dist_info}/RECORD,,\n"
    content[f"{dist_info}/RECORD"] = record.encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{module}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in content.items():
            zf.writestr(n, d)
    return path


def make_sdist(directory: Path, name: str, version: str) -> Path:
    """A source distribution only (no wheel): what a wheels-only install must refuse."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member, data in {
            f"{name}-{version}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
            f"{name}-{version}/setup.py": (
                f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n".encode()
            ),
        }.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path

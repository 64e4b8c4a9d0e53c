"""Hand-made wheels, sdists and package indexes, so dependency tests need no network."""

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
    """A source distribution only (no wheel), with a setup.py only (setuptools' legacy build backend)."""
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


def simple_index(directory: Path, files: list[Path]) -> str:
    """A package index in a directory, as PEP 503 lays it out (a page per project linking its files): its file://
    URL, for `--index-url`, `--extra-index-url` or pip's and uv's variables."""
    projects: dict[str, list[Path]] = {}
    for file in files:
        stem = file.name.removesuffix(".tar.gz").removesuffix(".whl")
        name = stem.split("-", 1)[0] if file.name.endswith(".whl") else stem.rsplit("-", 1)[0]
        projects.setdefault(name.replace("_", "-").replace(".", "-").lower(), []).append(file)
    for project, linked in projects.items():
        page = directory / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="{f.as_uri()}">{f.name}</a>\n' for f in linked)
        (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return directory.as_uri()


def wheel_of_installed(directory: Path, name: str) -> Path:
    """A wheel of a distribution installed in this environment (its files as its RECORD lists them), for a build
    backend a source distribution needs (setuptools) where no package index can be reached."""
    from importlib import metadata

    dist = metadata.distribution(name)
    module = dist.metadata["Name"].replace("-", "_")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{module}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for file in dist.files or []:
            if file.parts[0].endswith(".dist-info") and file.name in ("RECORD", "INSTALLER", "REQUESTED"):
                continue
            if "__pycache__" in file.parts or file.parts[0] == ".." or file.suffix == ".pyc":
                continue
            zf.write(file.locate(), str(file))
        info = f"{module}-{dist.version}.dist-info"
        lines = [f"{n},," for n in zf.namelist()] + [f"{info}/RECORD,,"]
        zf.writestr(f"{info}/RECORD", "\n".join(lines) + "\n")
    return path


def make_source(directory: Path, name: str, version: str, c_source: str | None = None) -> Path:
    """A source distribution built with setuptools (pyproject.toml): pure Python (one module that knows its
    version), or, with `c_source`, a C extension module `name`_native compiled from it."""
    module = name.replace("-", "_")
    extension = (
        f"from setuptools import Extension, setup\n"
        f"setup(ext_modules=[Extension({module + '_native'!r}, ['native.c'])])\n"
        if c_source is not None
        else "from setuptools import setup\nsetup()\n"
    )
    root = f"{name}-{version}"
    members = {
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{root}/pyproject.toml": (
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "{version}"\n\n[tool.setuptools]\npackages = ["{module}"]\n'
        ).encode(),
        f"{root}/setup.py": extension.encode(),
        f"{root}/{module}/__init__.py": f"__version__ = {version!r}\n".encode(),
        **({f"{root}/native.c": c_source.encode()} if c_source is not None else {}),
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def two_indexes(root: Path, name: str, older: str, newer: str, newer_on: str) -> dict[str, str]:
    """Two package indexes in `root` that both have `name`, only one of them at `newer` (`newer_on`: "index-url" or
    "extra-index-url", as pip's settings name them), the other at `older`: pip's variables that name them."""
    urls = {}
    for setting in ("index-url", "extra-index-url"):
        version = newer if setting == newer_on else older
        wheel = make_wheel(root / f"{setting}-files", name, version)
        urls[setting] = simple_index(root / setting, [wheel])
    return {"PIP_INDEX_URL": urls["index-url"], "PIP_EXTRA_INDEX_URL": urls["extra-index-url"]}

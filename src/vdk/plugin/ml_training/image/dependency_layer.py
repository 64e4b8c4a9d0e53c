"""The dependency layer: the job's requirements.txt installed for the base image's Python, with what the plugin
adds to it (image/layer_inputs.py: the data step's tools when config.ini references such data, the GPU sampler's
NVML binding).

uv resolves and installs wheels (pure-Python source distributions built into wheels: dependencies/uv_install.py),
for the base's platform and Python version, into a target
directory that becomes the layer below DEPS_DIR. What the base already provides (torch and its
CUDA wheels for PyTorch bases) is left out with uv's `--excludes`; when the base pins a version
(torch 2.13.0 in pytorch/pytorch:2.13.0-...), the rest is first resolved against that version,
so torchvision & co. match the base's torch. The finished layer is cached under a key of
(requirements, Python version, platform, provided and pinned packages, interpreter, index strategy, the package
index settings that reach uv: package_index.fingerprint), all that the layer's bytes depend on: unchanged
requirements cost one directory lookup, also when the base's tag is re-pushed (the same inputs give the same layer
bytes, whatever the base's digest). The uv part, shared with a local run's overlay,
is dependencies/uv_install.py; package indexes: its package_index.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.dependencies import cache_entries
from vdk.plugin.ml_training.dependencies import install_errors
from vdk.plugin.ml_training.dependencies import lock as package_lock
from vdk.plugin.ml_training.dependencies import uv_install
from vdk.plugin.ml_training.dependencies.lock import Lock
from vdk.plugin.ml_training.dependencies.uv_install import installed_packages
from vdk.plugin.ml_training.dependencies.uv_install import name_and_version
from vdk.plugin.ml_training.image import layer_tarball
from vdk.plugin.ml_training.image.base_facts import BaseInfo
from vdk.plugin.ml_training.image.build_progress import Activity
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.layer_inputs import data_tools
from vdk.plugin.ml_training.image.layer_inputs import extra_requirements
from vdk.plugin.ml_training.image.layer_inputs import layer_input
from vdk.plugin.ml_training.image.layer_inputs import requirements_file
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.source.job_files import SourceFile
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

_FORMAT = "deps-v4"  # bump when the layer's layout (or what layer.json keeps) changes: old entries are not reused
LOCK_FILE = "requirements.lock"  # beside the layer in its cache entry: the pins with the index's hashes (lock.py)
LAYER_META = "layer.json"  # the entry's meta file: touched when used (cache_entries)
CACHE_MAX_AGE_DAYS = 30
_ENTRY_SCRIPT = re.compile(rb"^#!.*python[0-9.]*[ \t]*$", re.M)


@dataclass(frozen=True)
class DependencyLayer:
    blob: layer_tarball.LayerBlob
    packages: tuple[tuple[str, str], ...]  # (name, version) actually installed, sorted
    has_scripts: bool  # console scripts in DEPS_DIR/bin
    cache_key: str
    from_cache: bool
    sizes: dict[str, int]  # installed bytes per distribution (from its RECORD)
    built_at: float | None = None  # when it was built (time.time()); None: a cache entry of an older version
    licenses: dict[str, str] = field(default_factory=dict)  # name -> the licence its metadata declares
    lock: Lock = field(
        default_factory=lambda: Lock("", {}, "not recorded")
    )  # the pins with the index's hashes (dependencies/lock.py)


# Layers this process built (cache key -> when): taken from the cache later in the same command (the build after
# the pre-flight check that built it), they are said to be built, not reused.
_built_here: dict[str, float] = {}


def cache_key(
    requirements: bytes,
    base: BaseInfo,
    extra: tuple[str, ...] = (),
    index_strategy: str = uv_install.DEFAULT_INDEX_STRATEGY,
    indexes: str = "",
) -> str:
    """The layer's cache entry: a hash of what its bytes depend on (`indexes`: uv_install.index_fingerprint)."""
    inputs = {
        "format": _FORMAT,
        "requirements_sha256": hashlib.sha256(requirements).hexdigest(),
        **({"extra": list(extra)} if extra else {}),
        "python": base.python_version,
        "platform": base.wheel_platform,
        "provides": sorted(base.provides),
        "pins": sorted(base.pins),
        "python_command": base.python,  # console scripts start it
        "index_strategy": index_strategy,
        "indexes": indexes,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _key(spec: MLJobSpec, base: BaseInfo, wanted: bytes | None, extra: tuple[str, ...]) -> str:
    indexes = uv_install.index_fingerprint(spec.job_dir)
    return cache_key(wanted or b"", base, extra, spec.index_strategy, indexes)


def cached_layer(spec: MLJobSpec, base: BaseInfo) -> DependencyLayer | None:
    """The layer a build of the job's requirements (with the data step's tools and the extra: `layer_input`,
    `extra_requirements`) for this kind of base would take from the cache."""
    wanted = layer_input(spec)
    extra = extra_requirements(spec, base)
    if wanted is None and not extra:
        return None
    key = _key(spec, base, wanted, extra)
    return _take(cache_root() / "deps" / key, key)


def dependency_layer(
    spec: MLJobSpec, base: BaseInfo, progress: Progress, refresh: bool = False
) -> DependencyLayer | None:
    """The cached or freshly built dependency layer; None when the job has no requirements (and no data step's
    tools, and needs no extra)."""
    wanted = layer_input(spec)
    extra = extra_requirements(spec, base)
    if wanted is None and not extra:
        return None
    requirements = requirements_file(spec)
    key = _key(spec, base, wanted, extra)
    entry = cache_root() / "deps" / key
    if not refresh:
        cached = _take(entry, key)  # gone meanwhile (a prune): a miss, built again
        if cached is not None:
            progress.stage(f"Dependencies: {_size_text(cached)}, {_origin(cached)}")
            return cached
    tools = "the data step's tools" if data_tools(spec) else None
    what = " and ".join(x for x in (requirements.name if requirements else None, tools, *extra) if x)
    progress.stage(f"Dependencies: installing {what} for Python {base.python_version} ({base.wheel_platform})")
    started = time.monotonic()
    activity = progress.activity("dependencies")
    try:
        layer = _build(spec, requirements, base, entry, key, extra, activity, replace=refresh)
    except OSError as e:
        install_errors.raise_if_full(e, cache_root())  # a full disk, not a bad requirement
        raise
    finally:
        activity.close()
    _built_here[key] = time.time()
    progress.stage(f"Dependencies: {_size_text(layer)}, built in {_seconds(time.monotonic() - started)}")
    prune_cache()
    return layer


def _size_text(layer: DependencyLayer) -> str:
    return f"{counted(len(layer.packages), 'package')}, {size_text(layer.blob.size)} compressed"


def _origin(layer: DependencyLayer) -> str:
    """Where a layer taken from the cache came from, truthfully: built earlier in this command, or reused."""
    built = _built_here.get(layer.cache_key)
    if built is not None:
        return f"built {_seconds(time.time() - built)} ago by this command (its pre-flight check)"
    if layer.built_at is not None:
        ago = _seconds(time.time() - layer.built_at)
        return f"reused: built {ago} ago for the same requirements.txt, package indexes and Python"
    return "reused from the cache (the same requirements.txt, package indexes and Python)"


def _seconds(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def prune_cache(max_age_days: float = CACHE_MAX_AGE_DAYS) -> list[Path]:
    """Remove dependency layers not used for `max_age_days` (each can be hundreds of MB)."""
    return cache_entries.prune_unused(cache_root() / "deps", LAYER_META, max_age_days)


def _take(entry: Path, key: str) -> DependencyLayer | None:
    """The entry, taken for this command (cache_entries.use: touched, and not pruned while this process pushes its
    blob); None when it is not there (any more) or not whole."""
    return _load(entry, key) if cache_entries.use(entry, LAYER_META) else None


def _load(entry: Path, key: str) -> DependencyLayer | None:
    try:
        meta = json.loads((entry / LAYER_META).read_text())
        blob_path = entry / meta["file"]
        if blob_path.stat().st_size != meta["size"]:
            return None
    except (OSError, ValueError, KeyError):
        return None
    blob = layer_tarball.LayerBlob(meta["digest"], meta["diff_id"], meta["size"], blob_path)
    packages = tuple((name, version) for name, version in meta["packages"])
    built_at = meta.get("built_at")
    return DependencyLayer(
        blob,
        packages,
        meta["has_scripts"],
        key,
        True,
        dict(meta.get("sizes") or {}),
        float(built_at) if isinstance(built_at, (int, float)) else None,
        dict(meta.get("licenses") or {}),
        _read_lock(entry, meta),
    )


def _read_lock(entry: Path, meta: dict) -> Lock:
    if meta.get("lock_error"):
        return Lock("", {}, str(meta["lock_error"]))
    try:
        text = (entry / LOCK_FILE).read_text(encoding="utf-8")
    except OSError:
        return Lock("", {}, "not recorded") if meta.get("packages") else Lock("", {})
    return Lock(text, package_lock.parse_hashes(text))


def _build(
    spec: MLJobSpec,
    requirements: Path | None,
    base: BaseInfo,
    entry: Path,
    key: str,
    extra: tuple[str, ...] = (),
    activity: Activity | None = None,
    replace: bool = False,
) -> DependencyLayer:
    """Build the layer in a scratch directory of the cache and move it into `entry` in one step. An entry that
    another command (a deploy in another terminal, a test worker) built meanwhile is taken as it is, unless
    `replace` (a refresh): its files are read by that command until it pushed them."""
    activity = activity or Activity()
    root = cache_root() / "deps"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=root))
    try:
        target = work / "target"
        if requirements is not None or data_tools(spec):
            for_base = uv_install.Target(
                base.python_version, base.wheel_platform, base.provides, base.pins, spec.index_strategy
            )
            uv_install.install(
                _layer_requirements(requirements, data_tools(spec), work),
                target,
                spec.job_dir,
                for_base,
                "deploy again",
                activity=activity,
            )
        if extra:
            _bundle(extra, target)
        activity.step("writing the layer")
        packages = installed_packages(target)
        sizes = installed_sizes(target)
        licenses = package_lock.licenses(target)
        for_hashes = uv_install.Target(
            base.python_version, base.wheel_platform, base.provides, index_strategy=spec.index_strategy
        )
        lock = package_lock.lock(packages, spec.job_dir, for_hashes, requirements)
        has_scripts = _fix_scripts(target / "bin", base.python)
        files = scan_tree(target)
        staged = work / "layer"
        blob = layer_tarball.write_layer(layout.DEPS_DIR, files, staged, level=layer_tarball.SMALL_GZIP_LEVEL)
        meta: dict[str, Any] = {
            "file": blob.path.name if blob.path else "",
            "digest": blob.digest,
            "diff_id": blob.diff_id,
            "size": blob.size,
            "packages": [list(p) for p in packages],
            "sizes": sizes,
            "has_scripts": has_scripts,
            "python": base.python_version,
            "platform": base.wheel_platform,
            "excluded": list(base.provides),
            "built_at": time.time(),
            "licenses": licenses,
            **({"lock_error": lock.error} if lock.error else {}),
        }
        if lock.text:
            (staged / LOCK_FILE).write_text(lock.text, encoding="utf-8")
        (staged / LAYER_META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        try:
            os.replace(staged, entry)  # the entry appears complete or not at all
        except OSError:  # an entry is there: never removed under another command that has read it
            concurrent = _take(entry, key)  # another build of the same inputs finished first
            if concurrent is not None and not replace:
                return concurrent
            try:
                os.replace(entry, work / "replaced")  # a broken or refreshed entry, moved aside in one step
            except FileNotFoundError:
                pass  # pruned meanwhile
            os.replace(staged, entry)
        cache_entries.use(entry, LAYER_META)  # this command pushes its blob: not pruned under it
        return DependencyLayer(
            layer_tarball.LayerBlob(blob.digest, blob.diff_id, blob.size, entry / meta["file"]),
            packages,
            has_scripts,
            key,
            False,
            sizes,
            meta["built_at"],
            licenses,
            lock,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _layer_requirements(requirements: Path | None, tools: list[str], work: Path) -> Path:
    """One requirements file for uv: the job's (a sweep's: with its packages) and the data step's tools."""
    if not tools and requirements is not None:
        return requirements
    combined = work / "layer-requirements.txt"
    own = [f"-r {requirements.resolve()}"] if requirements is not None else []
    combined.write_text("\n".join([*own, "# the data step", *tools]) + "\n", encoding="utf-8")
    return combined


def _bundle(extra: tuple[str, ...], target: Path) -> None:
    """Copy the distributions `extra` names (`name==version`: pure Python, no dependencies) from this environment,
    which installs them with the plugin, into the layer: no package index is asked, the version is the plugin's."""
    from importlib import metadata

    for requirement in extra:
        dist = metadata.distribution(requirement.split("==", 1)[0])
        if list(target.glob(f"{canonicalize_name(dist.metadata['Name']).replace('-', '_')}-*.dist-info")):
            continue  # a requirement of the job's depends on it: the version it resolved stays
        for file in dist.files or ():
            if ".." in file.parts or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            source = Path(str(dist.locate_file(file)))
            if source.is_file():
                (target / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target / file)


def installed_sizes(target: Path) -> dict[str, int]:
    """Installed bytes of every distribution in a target directory, from the sizes in its RECORD."""
    sizes = {}
    for info in target.glob("*.dist-info"):
        named = name_and_version(info)
        if named is None or not (info / "RECORD").is_file():
            continue
        total = 0
        for line in (info / "RECORD").read_text(encoding="utf-8", errors="replace").splitlines():
            size = line.rsplit(",", 1)[-1]
            total += int(size) if size.isdigit() else 0
        sizes[named[0]] = total
    return dict(sorted(sizes.items()))


def shebang(python: str) -> bytes:
    """The first line of a console script that the image's interpreter runs."""
    return f"#!{python}".encode() if python.startswith("/") else f"#!/usr/bin/env {python}".encode()


def _fix_scripts(bin_dir: Path, python: str) -> bool:
    """Point console scripts at the base's interpreter, not at the one that installed them."""
    if not bin_dir.is_dir():
        return False
    for script in bin_dir.iterdir():
        if not script.is_file() or script.is_symlink():
            continue
        data = script.read_bytes()
        first, newline, rest = data.partition(b"\n")
        if _ENTRY_SCRIPT.match(first):
            mode = script.stat().st_mode
            script.unlink()  # a fresh file: never write through a link into uv's cache
            script.write_bytes(shebang(python) + newline + rest)
            script.chmod(mode)
    return any(bin_dir.iterdir())


def scan_tree(root: Path) -> list[SourceFile]:
    """Every file and symlink below root, sorted (no exclusions: an installed package is taken whole)."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in [*filenames, *[d for d in dirnames if (base / d).is_symlink()]]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                files.append(SourceFile(rel, path, 0, link=os.readlink(path)))
            elif path.is_file():
                info = path.stat()
                files.append(SourceFile(rel, path, info.st_size, bool(info.st_mode & 0o100)))
    files.sort(key=lambda f: f.path.encode())
    return files

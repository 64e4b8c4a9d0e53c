"""A local run's dependency overlay: the job's requirements.txt installed by uv for this interpreter into a
directory of its own, put on the ranks' path ahead of site-packages, as the image puts its dependency layer
(DEPS_DIR on PYTHONPATH) ahead of its base's packages. So a local run tests what the image will hold, and
vdk's own environment is never changed: installing a job's requirements into it could downgrade what vdk
needs (a pin of boto3 pulling an older python-dateutil under the Kubernetes client).

Resolved as the image's layer is (dependencies/uv_install.py): wheels and pure-Python sdists; torch, which vdk's
environment has (torchrun and the runtime run on it), left out and its version pinned, so that torchvision & co. match
it. Cached by the hash of requirements.txt and what else its files depend on (this interpreter, its
platform, its torch, the package indexes that reach uv: package_index.fingerprint): unchanged requirements cost one
directory lookup. `requirements_overlay = false` in
[ml-training] runs with the environment as it is instead, for people who manage it themselves.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.dependencies import cache_entries
from vdk.plugin.ml_training.dependencies import install_errors
from vdk.plugin.ml_training.dependencies import uv_install
from vdk.plugin.ml_training.dependencies.uv_progress import Activity
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.source.requirements import REQUIREMENTS
from vdk.plugin.ml_training.source.requirements import RequirementsFile
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

OVERLAYS = "overlays"  # below the cache root
META = "overlay.json"
TARGET = "packages"  # the directory on the ranks' path
_FORMAT = "overlay-v1"  # bump when the overlay's layout changes, so old entries are not reused
PROVIDED = ("torch",)  # what vdk's environment gives the ranks (torchrun and the runtime run on it)
MAX_AGE_DAYS = 30


@dataclass(frozen=True)
class Overlay:
    """requirements.txt installed for this interpreter: `path` goes on the ranks' path."""

    path: Path
    packages: tuple[tuple[str, str], ...]  # (name, version), sorted
    from_cache: bool
    seconds: float = 0.0  # installing it took (0 from the cache)

    def env(self, inherited: Mapping[str, str]) -> dict[str, str]:
        """PYTHONPATH (and PATH for its console scripts) with the overlay first, as the image's layout has it."""
        extra = inherited.get("PYTHONPATH")
        env = {"PYTHONPATH": f"{self.path}{os.pathsep}{extra}" if extra else str(self.path)}
        scripts = self.path / "bin"
        if scripts.is_dir():
            env["PATH"] = f"{scripts}{os.pathsep}{inherited.get('PATH', os.defpath)}"
        return env

    def summary(self) -> str:
        how = "from the cache" if self.from_cache else f"installed in {self.seconds:.1f} s"
        return f"requirements.txt: {counted(len(self.packages), 'package')} in the run's overlay ({how}): {self.path}"


def prepare(spec: MLJobSpec, note: Callable[[str], None], activity: Activity | None = None) -> Overlay | None:
    """The job's overlay, from the cache or installed now (`note` says so first: it may take a while; `activity`
    shows uv's steps as they come: resolving, each download, installing); None
    when the job asks for none (no requirements.txt, only what vdk's environment has, or
    `requirements_overlay = false`)."""
    requirements = spec.job_dir / REQUIREMENTS
    if not spec.requirements_overlay or not requirements.is_file():
        return None
    listed = RequirementsFile.read(requirements)
    target = this_interpreter(spec.index_strategy)
    if not listed.lines or listed.only(target.provides):
        return None
    key = cache_key(requirements.read_bytes(), target, uv_install.index_fingerprint(spec.job_dir))
    entry = cache_root() / OVERLAYS / key
    # taken for this run (touched, and not pruned while this process lives); gone meanwhile (a prune): a miss
    cached = _load(entry) if cache_entries.use(entry, META) else None
    if cached is not None:
        return cached
    note(
        f"installing {requirements} into the run's dependency overlay for {sys.executable} (uv, as the image "
        "installs it; once per version of the file and of the package index settings; vdk's environment stays as it "
        "is) ..."
    )
    started = time.monotonic()
    try:
        overlay = _build(spec, requirements, target, entry, activity)
    except OSError as e:
        install_errors.raise_if_full(e, entry.parent)  # a full disk, not a bad requirement
        raise
    prune()
    return Overlay(overlay.path, overlay.packages, False, time.monotonic() - started)


def cache_key(requirements: bytes, target: uv_install.Target, indexes: str = "") -> str:
    """The overlay's cache entry: a hash of what its files depend on (`indexes`: uv_install.index_fingerprint)."""
    inputs = {
        "format": _FORMAT,
        "requirements_sha256": hashlib.sha256(requirements).hexdigest(),
        "python": sys.version,
        "interpreter": os.path.realpath(sys.executable),
        "platform": sysconfig.get_platform(),
        "provides": sorted(target.provides),
        "pins": sorted(target.pins),
        "index_strategy": target.index_strategy,
        "indexes": indexes,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def this_interpreter(index_strategy: str = uv_install.DEFAULT_INDEX_STRATEGY) -> uv_install.Target:
    """This interpreter, which provides torch (at its version: the rest is resolved against it); the package
    indexes searched as `index_strategy` says (a key of [ml-training])."""
    pins = []
    for name in PROVIDED:
        try:
            pins.append((name, importlib.metadata.version(name).split("+", 1)[0]))
        except importlib.metadata.PackageNotFoundError:
            continue  # no torch here: the launcher says so before anything starts
    return uv_install.Target(provides=PROVIDED, pins=tuple(pins), index_strategy=index_strategy)


def _load(entry: Path) -> Overlay | None:
    try:
        meta = json.loads((entry / META).read_text(encoding="utf-8"))
        packages = tuple((str(name), str(version)) for name, version in meta["packages"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path = entry / TARGET
    return Overlay(path, packages, True) if path.is_dir() else None


def _build(
    spec: MLJobSpec, requirements: Path, target: uv_install.Target, entry: Path, activity: Activity | None
) -> Overlay:
    root = entry.parent
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name[:12]}-", dir=root))
    try:
        packages_dir = work / "entry" / TARGET
        again = (
            f"run `vdk run {spec.job_dir}` again (or set `requirements_overlay = false` in [ml-training] to run "
            "with the packages of vdk's environment as they are)"
        )
        uv_install.install(requirements, packages_dir, spec.job_dir, target, again, activity=activity)
        packages = uv_install.installed_packages(packages_dir)
        meta = {"packages": [list(p) for p in packages], "python": sys.version, "interpreter": sys.executable}
        (work / "entry" / META).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
        try:
            os.replace(work / "entry", entry)  # the entry appears complete or not at all
        except OSError:  # an entry is there: never removed under another command that uses it
            concurrent = _load(entry) if cache_entries.use(entry, META) else None  # another run finished first
            if concurrent is not None:
                return concurrent
            try:
                os.replace(entry, work / "broken")  # what an older version left half-made, moved aside in one step
            except FileNotFoundError:
                pass  # pruned meanwhile
            os.replace(work / "entry", entry)
        cache_entries.use(entry, META)  # this run's ranks import from it: not pruned under them
        return Overlay(entry / TARGET, packages, False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prune(max_age_days: float = MAX_AGE_DAYS) -> list[Path]:
    """Remove overlays no run used for `max_age_days`."""
    return cache_entries.prune_unused(cache_root() / OVERLAYS, META, max_age_days)

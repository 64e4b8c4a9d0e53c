"""The two upstream CRDs the schema tests validate against: pinned here (repository, tag, path, sha256),
never copied into this repository, and found in this order:

1. the folder `VDK_ML_TRAINING_CRD_DIR` names;
2. `../shared/crds/` beside the project (a development workspace);
3. `.cache/upstream-crds/` in the project, which `make test` fills by downloading the pinned files
   (`python -m tests.support.upstream_crds`).

A file that differs from its pin is an error wherever it is. When none of the places has the files
(an offline machine), the tests that need them skip with one reason (`UNAVAILABLE`); the rest run.
Standard library only: `make test` runs this before the tests.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CRD_DIR_ENV = "VDK_ML_TRAINING_CRD_DIR"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHARED_DIR = PROJECT_ROOT.parent / "shared" / "crds"
CACHE_DIR = PROJECT_ROOT / ".cache" / "upstream-crds"
DOWNLOAD_BASE = "https://raw.githubusercontent.com"
DOWNLOAD_TIMEOUT = 30  # seconds per file


@dataclass(frozen=True)
class Pin:
    """One upstream file, exactly: where it comes from and its sha256."""

    filename: str
    repository: str
    tag: str
    path: str
    sha256: str

    def url(self, base: str = DOWNLOAD_BASE) -> str:
        return f"{base}/{self.repository}/{self.tag}/{self.path}"


PINS = (
    # Kubeflow Training Operator v1 (PyTorchJob); the repository was renamed to kubeflow/trainer.
    Pin(
        "kubeflow.org_pytorchjobs.yaml",
        "kubeflow/trainer",
        "v1.9.4",
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
        "8b8a8a719cc94173169290251e817f7ac2bb425c20b6c2fa813397bcf4e932ed",
    ),
    # Kubeflow Trainer v2 (TrainJob).
    Pin(
        "trainer.kubeflow.org_trainjobs.yaml",
        "kubeflow/trainer",
        "v2.3.0",
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
        "a742cafc5b5582640c7e0b7467c024fc237256fbca5ba0a9f0531dfb66d64416",
    ),
)
PINNED = {pin.filename: pin for pin in PINS}

UNAVAILABLE = (
    "the upstream Kubeflow CRDs (kubeflow.org_pytorchjobs.yaml, trainer.kubeflow.org_trainjobs.yaml) are not "
    f"in ${CRD_DIR_ENV}, ../shared/crds/ or .cache/upstream-crds/: run `make test` where GitHub is reachable "
    "(it downloads the pinned files), or set VDK_ML_TRAINING_CRD_DIR to a folder that has them"
)


class CRDUnavailable(Exception):
    """No place has the file: the tests that need it skip."""


class CRDChecksumMismatch(Exception):
    """A file is not the pinned upstream file: an error, never a skip."""


def places(cache: Path | None = None) -> list[Path]:
    """Where the files are looked for, first match wins."""
    configured = os.environ.get(CRD_DIR_ENV)
    return [*([Path(configured)] if configured else []), SHARED_DIR, CACHE_DIR if cache is None else cache]


def locate(pin: Pin, search: Iterable[Path] | None = None) -> Path:
    """The first copy of `pin`'s file in `search` (default: `places()`), checked against its sha256."""
    for folder in places() if search is None else search:
        path = folder / pin.filename
        if path.is_file():
            verify(pin, path.read_bytes(), str(path))
            return path
    raise CRDUnavailable(UNAVAILABLE)


def verify(pin: Pin, data: bytes, source: str) -> None:
    actual = hashlib.sha256(data).hexdigest()
    if actual != pin.sha256:
        raise CRDChecksumMismatch(
            f"{source} is not the pinned upstream {pin.filename} ({pin.repository} {pin.tag} {pin.path}): "
            f"sha256 {actual}, expected {pin.sha256}. Replace it with the upstream file, or delete it "
            "(`make test` downloads the pinned one into .cache/upstream-crds/)"
        )


def fetch(
    pins: Iterable[Pin] | None = None,
    cache: Path | None = None,
    base: str = DOWNLOAD_BASE,
    search: Iterable[Path] | None = None,
) -> list[str]:
    """Download into `cache` each pinned file no place has yet. Returns what happened, one line per
    file; a file that cannot be downloaded is such a line (its tests will skip), one that differs from
    its pin is a CRDChecksumMismatch and is not kept."""
    pins = PINS if pins is None else pins
    cache = CACHE_DIR if cache is None else cache
    search = places(cache) if search is None else list(search)
    report = []
    for pin in pins:
        try:
            report.append(f"{pin.filename}: {locate(pin, search)} (the pinned {pin.tag} file)")
            continue
        except CRDUnavailable:
            pass
        try:
            with urllib.request.urlopen(pin.url(base), timeout=DOWNLOAD_TIMEOUT) as answer:
                data = answer.read()
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            report.append(f"{pin.filename}: could not download {pin.url(base)} ({getattr(e, 'reason', e)})")
            continue
        verify(pin, data, pin.url(base))
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache, prefix=f".{pin.filename}.", delete=False) as partial:
            partial.write(data)
        os.chmod(partial.name, 0o644)  # as any checked-out file (temporary files are private)
        os.replace(partial.name, cache / pin.filename)  # never a half-written file under the real name
        report.append(f"{pin.filename}: downloaded {pin.repository} {pin.tag} {pin.path} into {cache}")
    return report


def main(base: str = DOWNLOAD_BASE, cache: Path | None = None) -> int:
    """`make test`'s step before the tests: 0 unless a file differs from its pin."""
    try:
        report = fetch(base=base, cache=cache)
    except CRDChecksumMismatch as e:
        print(f"upstream CRDs: error: {e}", file=sys.stderr)
        return 1
    for line in report:
        print(f"upstream CRDs: {line}")
    if any("could not download" in line for line in report):
        print(f"upstream CRDs: the tests that validate against them will be skipped: {UNAVAILABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

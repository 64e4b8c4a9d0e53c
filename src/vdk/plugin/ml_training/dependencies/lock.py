"""The lock of what a target directory holds: every distribution uv installed there, pinned (`name==version`) with
the sha256 hashes its package index lists for that version (`uv pip compile --generate-hashes` of the pins: every
package is pinned, so nothing is chosen anew), and the licence its metadata declares. The image's SBOM lists them
(image/sbom.py) and its provenance names the lock by digest (image/provenance.py).

A pin the index does not know (a package installed from a path or a URL) leaves the lock without hashes, with the
reason kept: the layer is built all the same.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from vdk.plugin.ml_training import helper_processes
from vdk.plugin.ml_training.dependencies.uv_install import UV_TIMEOUT
from vdk.plugin.ml_training.dependencies.uv_install import Target
from vdk.plugin.ml_training.dependencies.uv_install import name_and_version
from vdk.plugin.ml_training.dependencies.uv_install import uv_command
from vdk.plugin.ml_training.dependencies.uv_install import uv_environment
from vdk.plugin.ml_training.source.requirements import RequirementsFile

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_INDEX_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "--no-index", "-i", "-f")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
# The licence a classifier names (`License :: OSI Approved :: MIT License`), for metadata without License-Expression
_CLASSIFIER = re.compile(r"^License :: (?:OSI Approved :: )?(.+)$")
_MAX_LICENSE_TEXT = 120  # a `License:` field longer than this is the licence's text, not its name


@dataclass(frozen=True)
class Lock:
    """`text`: the lock file (pins and hashes; empty when it could not be made, `error` says why)."""

    text: str
    hashes: dict[str, tuple[str, ...]]  # normalised name -> sha256 hex of the index's files of its version
    error: str | None = None

    @property
    def sha256(self) -> str | None:
        return hashlib.sha256(self.text.encode()).hexdigest() if self.text else None


def lock(packages: tuple[tuple[str, str], ...], cwd: Path, target: Target, requirements: Path | None = None) -> Lock:
    """The lock of `packages` ((name, version) installed for `target` from `requirements`, run in `cwd`): their
    hashes as the index lists them (the index options of `requirements` apply, as they did to the install)."""
    if not packages:
        return Lock("", {})
    with tempfile.TemporaryDirectory(prefix="vdk-lock-") as scratch:
        pins = Path(scratch) / "installed.txt"
        options = index_options(requirements) if requirements is not None else []
        pins.write_text("".join(f"{line}\n" for line in options) + "".join(f"{n}=={v}\n" for n, v in packages))
        # every installed package is pinned, so the resolution is theirs; uv lists no hashes with --no-deps
        argv = [uv_command(), "pip", "compile", str(pins), "--generate-hashes", *target.flags()]
        if target.provides:  # left out of the layer as they were at its install
            provided = Path(scratch) / "provides.txt"
            provided.write_text("".join(f"{name}\n" for name in target.provides))
            argv += ["--excludes", str(provided)]
        argv += ["--no-header", "--no-annotate", "-q"]
        try:
            done = helper_processes.run(argv, cwd=cwd, env=uv_environment(), timeout=UV_TIMEOUT)
        except subprocess.TimeoutExpired:
            return Lock("", {}, f"the package index did not list the hashes within {UV_TIMEOUT // 60} minutes")
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        return Lock("", {}, "the package index did not list every pin: " + " ".join(lines[-3:])[:300])
    installed = {name for name, _ in packages}
    hashes = {name: found for name, found in parse_hashes(done.stdout).items() if name in installed}
    return Lock(done.stdout, hashes)


def index_options(requirements: Path) -> list[str]:
    """The lines of a requirements file (and the files it includes) that say where packages come from
    (`--index-url`, `--find-links`, ...)."""
    options = RequirementsFile.read(requirements).options
    return [line for line in options if line.split()[0].split("=", 1)[0] in _INDEX_OPTIONS]


def parse_hashes(text: str) -> dict[str, tuple[str, ...]]:
    """name -> hashes of a lock file's pins (`name==version \\` then `--hash=sha256:...` lines)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        pin = _PIN.match(line.strip())
        if pin:
            current = canonicalize_name(pin.group(1))
            out[current] = []
        if current is not None:
            out[current] += _HASH.findall(line)
    return {name: tuple(sorted(set(hashes))) for name, hashes in out.items()}


def licenses(target_dir: Path) -> dict[str, str]:
    """normalised name -> the licence each distribution in `target_dir` declares: its License-Expression (an SPDX
    expression, PEP 639), else a short `License:` field, else its licence classifiers; none when it declares none."""
    out = {}
    for info in sorted(target_dir.glob("*.dist-info")):
        named = name_and_version(info)
        if named is None:
            continue
        try:
            text = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = declared_license(text)
        if found:
            out[named[0]] = found
    return dict(sorted(out.items()))


def declared_license(metadata: str) -> str | None:
    """The licence a METADATA file's headers declare (see `licenses`)."""
    expression = field = None
    classifiers = []
    for line in metadata.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line; the description follows
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "License-Expression" and value:
            expression = value
        elif key == "License" and value and value.upper() != "UNKNOWN":
            field = value
        elif key == "Classifier" and (match := _CLASSIFIER.match(value)):
            classifiers.append(match.group(1).strip())
    if expression:
        return expression
    if field and len(field) <= _MAX_LICENSE_TEXT and "\n" not in field:
        return field
    return "; ".join(classifiers) or None

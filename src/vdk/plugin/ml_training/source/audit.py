"""Who deployed what, from which commit: the provenance recorded with every image and run."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone
from pathlib import Path

from vdk.plugin.ml_training import secret_patterns


@dataclass(frozen=True)
class Provenance:
    git_commit: str | None  # HEAD of the repository holding the job dir, None outside git
    git_dirty: bool  # the job dir differs from HEAD (changed or untracked files)
    git_diff_sha256: str | None  # hash of those differences, so a dirty run can still be matched
    git_remote: str | None  # origin's URL without credentials, for org.opencontainers.image.source
    deployer: str
    created: str  # ISO 8601, UTC, seconds

    def __post_init__(self) -> None:
        # whoever made it (collect, a record read back): no credential of a remote goes any further
        object.__setattr__(self, "git_remote", public_url(self.git_remote))

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _git(job_dir: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(job_dir), *args], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def _diff_hash(job_dir: Path) -> str | None:
    diff = _git(job_dir, "diff", "--binary", "HEAD", "--", ".")
    untracked = _git(job_dir, "ls-files", "--others", "--exclude-standard", "-z", "--", ".")
    if not diff and not untracked:
        return None
    digest = hashlib.sha256((diff or "").encode())
    for name in sorted(n for n in (untracked or "").split("\0") if n):
        digest.update(b"\0" + name.encode())
        try:
            digest.update(hashlib.sha256((job_dir / name).read_bytes()).digest())
        except OSError:
            pass
    return digest.hexdigest()


def public_url(url: str | None) -> str | None:
    """A remote URL as it may be published: CI clones often carry a token in it (`user:token@`, `token@`,
    `?access_token=`), and the remote goes into image labels, run annotations and the run record."""
    if not url:
        return None
    return secret_patterns.public_url(url) or None


def _deployer(job_dir: Path) -> str:
    email = (_git(job_dir, "config", "user.email") or "").strip()
    if email:
        return email
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


def deployer(where: Path | str = ".") -> str:
    """Who is deploying: git's user.email where `where` is, else the login name."""
    return _deployer(Path(where))


def collect(job_dir: Path | str, now: datetime | None = None) -> Provenance:
    """Provenance of a job directory as it is now."""
    job_dir = Path(job_dir)
    commit = (_git(job_dir, "rev-parse", "HEAD") or "").strip() or None
    diff_hash = _diff_hash(job_dir) if commit else None
    remote = public_url((_git(job_dir, "config", "--get", "remote.origin.url") or "").strip())
    created = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    return Provenance(
        git_commit=commit,
        git_dirty=diff_hash is not None,
        git_diff_sha256=diff_hash,
        git_remote=remote,
        deployer=_deployer(job_dir),
        created=created.isoformat().replace("+00:00", "Z"),
    )


# The provenance a deploy through the VDK Control Service uploads with the job's files (ops/cs_deploy.py): the
# service keeps the files in its own git repository, whose commit is not the job's, so the job's own commit and
# dirty flag travel in this file of the job directory, which the builder and the launcher read back. No time: the
# same code deployed again uploads the same bytes (the service then keeps its commit).
UPLOADED_PROVENANCE = ".vdk-ml-training-provenance.json"
_UPLOADED_FIELDS = ("git_commit", "git_dirty", "git_diff_sha256", "git_remote", "deployer")


def uploaded_provenance(provenance: Provenance) -> bytes:
    """The file UPLOADED_PROVENANCE of `provenance` (JSON, its fields but the time)."""
    values = {name: getattr(provenance, name) for name in _UPLOADED_FIELDS}
    return (json.dumps(values, indent=1, sort_keys=True) + "\n").encode()


def read_uploaded(job_dir: Path | str, now: datetime | None = None) -> Provenance | None:
    """The provenance a deploy through the Control Service uploaded with the job (its time: `now`), None when the
    job directory has none or it cannot be read as such."""
    try:
        values = json.loads((Path(job_dir) / UPLOADED_PROVENANCE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(values, dict) or not isinstance(values.get("deployer"), str):
        return None
    created = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    return Provenance(
        git_commit=values.get("git_commit") or None,
        git_dirty=bool(values.get("git_dirty")),
        git_diff_sha256=values.get("git_diff_sha256") or None,
        git_remote=values.get("git_remote") or None,
        deployer=values["deployer"],
        created=created.isoformat().replace("+00:00", "Z"),
    )

"""Which files of a job directory never go into an image (nor a local run's working directory), and which
the user's ignore files drop.

Secrets and machine-local clutter are excluded whatever the ignore files say; everything else
follows `.gitignore` (every level from the repository root down) and then `.vdkignore` in the
job directory, whose `!pattern` lines can bring back what `.gitignore` drops. A file left out for
what its content holds (a key, a token: source/content_scan.py) is brought back only by a `!PATH`
line of `.vdkignore` that names it (no wildcard): the way out for a code file that must ship as it
is (a test key, a public example), said where the file is left out (`way_back`).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

import pathspec

from vdk.plugin.ml_training.source import content_scan

VDKIGNORE = ".vdkignore"
GITIGNORE = ".gitignore"

_VCS = "version-control data"
_CACHE = "cache, rebuilt at run time"
_SECRET_ENV = "environment file (may hold secrets)"
_KEY = "private key"
_CREDENTIALS = "credential file"
_TOKEN = "token file (a credential)"
_SECRETS = "secrets file"

# What an exclusion comes from (job_files.Excluded.kind): each has its own way back (`way_back`).
BY_RULE = "rule"  # a pattern of .gitignore or .vdkignore
BY_NAME = "name"  # the built-in names below: never in an image
BY_CONTENT = "content"  # what the file holds: back only by a `!PATH` line of .vdkignore naming it

# Directory names excluded wherever they appear.
ALWAYS_EXCLUDED_DIRS = {
    ".git": _VCS,
    ".hg": _VCS,
    ".svn": _VCS,
    "__pycache__": "Python bytecode cache",
    ".ipynb_checkpoints": _CACHE,
    ".pytest_cache": _CACHE,
    ".mypy_cache": _CACHE,
    ".ruff_cache": _CACHE,
    ".venv": "virtual environment",
    "venv": "virtual environment",
}
# File name patterns excluded wherever they appear (fnmatch, matched against the base name).
ALWAYS_EXCLUDED_FILES = (
    (".env", _SECRET_ENV),
    (".env*", _SECRET_ENV),
    ("*.keytab", "Kerberos keytab (a credential)"),
    ("id_rsa", _KEY),
    ("id_dsa", _KEY),
    ("id_ecdsa", _KEY),
    ("id_ed25519", _KEY),
    ("*.key", _KEY),
    ("*.ppk", _KEY),
    ("*.p12", _KEY),
    ("*.pfx", _KEY),
    ("*.jks", _KEY),
    (".netrc", _CREDENTIALS),
    ("_netrc", _CREDENTIALS),
    (".pgpass", _CREDENTIALS),
    (".pypirc", _CREDENTIALS),
    (".npmrc", _CREDENTIALS),
    (".git-credentials", _CREDENTIALS),
    (".dockercfg", _CREDENTIALS),
    ("*.kubeconfig", _CREDENTIALS),
    ("kubeconfig", _CREDENTIALS),
    ("credentials.json", _CREDENTIALS),
    ("token", _TOKEN),
    (".token", _TOKEN),
    ("token.txt", _TOKEN),
    ("*.token", _TOKEN),
    ("secrets.yaml", _SECRETS),
    ("secrets.yml", _SECRETS),
    ("secrets.json", _SECRETS),
    ("secrets.toml", _SECRETS),
    ("secrets.env", _SECRETS),
    (".secrets", _SECRETS),
    ("*.pyc", "Python bytecode cache"),
    ("*.pyo", "Python bytecode cache"),
    (".DS_Store", "desktop metadata"),
)
# Paths (relative, any depth) excluded as credential stores of well-known tools.
ALWAYS_EXCLUDED_SUFFIXES = (
    (".docker/config.json", _CREDENTIALS),
    (".aws/credentials", _CREDENTIALS),
    (".kube/config", _CREDENTIALS),
    (".config/gcloud/credentials.db", _CREDENTIALS),
)


def always_excluded_dir(name: str, path: Path) -> str | None:
    """Why a directory is never copied, or None."""
    if name in ALWAYS_EXCLUDED_DIRS:
        return ALWAYS_EXCLUDED_DIRS[name]
    try:
        if (path / "pyvenv.cfg").is_file():
            return "virtual environment"
    except OSError:  # an unreadable directory: the walk into it says so
        pass
    return None


def always_excluded_file(relpath: str, name: str) -> str | None:
    """Why a file is never copied (by its name), or None."""
    for pattern, reason in ALWAYS_EXCLUDED_FILES:
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    for suffix, reason in ALWAYS_EXCLUDED_SUFFIXES:
        if relpath == suffix or relpath.endswith("/" + suffix):
            return reason
    return None


def secret_content(path: Path, size: int) -> str | None:
    """Why a file's content marks it as a secret (a PEM private key anywhere in it, a cloud key file), or None:
    source/content_scan.py."""
    return content_scan.secret_content(path, size)


@dataclass(frozen=True)
class _Rules:
    spec: pathspec.GitIgnoreSpec
    source: str  # for messages: ".gitignore", "data/.gitignore", "../.gitignore", ".vdkignore"
    inside: str = ""  # rules of a directory inside the job: apply below it, paths taken relative to it
    above: str = ""  # rules of an enclosing directory: the job dir's path relative to that directory

    def local_path(self, target: str) -> str | None:
        if self.above:
            return self.above + target
        if self.inside:
            return target[len(self.inside) :] if target.startswith(self.inside) else None
        return target

    def pattern(self, index: int | None) -> str:
        patterns = list(self.spec.patterns)
        if index is None or not 0 <= index < len(patterns):
            return "?"
        text = getattr(patterns[index], "pattern", None)
        return text if isinstance(text, str) else "?"


def _read_rules(path: Path, source: str, inside: str = "", above: str = "") -> _Rules | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    spec = pathspec.GitIgnoreSpec.from_lines(text.splitlines())
    if not any(p.include is not None for p in spec.patterns):
        return None
    return _Rules(spec, source, inside, above)


def _repository_root(job_dir: Path) -> Path | None:
    for parent in [job_dir, *job_dir.parents]:
        if (parent / ".git").exists():
            return parent
    return None


class IgnoreRules:
    """The layered .gitignore / .vdkignore rules of one job directory.

    Like git, the last matching pattern wins, deeper .gitignore files come after shallower
    ones, and nothing inside an ignored directory can be brought back. `.vdkignore` comes last.
    Only committed-style ignore files count (not .git/info/exclude or a global excludes file),
    so every checkout of the same tree gives the same image.
    """

    def __init__(self, job_dir: Path):
        self.job_dir = job_dir
        self.outer: list[_Rules] = []  # .gitignore files of enclosing directories, outermost first
        repo = _repository_root(job_dir)
        if repo is not None and repo != job_dir:
            for ancestor in [repo, *[p for p in reversed(job_dir.parents) if repo in p.parents]]:
                above = job_dir.relative_to(ancestor).as_posix() + "/"
                source = os.path.relpath(ancestor / GITIGNORE, job_dir)
                rules = _read_rules(ancestor / GITIGNORE, source, above=above)
                if rules:
                    self.outer.append(rules)
        self.vdkignore = _read_rules(job_dir / VDKIGNORE, VDKIGNORE)

    @staticmethod
    def nested(reldir: str, path: Path) -> _Rules | None:
        """The .gitignore of a directory of the job (reldir "" for the job dir itself)."""
        if not reldir:
            return _read_rules(path / GITIGNORE, GITIGNORE)
        return _read_rules(path / GITIGNORE, f"{reldir}/{GITIGNORE}", inside=reldir + "/")

    def named_back(self, relpath: str) -> str | None:
        """The `!PATH` line of .vdkignore that brings this file back by its own name (no wildcard), when it is the
        last line of .vdkignore that matches it; None otherwise."""
        if self.vdkignore is None:
            return None
        result = self.vdkignore.spec.check_file(relpath)
        if result.include is not False:
            return None
        pattern = self.vdkignore.pattern(result.index)
        return pattern if not any(c in pattern for c in "*?[") else None

    def check(self, relpath: str, is_dir: bool, nested: list[_Rules]) -> str | None:
        """Why the path is ignored (e.g. "`.gitignore`: data/"), or None when it is included."""
        target = relpath + "/" if is_dir else relpath
        verdict: str | None = None
        for rules in [*self.outer, *nested, *([self.vdkignore] if self.vdkignore else [])]:
            local = rules.local_path(target)
            if local is None:
                continue
            result = rules.spec.check_file(local)
            if result.include is True:
                verdict = f"{rules.source}: {rules.pattern(result.index)}"
            elif result.include is False:
                verdict = None
        return verdict


def way_back(path: str, reason: str, kind: str, job_dir: Path) -> str:
    """What makes a file that an image leaves out ship after all, as works for why it was left out (`kind`)."""
    vdkignore = job_dir / VDKIGNORE
    if kind == BY_NAME:
        return (
            f"{path} is never put in an image ({reason}): rename it, or, for a credential, keep it in a Kubernetes "
            "Secret and map it in [ml-training.secrets] (the script reads it from the environment)"
        )
    if kind == BY_CONTENT:
        return (
            f"take the credential out of {path} (keep it in a Kubernetes Secret, mapped in [ml-training.secrets], "
            f"and read it from the environment); or, if it must ship as it is (a test key, a public example), add a "
            f"line `!{path}` to {vdkignore}: the file then goes into the image, readable by whoever can pull it"
        )
    return f"add `!{path}` to {vdkignore}"

"""[ml-training.data]: datasets by reference, at the path the code reads them from.

    [ml-training.data]
    data/train = s3://vision-datasets/cifar10/train   # ./data/train in the run's working directory
    data/tok   = hf://datasets/org/name@main          # a branch, tag or commit of a dataset (hf://models/...: a model)
    /data      = pvc:imagenet                          # a claim, mounted read-only (as [ml-training.mounts] does)

A target is a path relative to the run's working directory (where outputs are written too: the run's directory
of `output_pvc`, else the image's job directory) or an absolute path of the training containers. `s3://` and
`hf://` sources are fetched by the cluster at the version `vdk deploy` pins (datafetch/), claims are mounted.
Every mistake is refused here with the line that makes it: a scheme no source has, a bucket, repository or claim
name that cannot be one, a target that leaves the working directory, hides the entrypoint or overlaps another
dataset (of this section or of [ml-training.mounts]). `smoke_data` (a key of [ml-training]) names local files
for these targets. Knows no cluster and no store.
"""

from __future__ import annotations

import configparser
import posixpath
import re
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.config_file import DATA_SECTION
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.config_file import line_of
from vdk.plugin.ml_training.job.model import PVC_SCHEME
from vdk.plugin.ml_training.job.model import DataMount
from vdk.plugin.ml_training.job.model import DataSource
from vdk.plugin.ml_training.job.model import Entrypoint
from vdk.plugin.ml_training.job.mounts import MAX_MOUNTS
from vdk.plugin.ml_training.job.mounts import absolute_target
from vdk.plugin.ml_training.job.mounts import claim_reference

SCHEMES = ("s3://", "hf://", PVC_SCHEME)
_TARGET = re.compile(r"^[A-Za-z0-9._/-]+$")
# S3 bucket names (AWS's rules; S3-compatible stores take the same): 3-63 of a-z 0-9 . -, alphanumeric ends.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Hub repository ids: [ORG/]NAME, each of letters, digits, '-', '_', '.', not starting with '-' or '.'.
_REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REPO = re.compile(rf"^(?:{_REPO_PART}/)?{_REPO_PART}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_PREFIX = re.compile(r"^[^\s\\]*$")


def parse_data(
    parser: configparser.ConfigParser, path: Path, mounts: tuple[DataMount, ...], entrypoint: Entrypoint
) -> tuple[DataSource, ...]:
    """[ml-training.data], each target once and apart from the others and from the mounts."""
    if not parser.has_section(DATA_SECTION):
        return ()
    sources: list[DataSource] = []
    for key, value in parser.items(DATA_SECTION):
        line = line_of(path, DATA_SECTION, key)
        target = _target(key, path, line, entrypoint)
        source = _source(target, value.strip(), path, key, line)
        _no_overlap(target, key, line, path, [(s.target, f"[{DATA_SECTION}] {s.target}") for s in sources])
        _no_overlap(target, key, line, path, [(m.path, f"[ml-training.mounts] {m.path}") for m in mounts])
        sources.append(DataSource(target, source, line))
    if len(sources) + len(mounts) > MAX_MOUNTS:
        raise JobConfigError(
            path,
            f"{len(sources) + len(mounts)} datasets; at most {MAX_MOUNTS}",
            "name a parent directory (or prefix) instead of its parts",
            DATA_SECTION,
        )
    return tuple(sources)


def _error(path: Path, problem: str, fix: str, key: str, line: int | None) -> JobConfigError:
    return JobConfigError(path, problem, fix, DATA_SECTION, key, line)


def _target(key: str, path: Path, line: int | None, entrypoint: Entrypoint) -> str:
    text = key.strip()
    if not _TARGET.match(text):
        raise _error(
            path,
            f"{text!r} is not a plain path (letters, digits, '.', '_', '-' and '/')",
            "write the path the code reads, e.g. `data/train = s3://bucket/prefix`",
            key,
            line,
        )
    if text.startswith("/"):
        return absolute_target(text, path, DATA_SECTION, key, line)
    normal = posixpath.normpath(text)
    if normal == "." or normal.startswith("../") or normal == "..":
        raise _error(
            path,
            f"{text} leaves the run's working directory (relative targets are inside it)",
            "name a directory below the working directory, e.g. `data/train`, or an absolute path such as `/data`",
            key,
            line,
        )
    if normal != text.rstrip("/").removeprefix("./") or "//" in text:
        raise _error(path, f"{text!r} is not a plain path", f"write it as `{normal}`", key, line)
    entry = entrypoint.target.replace(".", "/") if entrypoint.is_module else entrypoint.target
    entry = posixpath.normpath(entry)
    if entry == normal or entry.startswith(normal + "/"):
        raise _error(
            path,
            f"{normal} would hide the entrypoint {entrypoint} (the dataset takes its place in the working directory)",
            f"put the dataset beside the code, e.g. `data/{posixpath.basename(normal)}`",
            key,
            line,
        )
    return normal


def _source(target: str, value: str, path: Path, key: str, line: int | None) -> str:
    lowered = value.lower()
    if not value.startswith(SCHEMES):
        if lowered.startswith(SCHEMES) and not value.startswith(PVC_SCHEME.upper()):
            fix = f"write the scheme in lower case: `{target} = {lowered[:5]}{value[5:]}`"
        elif "://" in value or value.startswith("pvc"):
            fix = "a source is `s3://BUCKET/PREFIX`, `hf://datasets/ORG/NAME@REVISION`, `hf://models/ORG/NAME`"
            fix += " or `pvc:CLAIM`"
        else:
            fix = f"write `{target} = s3://BUCKET/PREFIX`, `hf://datasets/ORG/NAME` or `pvc:CLAIM`"
        scheme = value.split("://", 1)[0] + "://" if "://" in value else value
        raise _error(path, f"{scheme!r} is not a source the cluster can fetch (s3://, hf://, pvc:)", fix, key, line)
    if value.startswith("s3://"):
        return _s3(target, value, path, key, line)
    if value.startswith("hf://"):
        return _hf(target, value, path, key, line)
    claim_reference(target, value, path, DATA_SECTION, key, line)
    return value.rstrip("/")


def _s3(target: str, value: str, path: Path, key: str, line: int | None) -> str:
    bucket, _, prefix = value[len("s3://") :].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise _error(
            path,
            f"{bucket!r} is not an S3 bucket name (3 to 63 lower-case letters, digits, '.' and '-')",
            f"write `{target} = s3://BUCKET/PREFIX` with the bucket as the store names it",
            key,
            line,
        )
    prefix = prefix.strip("/")
    if not _PREFIX.match(prefix) or any(part in ("..", ".") for part in prefix.split("/")):
        raise _error(
            path,
            f"{prefix!r} is not a plain prefix (no spaces, backslashes, `.` or `..` parts)",
            f"write `{target} = s3://{bucket}/dir/subdir`",
            key,
            line,
        )
    return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"


def _hf(target: str, value: str, path: Path, key: str, line: int | None) -> str:
    rest, at, revision = value[len("hf://") :].partition("@")
    kind, _, repo = rest.partition("/")
    if kind in ("spaces", "buckets"):
        raise _error(path, f"{value!r}: only datasets and models are fetched", "name a dataset or a model", key, line)
    if kind not in ("datasets", "models"):
        repo = rest  # hf://ORG/NAME: a model, as the Hub names them
    repo = repo.strip("/")
    if not _REPO.match(repo):
        raise _error(
            path,
            f"{repo!r} is not a Hub repository id (ORG/NAME)",
            f"write `{target} = hf://datasets/ORG/NAME@main` for a dataset, `hf://models/ORG/NAME` for a model",
            key,
            line,
        )
    if at and not _REVISION.match(revision):
        raise _error(
            path,
            f"{revision!r} is not a revision (a branch, tag or commit)",
            f"write `{target} = {value.split('@')[0]}@main` (or a tag, or a commit sha)",
            key,
            line,
        )
    return value


def _no_overlap(target: str, key: str, line: int | None, path: Path, others: list[tuple[str, str]]) -> None:
    for other, where in others:
        if other.startswith("/") != target.startswith("/"):
            continue  # relative ones are below the working directory, which is no absolute target's
        outer, inner = sorted((other, target), key=len)
        if inner == outer or inner.startswith(outer.rstrip("/") + "/"):
            what = "is also" if inner == outer else f"{inner} is inside {outer},"
            raise _error(
                path,
                f"{target} overlaps {where}: {what} another dataset's place",
                "give each dataset a place of its own, side by side (e.g. `data/train` and `data/test`)",
                key,
                line,
            )


def parse_smoke_data(text: str | None, path: Path, data: tuple[DataSource, ...]) -> tuple[tuple[str, str], ...]:
    """`smoke_data = data/train=samples/train, data/tok=/srv/tok-sample`: (target, local path) pairs, each
    target one of [ml-training.data]'s."""
    if not text:
        return ()
    targets = {d.target for d in data}
    out: list[tuple[str, str]] = []
    for item in [part.strip() for part in text.split(",") if part.strip()]:
        target, equals, local = (p.strip() for p in item.partition("="))
        normal = posixpath.normpath(target) if target else target
        if not equals or not target or not local:
            raise JobConfigError(
                path,
                f"{item!r} is not TARGET=PATH",
                "write `smoke_data = data/train=samples/train` (a target of [ml-training.data] = local files)",
                SECTION,
                "smoke_data",
            )
        if normal not in targets:
            known = ", ".join(sorted(targets)) or "none"
            raise JobConfigError(
                path,
                f"{target} is not a target of [{DATA_SECTION}] (its targets: {known})",
                "name the dataset's target as [ml-training.data] writes it",
                SECTION,
                "smoke_data",
            )
        out.append((normal, local))
    return tuple(out)

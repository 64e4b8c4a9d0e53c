"""`s3://bucket/prefix` on any S3-compatible endpoint: resolved to its object list (key, size, ETag, and
VersionId where the bucket is versioned), fetched at exactly the pinned versions, sampled.

The endpoint and credentials come from the environment as boto3 reads them (`AWS_ENDPOINT_URL` or
`AWS_ENDPOINT_URL_S3`, `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`, `AWS_REGION`, and
boto3's own chain in a pod: web identity, instance profiles). A prefix is a directory: `s3://b/train` is every
key below `train/`, each fetched to its path below the target.

A versioned prefix is pinned as of the newest change its listing saw (`as_of`): the fetch step lists the
versions again, takes for each key the newest one of that time or before (so what was written later is not
fetched), checks that this list has the pinned fingerprint, and fetches those versions. An unversioned prefix
is fetched only while its list is still the pinned one (each object read `IfMatch` its ETag): otherwise the
pinned content is gone, and the fetch step says so.

boto3 is imported inside the functions: this module runs in the image's and the data tools' environments.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import posixpath
import threading
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import Literal

from vdk.plugin.ml_training.datafetch.data_pins import MAX_LISTED
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.data_pins import fingerprint
from vdk.plugin.ml_training.datafetch.source_errors import CHANGED
from vdk.plugin.ml_training.datafetch.source_errors import DENIED
from vdk.plugin.ml_training.datafetch.source_errors import NOT_FOUND
from vdk.plugin.ml_training.datafetch.source_errors import UNREACHABLE
from vdk.plugin.ml_training.datafetch.source_errors import SourceError
from vdk.plugin.ml_training.datafetch.source_errors import missing_tool
from vdk.plugin.ml_training.datafetch.source_errors import too_big_to_sample

Progress = Callable[[int, int], None]  # (files done, bytes done) so far
PARALLEL = 8
CHUNK = 1 << 20
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "ExpiredToken", "InvalidToken"}
_NO_BUCKET = {"NoSuchBucket", "404"}
# The variables boto3 reads its credentials from, as [ml-training.secrets] maps them (its example).
CREDENTIALS = ("AWS_ACCESS_KEY_ID = s3-credentials/access-key", "AWS_SECRET_ACCESS_KEY = s3-credentials/secret-key")
# Right in a pod (the data step reads the Secrets); a local run's is ops/data_resolution.py's.
CREDENTIAL_FIX = (
    f"map the credentials in [ml-training.secrets] (`{CREDENTIALS[0]}`, `{CREDENTIALS[1]}`) to a Secret that may "
    "read the bucket, and the endpoint of an S3-compatible store in [ml-training.env] (`AWS_ENDPOINT_URL = "
    "https://...`)"
)


@dataclass(frozen=True)
class S3Object:
    key: str  # relative to the prefix, as the store names it
    size: int
    etag: str
    version_id: str | None = None
    modified: datetime | None = None

    def line(self) -> str:
        return f"{self.key}\t{self.size}\t{self.etag}\t{self.version_id or ''}"

    @property
    def path(self) -> str:
        """Where it lands below the target: its key as a path, normalised (`d/./c.txt` and `d//c.txt` are
        `d/c.txt`); '' for a key that leads out of the directory (`../x`)."""
        return local_path(self.key)


def local_path(key: str) -> str:
    """`key` as the relative path a file system gives it; '' when it leaves the directory or names none."""
    path = posixpath.normpath(key.lstrip("/")) if key.strip("/") else ""
    return "" if path in ("", ".", "..") or path.startswith("../") else path


def check_paths(objects: list[S3Object], target: str, source: str) -> None:
    """Every object lands on a file of its own below the target: S3 keys are names, not paths, so `d/c.txt` and
    `d/./c.txt` are two objects that one file system path holds (one would be written over the other: a run would
    train on whichever came last), and `d/c` a file where `d/c/x` needs a directory; a key with `..` that leaves
    the directory lands nowhere. Each is refused, naming the keys."""
    bucket, prefix = location(source)
    seen: dict[str, str] = {}
    for obj in objects:
        path = obj.path
        if not path:
            raise SourceError(
                f"{source} has an object key that leads out of its directory: {obj.key!r}",
                "rename the object in the bucket (keys with `..` cannot be files below the target): "
                f"`aws s3 mv 's3://{bucket}/{prefix}{obj.key}' 's3://{bucket}/{prefix}NEW-NAME'`",
                target=target,
            )
        if path in seen:
            raise SourceError(
                f"the keys {seen[path]!r} and {obj.key!r} of {source} are two objects that land on one file, "
                f"{target}/{path} (S3 keys are names, not paths: `./`, `//` and `..` in them are kept as written): "
                "one would be written over the other, and the run would train on whichever came last",
                f"keep one of them: delete or rename the other in the bucket (`aws s3 rm 's3://{bucket}/{prefix}"
                f"{obj.key}'`), then run again",
                target=target,
            )
        seen[path] = obj.key
    for path, key in seen.items():
        parent = posixpath.dirname(path)
        while parent:
            if parent in seen:
                raise SourceError(
                    f"the key {seen[parent]!r} of {source} is a file where the key {key!r} needs a directory "
                    f"({target}/{parent})",
                    f"rename one of them in the bucket (`aws s3 mv 's3://{bucket}/{prefix}{seen[parent]}' "
                    f"'s3://{bucket}/{prefix}{seen[parent]}.data'`), then run again",
                    target=target,
                )
            parent = posixpath.dirname(parent)


def location(source: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket/prefix`, the prefix a directory (`train/`) or empty (the bucket)."""
    rest = source[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def client() -> Any:
    """An S3 client of the environment's endpoint and credentials (path-style addressing on a custom endpoint,
    as MinIO, Ceph and moto need)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise missing_tool("boto3", "boto3") from None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    config = Config(
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": "path"} if endpoint else {},
        connect_timeout=10,
        read_timeout=60,
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=region, config=config)


def resolve(target: str, source: str) -> DataPin:
    """The pin of the prefix as it is now; SourceError for a bucket that is missing or refused, or no objects."""
    bucket, prefix = location(source)
    s3 = client()
    with _errors(target, source):
        versioned = _versioned(s3, bucket)
        if versioned:
            entries = list(_versions(s3, bucket, prefix))
            as_of = max((e[1] for e in entries), default=None)
            objects = current_at(entries, as_of) if as_of else []
        else:
            as_of = None
            objects = list(_objects(s3, bucket, prefix))
    if not objects:
        raise empty_prefix(s3, target, source)
    check_paths(objects, target, source)
    return DataPin(
        target=target,
        source=source,
        version=f"as of {as_of.isoformat()}" if as_of else None,
        fingerprint=fingerprint(o.line() for o in objects),
        versioned=versioned,
        as_of=as_of.isoformat() if as_of else None,
        files=len(objects),
        bytes=sum(o.size for o in objects),
        objects={o.key: o.etag.strip('"') + (f" {o.version_id}" if o.version_id else "") for o in objects}
        if len(objects) <= MAX_LISTED
        else None,
    )


def pinned_objects(pin: DataPin) -> list[S3Object]:
    """The objects of exactly the pinned version; SourceError (CHANGED) when they cannot be had any more."""
    bucket, prefix = location(pin.source)
    s3 = client()
    with _errors(pin.target, pin.source):
        if pin.versioned:
            as_of = datetime.fromisoformat(pin.as_of or "")
            objects = current_at(list(_versions(s3, bucket, prefix)), as_of)
        else:
            objects = list(_objects(s3, bucket, prefix))
    check_paths(objects, pin.target, pin.source)
    found = fingerprint(o.line() for o in objects)
    if found != pin.fingerprint:
        if pin.versioned:
            problem = (
                f"the object versions of {pin.source} as of {pin.as_of} are not those pinned at deploy (list "
                f"{found[:12]}, pinned {str(pin.fingerprint)[:12]}): versions were deleted, or written in the "
                "same instant"
            )
        else:
            problem = (
                f"{pin.source} changed since it was pinned at deploy (its object list is {found[:12]}, pinned "
                f"{str(pin.fingerprint)[:12]}), and the bucket is not versioned, so the pinned objects are gone"
            )
        raise SourceError(
            problem,
            "deploy again to train on the data as it is now (`vdk deploy`), or enable versioning on the bucket so "
            "that runs can fetch what they pinned",
            CHANGED,
            pin.target,
        )
    return objects


def fetch(pin: DataPin, dest: Path, progress: Progress | None = None) -> None:
    """Every pinned object into `dest` (its key's path below it); objects already there whole are kept (an
    interrupted fetch resumes)."""
    objects = pinned_objects(pin)
    bucket, prefix = location(pin.source)
    download(client(), bucket, prefix, objects, dest, pin.target, pin.source, pin.versioned, progress)


def download(
    s3: Any,
    bucket: str,
    prefix: str,
    objects: list[S3Object],
    dest: Path,
    target: str,
    source: str,
    with_versions: bool,
    progress: Progress | None = None,
    known: dict[str, str] | None = None,
) -> None:
    """`objects` into `dest`, in parallel: each read at its version (or IfMatch its ETag), its size and, for
    single-part uploads, its MD5 checked, written whole or not at all. A file already there of the object's size is
    kept (an interrupted fetch resumes); with `known` (key -> the ETag it was fetched at), only if that ETag is the
    object's."""
    done = [0, 0]
    lock = threading.Lock()

    check_paths(objects, target, source)

    def one(obj: S3Object) -> None:
        path = _below(dest, obj.path, target, source)
        there = path.is_file() and path.stat().st_size == obj.size
        if not there or (known is not None and known.get(obj.key) != obj.etag):
            _download_one(s3, bucket, prefix, obj, path, with_versions, target, source)
        with lock:
            done[0] += 1
            done[1] += obj.size
            if progress is not None:
                progress(done[0], done[1])

    with _errors(target, source), ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        list(pool.map(one, objects))


def _download_one(
    s3: Any, bucket: str, prefix: str, obj: S3Object, path: Path, with_versions: bool, target: str, source: str
) -> None:
    args: dict[str, Any] = {"Bucket": bucket, "Key": prefix + obj.key}
    if with_versions and obj.version_id:
        args["VersionId"] = obj.version_id
    else:
        args["IfMatch"] = obj.etag
    answer = s3.get_object(**args)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    md5 = hashlib.md5(usedforsecurity=False)
    size = 0
    with open(part, "wb") as out:
        for chunk in answer["Body"].iter_chunks(CHUNK):
            out.write(chunk)
            md5.update(chunk)
            size += len(chunk)
    etag = obj.etag.strip('"')
    if size != obj.size or ("-" not in etag and len(etag) == 32 and md5.hexdigest() != etag):
        part.unlink(missing_ok=True)
        raise SourceError(
            f"s3://{bucket}/{prefix}{obj.key} arrived with {size} bytes (MD5 {md5.hexdigest()}), not the pinned "
            f"{obj.size} bytes (ETag {etag})",
            "the store returned other content than it listed: fetch again (restart the run), and check the endpoint",
            CHANGED,
            target,
        )
    os.replace(part, path)


def sample(target: str, source: str, dest: Path, max_files: int, max_bytes: int) -> dict:
    """The first objects of the prefix (in key order) up to `max_files` and `max_bytes` into `dest`, which holds
    nothing else afterwards; what it took and whether that is all of it."""
    bucket, prefix = location(source)
    s3 = client()
    chosen: list[S3Object] = []
    total = 0
    complete = True
    smallest: S3Object | None = None  # of those too big for the sample
    with _errors(target, source):
        _versioned(s3, bucket)  # a missing bucket or refused credentials: the same error as at deploy
        for obj in _objects(s3, bucket, prefix):
            if len(chosen) >= max_files or total + obj.size > max_bytes:
                complete = False
                if len(chosen) >= max_files:
                    break
                if smallest is None or obj.size < smallest.size:
                    smallest = obj
                continue  # too big for what is left of the cap: a later, smaller one may fit
            chosen.append(obj)
            total += obj.size
        if smallest is None and not chosen:
            raise empty_prefix(s3, target, source)  # as the deploy says it: there is nothing to sample
    if not chosen:
        assert smallest is not None  # objects there, none small enough
        raise too_big_to_sample(target, source, "object", smallest.key, smallest.size, max_bytes)
    check_paths(chosen, target, source)
    _keep_only(dest, {o.path for o in chosen})
    index = dest.with_name(dest.name + ".json")  # the ETags of the sample's files, beside them
    try:
        known = json.loads(index.read_text())
    except (OSError, ValueError):
        known = {}
    download(s3, bucket, prefix, chosen, dest, target, source, False, None, known)
    index.write_text(json.dumps({o.key: o.etag for o in chosen}))
    return {"files": len(chosen), "bytes": total, "complete": complete}


def empty_prefix(s3: Any, target: str, source: str) -> SourceError:
    """A prefix with no objects, as the deploy and a smoke run's sample both say it: with the prefixes beside it
    that come closest to the one written (`s3://b/trian` when `train/` is there), when the bucket may be listed."""
    bucket, prefix = location(source)
    parent = posixpath.dirname(prefix.rstrip("/"))
    parent = f"{parent}/" if parent else ""
    near: list[str] = []
    if prefix:
        try:
            pages = s3.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=parent, Delimiter="/", PaginationConfig={"MaxItems": 1000}
            )
            beside = [p["Prefix"].rstrip("/") for page in pages for p in page.get("CommonPrefixes") or []]
            near = difflib.get_close_matches(prefix.rstrip("/"), beside, n=1, cutoff=0.6)
        except Exception:  # noqa: BLE001 - a listing refused or failing only loses the suggestion
            near = []
    listing = f"`aws s3 ls s3://{bucket}/{parent}` lists what is there"
    fix = f"did you mean s3://{bucket}/{near[0]}? ({listing})" if near else f"check the prefix ({listing})"
    return SourceError(
        f"{source} holds no objects (nothing below `{prefix or '/'}` in bucket {bucket})", fix, NOT_FOUND, target
    )


def current_at(entries: list[tuple], as_of: datetime) -> list[S3Object]:
    """For each key, its newest version written at `as_of` or before; none where that is a delete marker.
    `entries`: (key, modified, is_marker, S3Object or None) of every version and delete marker."""
    newest: dict[str, tuple] = {}
    for entry in entries:
        key, modified, _, _ = entry
        if modified > as_of:
            continue
        if key not in newest or modified > newest[key][1]:
            newest[key] = entry
    return sorted((e[3] for e in newest.values() if not e[2]), key=lambda o: o.key)


# --- listings -------------------------------------------------------------------------------------------------


def _versioned(s3: Any, bucket: str) -> bool:
    """Whether the bucket keeps versions (enabled, or suspended with versions from before); raises for a bucket
    that is missing or refused."""
    s3.head_bucket(Bucket=bucket)
    status = s3.get_bucket_versioning(Bucket=bucket).get("Status")
    return status in ("Enabled", "Suspended")


def _objects(s3: Any, bucket: str, prefix: str) -> Iterator[S3Object]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents") or []:
            key = item["Key"][len(prefix) :]
            if key and not key.endswith("/"):  # "directory" markers are no data
                yield S3Object(key, int(item["Size"]), item["ETag"], None, item.get("LastModified"))


def _versions(s3: Any, bucket: str, prefix: str) -> Iterator[tuple]:
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Versions") or []:
            key = item["Key"][len(prefix) :]
            if key and not key.endswith("/"):
                obj = S3Object(key, int(item["Size"]), item["ETag"], item["VersionId"], item["LastModified"])
                yield key, item["LastModified"], False, obj
        for item in page.get("DeleteMarkers") or []:
            key = item["Key"][len(prefix) :]
            if key:
                yield key, item["LastModified"], True, None


def _below(dest: Path, key: str, target: str, source: str) -> Path:
    path = (dest / key).resolve()
    if not path.is_relative_to(dest.resolve()):
        raise SourceError(
            f"{source} has an object key that leads out of its directory: {key!r}",
            "rename the object in the bucket (keys with `..` cannot be files below the target)",
            target=target,
        )
    return path


def _keep_only(dest: Path, keys: set[str]) -> None:
    if not dest.is_dir():
        return
    for path in sorted(dest.rglob("*"), reverse=True):
        relative = path.relative_to(dest).as_posix()
        if path.is_file() and relative not in keys:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


class _errors:
    """botocore's errors as SourceErrors that say what to do."""

    def __init__(self, target: str, source: str):
        self.target, self.source = target, source

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> Literal[False]:
        if error is None or isinstance(error, SourceError) or not isinstance(error, Exception):
            return False
        raise _translate(error, self.target, self.source) from None


def _translate(error: Exception, target: str, source: str) -> SourceError:
    name = type(error).__name__
    bucket, _ = location(source)
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
    if name == "ClientError":
        code = str((getattr(error, "response", {}) or {}).get("Error", {}).get("Code", ""))
        if code in _NO_BUCKET:
            return SourceError(
                f"bucket {bucket} does not exist at {endpoint}",
                "correct the bucket's name, or the endpoint (AWS_ENDPOINT_URL in [ml-training.env])",
                NOT_FOUND,
                target,
            )
        if code in _DENIED:
            return SourceError(
                f"{source} cannot be read with the credentials given ({code})",
                CREDENTIAL_FIX,
                DENIED,
                target,
                CREDENTIALS,
                CREDENTIAL_FIX,
            )
        if code in ("PreconditionFailed", "412"):
            return SourceError(
                f"an object of {source} changed while it was fetched (it is not versioned)",
                "deploy again to train on the data as it is now",
                CHANGED,
                target,
            )
        return SourceError(f"{source}: {code}: {error}", "check the bucket and the endpoint", target=target)
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return SourceError(
            f"no credentials to read {source}", CREDENTIAL_FIX, DENIED, target, CREDENTIALS, CREDENTIAL_FIX
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError"):
        return SourceError(
            f"the S3 endpoint {endpoint} cannot be reached ({error})",
            "check AWS_ENDPOINT_URL in [ml-training.env] and the network between here and the store",
            UNREACHABLE,
            target,
        )
    if isinstance(error, OSError):
        return SourceError(f"cannot write the data of {source}: {error}", "check the cache's space", target=target)
    return SourceError(
        f"{source}: {name}: {error}", "check the bucket, the endpoint and the credentials", target=target
    )

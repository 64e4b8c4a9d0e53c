"""`hf://datasets/ORG/NAME@REV` and `hf://models/ORG/NAME@REV` (or `hf://ORG/NAME@REV`, a model, as the Hub
names them): resolved to the commit sha the revision names, fetched at that commit, sampled.

Through huggingface_hub's own calls (`HfApi.repo_info`, `snapshot_download`, `hf_hub_download`), so that its
endpoint (`HF_ENDPOINT`: a mirror, or the Hub) and token (`HF_TOKEN`) work as they do for the user's code.
huggingface_hub is imported inside the functions: this module runs in the image's and the data tools'
environments.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.datafetch.data_pins import MAX_LISTED
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.source_errors import DENIED
from vdk.plugin.ml_training.datafetch.source_errors import NOT_FOUND
from vdk.plugin.ml_training.datafetch.source_errors import UNREACHABLE
from vdk.plugin.ml_training.datafetch.source_errors import SourceError
from vdk.plugin.ml_training.datafetch.source_errors import missing_tool
from vdk.plugin.ml_training.datafetch.source_errors import too_big_to_sample

DATASETS = "datasets"
MODELS = "models"
DEFAULT_REVISION = "main"
_HF_CACHE = ".cache"  # what snapshot_download keeps in its local_dir to resume; no data
CREDENTIALS = ("HF_TOKEN = hf-credentials/token",)  # the variable of the token, as [ml-training.secrets] maps it
# Right in a pod (the data step reads the Secrets); a local run's is ops/data_resolution.py's.
TOKEN_FIX = f"map a token that may read it in [ml-training.secrets] (`{CREDENTIALS[0]}`)"
GATED = "accept the repository's conditions on the Hub if it is gated"

_PART = ".vdk-part"  # a sample's file on its way to its place (publish), beside the sample: not seen in it


def parse(source: str) -> tuple[str, str, str]:
    """(repo type for huggingface_hub: dataset or model, repo id, revision) of a validated `hf://` source."""
    rest = source[len("hf://") :]
    path, _, revision = rest.partition("@")
    kind, _, repo = path.partition("/")
    if kind == DATASETS:
        return "dataset", repo, revision or DEFAULT_REVISION
    if kind == MODELS:
        return "model", repo, revision or DEFAULT_REVISION
    return "model", path, revision or DEFAULT_REVISION


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise missing_tool("huggingface_hub", "huggingface_hub") from None
    return huggingface_hub


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


def _info(target: str, source: str) -> Any:
    repo_type, repo_id, revision = parse(source)
    hub = _hub()
    try:
        return hub.HfApi(token=_token()).repo_info(repo_id, repo_type=repo_type, revision=revision, files_metadata=True)
    except Exception as e:  # noqa: BLE001 - each of huggingface_hub's errors becomes one that says what to do
        raise _translate(e, target, source) from None


def resolve(target: str, source: str) -> DataPin:
    """The commit the revision names now, and what that commit holds."""
    info = _info(target, source)
    files = [s for s in info.siblings or []]
    return DataPin(
        target=target,
        source=source,
        version=info.sha,
        fingerprint=info.sha,
        versioned=True,
        files=len(files),
        bytes=sum(int(getattr(s, "size", None) or 0) for s in files),
        objects={s.rfilename: str(getattr(s, "blob_id", None) or "") for s in files}
        if len(files) <= MAX_LISTED
        else None,
    )


def fetch(pin: DataPin, dest: Path, progress: Callable[[int, int], None] | None = None) -> None:
    """The pinned commit into `dest` (what the Hub would give `snapshot_download` of that sha)."""
    repo_type, repo_id, _ = parse(pin.source)
    hub = _hub()
    try:
        hub.snapshot_download(repo_id, repo_type=repo_type, revision=pin.version, local_dir=dest, token=_token())
    except Exception as e:  # noqa: BLE001 - huggingface_hub's errors of every kind, translated
        raise _translate(e, pin.target, pin.source) from None
    shutil.rmtree(dest / _HF_CACHE, ignore_errors=True)
    if progress is not None:
        progress(pin.files or 0, pin.bytes or 0)


def sample(target: str, source: str, dest: Path, max_files: int, max_bytes: int) -> dict:
    """The first files of the revision (in path order) up to `max_files` and `max_bytes` into `dest`, which holds
    nothing else afterwards; downloads are kept in `dest`'s staging directory beside it between runs."""
    info = _info(target, source)
    repo_type, repo_id, _ = parse(source)
    chosen: list[tuple[str, int]] = []
    total = 0
    complete = True
    smallest: tuple[str, int] | None = None  # of those too big for the sample
    for sibling in sorted(info.siblings or [], key=lambda s: s.rfilename):
        size = int(getattr(sibling, "size", None) or 0)
        if len(chosen) >= max_files:
            complete = False
            break
        if total + size > max_bytes:
            complete = False
            if smallest is None or size < smallest[1]:
                smallest = (sibling.rfilename, size)
            continue
        chosen.append((sibling.rfilename, size))
        total += size
    if not chosen and smallest is None:
        raise SourceError(
            f"{source} holds no files at revision {info.sha}",
            "check the repository and revision (`@main` when unsure): the Hub's page of the repository lists its files",
            NOT_FOUND,
            target,
        )
    if not chosen:
        assert smallest is not None  # files there, none small enough
        raise too_big_to_sample(target, source, "file", smallest[0], smallest[1], max_bytes)
    staging = dest.with_name(dest.name + ".hub")
    hub = _hub()
    try:
        for name, _ in chosen:
            hub.hf_hub_download(
                repo_id, name, repo_type=repo_type, revision=info.sha, local_dir=staging, token=_token()
            )
    except Exception as e:  # noqa: BLE001 - huggingface_hub's errors of every kind, translated
        raise _translate(e, target, source) from None
    publish(staging, dest, [name for name, _ in chosen])
    return {"files": len(chosen), "bytes": total, "complete": complete, "version": info.sha}


def publish(staging: Path, dest: Path, names: list[str]) -> None:
    """`dest` made to hold exactly `names`, each linked (else copied) from `staging`, in place: another smoke run
    of the same data may be reading `dest`, so a file of it is replaced in one step, never removed first (only
    the files the new sample leaves out go)."""
    keep = set(names)
    if dest.is_dir():
        for path in sorted(dest.rglob("*"), reverse=True):  # a directory's files before it
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif path.relative_to(dest).as_posix() not in keep:
                path.unlink(missing_ok=True)
    for name in names:
        source, target = staging / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = dest.with_name(f".{dest.name}.{os.getpid()}{_PART}")  # this process's own, beside the sample
        fresh.unlink(missing_ok=True)
        try:
            os.link(source, fresh)
        except OSError:
            shutil.copyfile(source, fresh)
        os.replace(fresh, target)
        fresh.unlink(missing_ok=True)  # still there when the target was a link of the same file (rename does nothing)


def _translate(error: Exception, target: str, source: str) -> SourceError:
    if isinstance(error, SourceError):
        return error
    name = type(error).__name__
    names = {cls.__name__ for cls in type(error).__mro__}
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    _, repo_id, revision = parse(source)
    if "GatedRepoError" in names:
        return SourceError(
            f"{source} is gated: the token given may not read it",
            f"{TOKEN_FIX}, and {GATED}",
            DENIED,
            target,
            CREDENTIALS,
            TOKEN_FIX,
        )
    if "RevisionNotFoundError" in names:
        return SourceError(
            f"{repo_id} has no revision {revision!r} at {endpoint}",
            "name a branch, tag or commit the repository has (`@main` when unsure)",
            NOT_FOUND,
            target,
        )
    if "RepositoryNotFoundError" in names:
        token = "with the token given" if _token() else "without a token"
        return SourceError(
            f"{source}: no such repository at {endpoint}, or it is private and cannot be read {token}",
            "correct the name (hf://datasets/ORG/NAME for a dataset, hf://models/ORG/NAME for a model); if it is "
            f"private, {TOKEN_FIX}, and {GATED}",
            NOT_FOUND,
            target,
            CREDENTIALS,
            TOKEN_FIX,
        )
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status in (401, 403):
        return SourceError(
            f"{source} cannot be read with the token given ({status})",
            f"{TOKEN_FIX}, and {GATED}",
            DENIED,
            target,
            CREDENTIALS,
            TOKEN_FIX,
        )
    if "ConnectError" in names or "ConnectionError" in names or "Timeout" in name or "OfflineModeIsEnabled" in names:
        return SourceError(
            f"the Hub at {endpoint} cannot be reached ({name})",
            "check HF_ENDPOINT in [ml-training.env] (a mirror) and the network between here and the Hub",
            UNREACHABLE,
            target,
        )
    return SourceError(f"{source}: {name}: {error}", "check the repository, revision and token", target=target)

"""What the data command does, by mode: in a pod, fetch every pinned version into the cache (once per version:
other pods wait for the one that fetches) and report the manifest of every mounted claim; on the deploying
machine, resolve references to versions, fetch a bounded sample, or fetch everything into a local cache.
Standard library only; the sources import their tools when they talk to a store."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from vdk.plugin.ml_training.datafetch import data_cache
from vdk.plugin.ml_training.datafetch import hf_source
from vdk.plugin.ml_training.datafetch import s3_source
from vdk.plugin.ml_training.datafetch.claim_manifest import claim_manifest
from vdk.plugin.ml_training.datafetch.data_pins import HF
from vdk.plugin.ml_training.datafetch.data_pins import S3
from vdk.plugin.ml_training.datafetch.data_pins import ClaimManifest
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.data_pins import scheme_of
from vdk.plugin.ml_training.datafetch.source_errors import SourceError
from vdk.plugin.ml_training.vocabulary import wire
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

Say = Callable[[str], None]
SOURCES = {S3: s3_source, HF: hf_source}
PREFIX = wire.mark(wire.DATA)
PROGRESS_SECONDS = 10.0
SOURCE_PROBLEM = 3  # the command's exit status for a problem of a source (its answer says which: `error_answer`)


def _source(scheme: str):
    module = SOURCES.get(scheme)
    if module is None:
        raise SourceError(f"{scheme}:// is not a source the data step fetches", "use s3:// or hf://")
    return module


def resolve_all(refs: list[dict]) -> list[DataPin]:
    """Each reference ({"target", "source"}) pinned to what it is now; claims are not resolved (not versioned)."""
    pins = []
    for ref in refs:
        scheme = scheme_of(ref["source"])
        if scheme in SOURCES:
            pins.append(_source(scheme).resolve(ref["target"], ref["source"]))
        else:
            pins.append(DataPin(target=ref["target"], source=ref["source"]))
    return pins


def fetch_all(cache: Path, pins: list[DataPin], claim: str | None, say: Say) -> list[Path]:
    """Every fetched pin into `cache`, unless a pod fetched that version before; the directories, in order."""
    done = []
    for pin in pins:
        if not pin.fetched:
            continue
        if not pin.resolved:
            raise SourceError(
                f"{pin.source} was never pinned to a version (this manifest comes from `vdk deploy --dry-run`)",
                "deploy with `vdk deploy`, which pins every dataset before it starts a run",
                target=pin.target,
            )
        done.append(fetch_one(cache, pin, claim, say))
    return done


def fetch_one(cache: Path, pin: DataPin, claim: str | None, say: Say) -> Path:
    entry = data_cache.entry(cache, pin)
    what = f"{pin.target}: {pin.source} at {pin.describe_version()}"
    if data_cache.is_complete(cache, pin):
        say(f"{PREFIX} {what}: in the cache already ({data_cache.sub_path(pin)})")
        return entry

    def waiting(seconds: float) -> None:
        say(f"{PREFIX} {pin.target}: another pod is fetching this version; waited {seconds:.0f} s")

    with data_cache.locked(cache, pin, waiting):
        if data_cache.is_complete(cache, pin):
            say(f"{PREFIX} {what}: fetched by another pod meanwhile")
            return entry
        data_cache.check_space(cache, pin, claim)
        say(f"{PREFIX} {what}: fetching into the cache ({data_cache.sub_path(pin)})")
        entry.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        _source(pin.scheme).fetch(pin, entry, _progress_lines(pin, say))
        data_cache.mark_complete(cache, pin)
        say(f"{PREFIX} {pin.target}: fetched {counted(pin.files or 0, 'file')} in {time.monotonic() - started:.0f} s")
    return entry


def _progress_lines(pin: DataPin, say: Say) -> Callable[[int, int], None]:
    last = [time.monotonic()]

    def progress(files: int, size: int) -> None:
        if time.monotonic() - last[0] >= PROGRESS_SECONDS:
            last[0] = time.monotonic()
            say(
                f"{PREFIX} {pin.target}: {files} of {pin.files} files, {size_text(size)} of {size_text(pin.bytes or 0)}"
            )

    return progress


def link_targets(links: list[tuple[str, str]]) -> None:
    """Each (path, directory): `path` made a symbolic link to `directory` (its parents made; an earlier link, or
    an empty directory, replaced)."""
    for path, directory in links:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if os.path.islink(path):
            os.unlink(path)
        elif os.path.isdir(path) and not os.listdir(path):
            os.rmdir(path)
        elif os.path.exists(path):
            raise SourceError(
                f"{path} is in the way of the dataset linked there (the image or the working directory has it)",
                "choose a target the job's files do not use",
                target=path,
            )
        os.symlink(directory, path)


def report_claims(claims: list[tuple[str, str]], say: Say) -> list[ClaimManifest]:
    """The manifest line of each mounted claim ((target, directory)), said and returned."""
    manifests = []
    for target, directory in claims:
        manifest = claim_manifest(target, directory)
        say(manifest.line())
        manifests.append(manifest)
    return manifests


def sample_all(refs: list[dict], dest: Path, max_files: int, max_bytes: int) -> list[dict]:
    """A bounded sample of each reference into `dest/<n>`: what each holds."""
    out = []
    for ref in refs:
        scheme = scheme_of(ref["source"])
        path = dest / _slot(ref)
        taken = _source(scheme).sample(ref["target"], ref["source"], path, max_files, max_bytes)
        out.append({"target": ref["target"], "source": ref["source"], "path": str(path), **taken})
    return out


def full_all(refs: list[dict], cache: Path, say: Say, progress: Callable[[str, int, int, DataPin], None]) -> list[dict]:
    """Each reference resolved and fetched whole into the local cache `cache` (once per version)."""
    out = []
    for pin in resolve_all(refs):
        if not pin.fetched:
            continue
        entry = data_cache.entry(cache, pin)
        if not data_cache.is_complete(cache, pin):
            with data_cache.locked(cache, pin):
                if not data_cache.is_complete(cache, pin):
                    entry.mkdir(parents=True, exist_ok=True)
                    _source(pin.scheme).fetch(pin, entry, lambda f, b, p=pin: progress(p.target, f, b, p))
                    data_cache.mark_complete(cache, pin)
        out.append({"target": pin.target, "source": pin.source, "path": str(entry), "pin": pin.to_dict()})
    return out


def _slot(ref: dict) -> str:
    import hashlib

    return hashlib.sha256(f"{ref['target']}\n{ref['source']}".encode()).hexdigest()[:24]


def termination_message(lines: list[str]) -> None:
    """The last lines said, as the container's termination message (the pod's status keeps it: `vdk show`
    and `vdk diff` read the manifests there)."""
    if not os.path.exists(wire.TERMINATION_LOG):
        return
    data = "\n".join(lines).encode("utf-8", "replace")[-wire.TERMINATION_MAX_BYTES :]
    try:
        with open(wire.TERMINATION_LOG, "wb") as f:
            f.write(data)
    except OSError:
        pass


# --- what the command tells: its failure in a pod, its answers and progress on the deploying machine -----------


def failure_line(error: SourceError) -> str:
    """The data step's failure, as its log and its termination message say it (`parse_failure` reads it)."""
    return wire.line(wire.DATA_FAILED, str(error))


def parse_failure(message: str) -> tuple[str, str] | None:
    """(problem, fix) of the data step's failure in a termination message; None when it holds none."""
    mark = wire.mark(wire.DATA_FAILED) + " "
    if mark not in message:
        return None
    return wire.split_fix(message.split(mark, 1)[1])


def error_answer(error: SourceError) -> str:
    """The command's answer for a problem of a source (with exit status SOURCE_PROBLEM)."""
    return json.dumps({"error": error.to_dict()})


def answer_error(answer: object) -> SourceError | None:
    """The problem of a source an answer of the command holds; None for any other answer."""
    if not isinstance(answer, dict) or not isinstance(answer.get("error"), dict):
        return None
    return SourceError.from_dict(answer["error"])


def progress_line(target: str, files: int, size: int, pin: DataPin) -> str:
    """A line of `full`'s progress on stderr (`parse_progress_line` reads it)."""
    progress = {"target": target, "files": files, "bytes": size, "total_files": pin.files, "total_bytes": pin.bytes}
    return json.dumps({"progress": progress})


def parse_progress_line(line: str) -> dict | None:
    """The data of a progress line ({"target", "files", "bytes", "total_files", "total_bytes"}), None for any other
    line."""
    if not line.startswith('{"progress"'):
        return None
    try:
        return json.loads(line)["progress"]
    except (ValueError, KeyError, TypeError):
        return None

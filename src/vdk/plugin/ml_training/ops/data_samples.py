"""The datasets of a local run, on this machine: a smoke run never fetches a whole dataset — it takes the local
files `smoke_data` names, else a bounded sample (the first `smoke_sample_files` files of each, at most
`smoke_sample_size` in all), kept between runs in the cache (`<cache>/data-samples`); a full run (`vdk run
--full`) fetches each dataset whole at the version it has now, once per version (`<cache>/data`), with progress.
Fetched by the data tools (ops/data_tools.py) with the job's [ml-training.env] and the shell's values of its
secrets, as every local run takes them; placed at their targets by local/data_links.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.source_errors import SourceError
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.job import SECTION
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.local.data_links import LocalDataset
from vdk.plugin.ml_training.ops import data_tools
from vdk.plugin.ml_training.ops.data_resolution import source_error
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.units import parse_quantity
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

SAMPLE_TIMEOUT = 600
FULL_TIMEOUT = 7 * 86400  # a whole dataset may take long; the progress says how it goes


def cache_dir(kind: str) -> Path:
    from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

    return cache_root() / kind


def local_datasets(
    spec: MLJobSpec, mode: str, progress: Progress | None = None, shell: dict[str, str] | None = None
) -> tuple[tuple[LocalDataset, ...], list[str]]:
    """(the datasets at their targets, notes about those a local run does not have) for a run of `mode`."""
    shell = dict(os.environ) if shell is None else shell
    smoke_paths = dict(spec.smoke_data)
    found: list[LocalDataset] = []
    notes: list[str] = []
    to_fetch = []
    for source in spec.data:
        if not source.relative:
            notes.append(
                f"{source.target} ({source.source}) is an absolute path: a local run does not make it (the code reads "
                "your own copy there, if you have one)"
            )
        elif mode == protocol.SMOKE and source.target in smoke_paths:
            found.append(_smoke_data(spec, source.target, smoke_paths[source.target]))
        elif not source.fetched:
            notes.append(
                f"{source.target}: {source.source} is a claim of the cluster, and this machine has no copy of it; "
                f"`smoke_data = {source.target}=PATH` in [{SECTION}] gives smoke runs one"
            )
        else:
            to_fetch.append(source)
    if not to_fetch:
        return tuple(found), notes
    env = dict(spec.env_dict)
    env.update({s.name: shell[s.name] for s in spec.secrets if shell.get(s.name)})
    refs = json.dumps([{"target": s.target, "source": s.source} for s in to_fetch])
    schemes = {s.scheme for s in to_fetch}
    try:
        if mode == protocol.SMOKE:
            found += _samples(spec, schemes, refs, env)
        else:
            found += _whole(spec, schemes, refs, env, progress or Progress())
    except SourceError as e:
        raise source_error(spec, e, shell) from None  # a local run's credentials: the shell's
    order = [s.target for s in spec.data]
    return tuple(sorted(found, key=lambda d: order.index(d.target))), notes


def _smoke_data(spec: MLJobSpec, target: str, text: str) -> LocalDataset:
    path = Path(os.path.expanduser(text))
    path = path if path.is_absolute() else spec.job_dir / path
    if not path.exists():
        raise JobConfigError(
            spec.config_path,
            f"smoke_data names {text} for {target}, and {path} does not exist",
            f"put a few files of the dataset there, or correct the path (`smoke_data = {target}=PATH`, PATH relative "
            "to the job directory); without smoke_data a smoke run fetches a small sample",
            SECTION,
            "smoke_data",
        )
    return LocalDataset(target, path, f"smoke_data {text}")


def _samples(spec: MLJobSpec, schemes: set[str], refs: str, env: dict[str, str]) -> list[LocalDataset]:
    limit = int(parse_quantity(spec.smoke_sample_size))
    arguments = ["sample", "--refs", refs, "--dest", str(cache_dir("data-samples"))]
    arguments += ["--max-files", str(spec.smoke_sample_files), "--max-bytes", str(limit)]
    out = []
    answer = data_tools.run(
        schemes, arguments, env, SAMPLE_TIMEOUT, index_strategy=spec.index_strategy, job_dir=spec.job_dir
    )
    for item in answer:
        whole = "all of it" if item["complete"] else "its first files only"
        caps = f"smoke_sample_files = {spec.smoke_sample_files}, smoke_sample_size = {spec.smoke_sample_size}"
        files = counted(item["files"], "file")
        what = f"a sample of {item['source']}: {files}, {size_text(item['bytes'])} ({whole}; {caps})"
        out.append(LocalDataset(item["target"], Path(item["path"]), what))
    return out


def _whole(
    spec: MLJobSpec, schemes: set[str], refs: str, env: dict[str, str], progress: Progress
) -> list[LocalDataset]:
    transfers: dict[str, tuple] = {}

    def advance(line: dict) -> None:
        target = line["target"]
        if target not in transfers:
            label = f"{target} ({counted(int(line.get('total_files') or 0), 'file')})"
            transfers[target] = (
                progress.transfer(label, int(line.get("total_bytes") or 0), ("fetching", "fetched")),
                0,
            )
        transfer, done = transfers[target]
        transfer.advance(int(line["bytes"]) - done)
        transfers[target] = (transfer, int(line["bytes"]))

    progress.stage("Data: fetching each dataset whole for the full run (once per version)")
    try:
        arguments = ["full", "--refs", refs, "--cache", str(cache_dir("data"))]
        answer = data_tools.run(
            schemes, arguments, env, FULL_TIMEOUT, advance, index_strategy=spec.index_strategy, job_dir=spec.job_dir
        )
    finally:
        for transfer, _ in transfers.values():
            transfer.close()
    out = []
    for item in answer:
        pin = DataPin.from_dict(item["pin"])
        out.append(LocalDataset(item["target"], Path(item["path"]), f"{pin.source} whole, at {pin.describe_version()}"))
    return out

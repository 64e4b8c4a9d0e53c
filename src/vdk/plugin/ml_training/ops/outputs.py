"""What a run wrote to its output claim (`vdk execute --outputs`): the list of its files, or the files copied
back into a local directory. A short-lived pod of the run's own image reads the run's directory of the claim
(k8s/storage/outputs_copy.py); where that is comes from the run's record (k8s/storage/output_location.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.k8s.storage import output_location
from vdk.plugin.ml_training.k8s.storage import outputs_copy
from vdk.plugin.ml_training.k8s.storage.output_location import OutputLocation
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import execute_command
from vdk.plugin.ml_training.ops.scope import pick_run
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.runtime.outputs_stream import OutputFile
from vdk.plugin.ml_training.runtime.outputs_stream import display
from vdk.plugin.ml_training.vocabulary.human_units import size_text


@dataclass(frozen=True)
class RunOutputs:
    """The files a run wrote to its output claim and, when they were copied, where to."""

    run: RunSummary
    location: OutputLocation
    files: list[OutputFile]
    copied_to: Path | None = None
    written: list[Path] | None = None  # the local files written, when copied

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict:
        return {
            "run": self.run.name,
            "location": self.location.to_dict(),
            "files": [f.to_dict() for f in self.files],
            "bytes": self.size,
            "copied_to": str(self.copied_to) if self.copied_to is not None else None,
        }


@checked
def run_outputs(
    scope: Scope,
    run_id: str | None = None,
    to: str | Path | None = None,
    *,
    reporter: Reporter | None = None,
    only: str | None = None,
) -> RunOutputs:
    """The files the run `run_id` of the scope's job (default the latest) wrote to its output claim; with
    `to`, copied into that directory (made if missing; each file checked against its digest); `only`: the files of
    that name, or below a directory of that name (`vdk-tensorboard`). The copy's progress is notes of `reporter`:
    each file, and big ones every 2 s. The copy pod is deleted whatever happens."""
    say = or_quiet(reporter).note
    selection, run = pick_run(scope, execute_command("outputs", run_id), run_id, reporter=reporter)
    client = selection.client
    rec = client.read_run_record(run.name)
    location = output_location.location_of({"manifests": rec.manifests})
    if location is None:
        raise MLTrainingError(
            f"run {run.name} has no output claim: what it wrote went with its pods",
            f"set `output_pvc = NAME` in [ml-training] (or {variable('output_pvc')}) to an existing "
            "PersistentVolumeClaim and deploy again; its runs keep their files there",
        )
    into = Path(to).expanduser().resolve() if to is not None else None
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
    pod = outputs_copy.copy_pod(
        run.name,
        selection.job_name,
        rec.image,
        output_location.image_python(rec.manifests),
        location,
        client.namespace,
        copy=into is not None,
        only=only,
    )
    say(f"Reading {run.name}'s outputs ({location.describe()}) through pod {pod['metadata']['name']}")
    reader = outputs_copy.read_outputs(
        client,
        pod,
        into,
        CopyProgress(say).update if into is not None else None,
        lambda why: say(f"  waiting for the copy pod: {why}"),
    )
    return RunOutputs(run, location, reader.files, into, reader.written if into is not None else None)


class CopyProgress:
    """Progress of a copy: each file as it completes, big ones in between at most every 2 s."""

    def __init__(self, say: Say, interval: float = 2.0):
        self._say = say
        self._clock = time.monotonic
        self._interval = interval
        self._last = 0.0

    def update(self, path: str, done: int, size: int) -> None:
        now = self._clock()
        path = display(path)  # a file name is never printed raw (terminal escape sequences)
        if done >= size:
            self._say(f"  {path}  {size_text(size)}")
            self._last = now
        elif now - self._last >= self._interval:
            self._say(f"  {path}  {size_text(done)} of {size_text(size)} ({100 * done // max(size, 1)}%)")
            self._last = now

"""Whose checkpoints these are: the file `vdk-checkpoints.json` in a run's working directory (its output directory
on a cluster) lists every checkpoint the run's frameworks wrote (a Trainer's `checkpoint-N`, a Lightning `.ckpt`,
an Accelerate `save_state` directory), each with the run that wrote it, the optimizer step it holds and where the
data stood; and every run that worked there, with the run it continues. Written by global rank 0 once a checkpoint
is whole, read by every rank when it starts: automatic resume (runtime/resume.py) takes only checkpoints of this
run's lineage, never a stranger's (one of the job directory that the image, or a local run's copy, holds; one an
earlier run left in a reused directory), and never one cut short by a kill (it was never listed).

The lineage of run B is B, the run it continues (`RESUME_FROM`: A, whose checkpoints B's directory began with), the
run A continued, and so on, as the file's `runs` say. A new run continues none. A pod restarted after a failure or
a preemption is the same run: it resumes from what it wrote before.

    {"format": 1,
     "runs": {"mnist-k3x9p2qa": {"from": null, "starts": 3}, "mnist-m7d1c0zz": {"from": "mnist-k3x9p2qa"}},
     "checkpoints": [{"path": "outputs/checkpoint-1200", "framework": "transformers", "run": "mnist-k3x9p2qa",
                      "step": 1200, "on_stop": true, "position": {}}]}

A cluster run's `starts` count the starts of its global rank 0 there (each restart of its pods is one more): the cap on
the restarts the cluster does not count (a disruption's: `max_disruptions`), which the bootstrap enforces.

Paths are relative to the working directory (absolute when outside it). Writer and reader here; standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.runtime import protocol

FILE = "vdk-checkpoints.json"
FORMAT = 1
TRANSFORMERS = "transformers"
LIGHTNING = "lightning"
ACCELERATE = "accelerate"


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of the file: its path (absolute), its framework, the run that wrote it, its step."""

    path: str
    framework: str
    run: str
    step: int
    on_stop: bool = False  # written because the run was told to stop (SIGTERM), at the end of a step
    position: dict[str, Any] = field(default_factory=dict)  # where the data stood (Accelerate: pass, batches)

    @property
    def name(self) -> str:
        return os.path.basename(self.path.rstrip(os.sep)) or self.path


class Lineage:
    """This run's view of the file in `directory`: `run` (this run) continues `continues` (or none)."""

    def __init__(self, directory: str, run: str, continues: str | None = None):
        self.directory = directory
        self.run = run
        self.continues = continues or None

    @classmethod
    def of_this_process(cls) -> Lineage | None:
        """From the environment, in the working directory; None when the run has no name (nothing to tell apart)."""
        run = os.environ.get(protocol.RUN_NAME, "").strip()
        if not run:
            return None
        return cls(os.getcwd(), run, os.environ.get(protocol.RESUME_FROM, "").strip() or None)

    @property
    def path(self) -> str:
        return os.path.join(self.directory, FILE)

    def read(self) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("format") == FORMAT else {}

    def runs(self, data: dict[str, Any] | None = None) -> list[str]:
        """This run, the run it continues, and so on back (as the file's `runs` say), nearest first."""
        runs_of = (data if data is not None else self.read()).get("runs") or {}
        out = [self.run]
        previous = self.continues
        while previous and previous not in out:
            out.append(previous)
            entry = runs_of.get(previous)
            previous = entry.get("from") if isinstance(entry, dict) else None
        return out

    def checkpoints(self, framework: str) -> list[Checkpoint]:
        """The checkpoints of `framework` this run's lineage wrote that are still there, in the order written."""
        data = self.read()
        mine = set(self.runs(data))
        out = []
        for entry in data.get("checkpoints") or []:
            checkpoint = self._checkpoint(entry)
            if checkpoint is not None and checkpoint.framework == framework and checkpoint.run in mine:
                if os.path.exists(checkpoint.path):
                    out.append(checkpoint)
        return out

    def last(self, framework: str) -> Checkpoint | None:
        """The checkpoint to resume from: the one of the furthest step (the latest written among equals)."""
        found = self.checkpoints(framework)
        if not found:
            return None
        return max(enumerate(found), key=lambda pair: (pair[1].step, pair[0]))[1]

    def is_mine(self, path: str) -> bool:
        """Whether `path` is a checkpoint this run's lineage wrote."""
        target = os.path.realpath(self._absolute(path))
        data = self.read()
        mine = set(self.runs(data))
        for entry in data.get("checkpoints") or []:
            checkpoint = self._checkpoint(entry)
            if checkpoint is not None and checkpoint.run in mine and os.path.realpath(checkpoint.path) == target:
                return True
        return False

    def started(self) -> int:
        """One more start of this run here (global rank 0, as it starts): how many there have been, this one
        included (a restarted pod is the same run: its `starts` go on); 0 when the file cannot be written (the
        start is not held back for it)."""
        try:
            data = self.read() or {"format": FORMAT}
            data["format"] = FORMAT
            entry = data.setdefault("runs", {}).setdefault(self.run, {"from": self.continues})
            entry["starts"] = int(entry.get("starts") or 0) + 1
            os.makedirs(self.directory, exist_ok=True)
            protocol.write_json_atomically(Path(self.path), data)
            return entry["starts"]
        except (OSError, TypeError, ValueError, AttributeError):
            return 0

    def record(
        self, path: str, framework: str, step: int, on_stop: bool = False, position: dict[str, Any] | None = None
    ) -> None:
        """A whole checkpoint at `path` (global rank 0, after the framework wrote it). Never raises: a run whose
        record cannot be written still trains, it only cannot resume from this checkpoint."""
        try:
            data = self.read() or {"format": FORMAT}
            data["format"] = FORMAT
            runs = data.setdefault("runs", {})
            runs.setdefault(self.run, {"from": self.continues})
            relative = self._relative(path)
            kept = [e for e in data.get("checkpoints") or [] if not (isinstance(e, dict) and e.get("path") == relative)]
            entry: dict[str, Any] = {"path": relative, "framework": framework, "run": self.run, "step": int(step)}
            entry.update(on_stop=bool(on_stop), position=dict(position or {}))
            data["checkpoints"] = [*kept, entry]
            os.makedirs(self.directory, exist_ok=True)
            protocol.write_json_atomically(Path(self.path), data)
        except (OSError, TypeError, ValueError):
            pass

    def _relative(self, path: str) -> str:
        absolute = os.path.abspath(path)
        directory = os.path.abspath(self.directory)
        if absolute == directory or absolute.startswith(directory + os.sep):
            return os.path.relpath(absolute, directory).replace(os.sep, "/")
        return absolute

    def _absolute(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(self.directory, path)

    def _checkpoint(self, entry: Any) -> Checkpoint | None:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            return None
        try:
            step = int(entry.get("step") or 0)
        except (TypeError, ValueError):
            return None
        position = entry.get("position")
        return Checkpoint(
            self._absolute(entry["path"]),
            str(entry.get("framework") or ""),
            str(entry.get("run") or ""),
            step,
            bool(entry.get("on_stop")),
            position if isinstance(position, dict) else {},
        )

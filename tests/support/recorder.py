"""A reporter (ops/reporting.py) that keeps what it is told, as a notebook's own reporter would: the notes, and the
events in order, for the tests of the use cases and the API to assert on."""

from __future__ import annotations

import threading

from vdk.plugin.ml_training.ops.reporting import Reporter


class Recorder(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.events: list[tuple] = []  # (event name, its arguments)
        self._lock = threading.Lock()  # a deploy's remote checks tell their notes from threads of their own

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(text)

    def _event(self, name: str, *args) -> None:
        with self._lock:
            self.events.append((name, *args))

    def run_starting(self, plan) -> None:
        self._event("run_starting", plan)

    def run_interrupted(self, plan, error) -> None:
        self._event("run_interrupted", plan, error)

    def run_ended(self, result) -> None:
        self._event("run_ended", result)

    def changes(self, changes) -> None:
        self._event("changes", changes)

    def following(self, run, selection) -> None:
        self._event("following", run, selection)

    def log_line(self, rank: str, line: str) -> None:
        self._event("log_line", rank, line)

    def rank_failed(self, failure) -> None:
        self._event("rank_failed", failure)

    def run_deleted(self, run) -> None:
        self._event("run_deleted", run)

    def named(self, name: str) -> list[tuple]:
        """The arguments of each event `name`, in order."""
        return [event[1:] for event in self.events if event[0] == name]

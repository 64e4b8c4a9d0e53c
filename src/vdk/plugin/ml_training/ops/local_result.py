"""What a local run returns (`vdk run`, the smoke check before `vdk deploy`, a sweep's trials): its outcome, and
for a failure the finding (what happened, the fix) and the error to report. ops/plan_runner.py makes it."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.local.launcher import LocalRun
from vdk.plugin.ml_training.local.outcome import RunOutcome
from vdk.plugin.ml_training.ops.resume_check import ResumeCheck


class LocalRunFailed(MLTrainingError):
    """A local run of an ml-training job did not pass; the summary above it says why."""


@dataclass(frozen=True)
class LocalRunResult:
    """A local run that ended: its outcome, and for a failure the finding (what happened, the fix) and the
    error to report."""

    run: LocalRun
    outcome: RunOutcome
    finding: Finding | None  # None: it passed
    error: LocalRunFailed | None
    debug: bool  # `vdk -v DEBUG`: torchrun's log is shown and the run's files are kept
    # A smoke run: what it turned off that the cluster run will do, and how that was checked (ops/smoke_gaps.py)
    turned_off: list[str] = field(default_factory=list)
    resume: ResumeCheck | None = None  # a smoke run's second start, after a stop as a preemption's (resume_check.py)

    @property
    def passed(self) -> bool:
        return self.outcome.passed

"""The plugin's own error types: every message says what is wrong and what to do about it."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.secret_patterns import printable
from vdk.plugin.ml_training.secret_patterns import redact
from vdk.plugin.ml_training.vocabulary.wire import setting_variable
from vdk.plugin.ml_training.vocabulary.wire import with_fix


class MLTrainingError(Exception):
    """Base of every error the plugin reports to a user. `fix` says what to do next. Neither shows a
    credential (tokens and URL passwords are redacted, secret_patterns.py) nor a control character a terminal
    would act on (escaped), whatever put them there."""

    def __init__(self, problem: str, fix: str = ""):
        self.problem = printable(redact(problem))
        self.fix = printable(redact(fix))
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return with_fix(self.problem, self.fix)


class JobConfigError(MLTrainingError):
    """A job's config.ini (or a setting that stands in for it) is not valid."""

    def __init__(
        self,
        path: Path | str,
        problem: str,
        fix: str,
        section: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ):
        self.path = Path(path)
        self.section = section
        self.key = key
        self.line = line
        where = f"{self.path}:{line}" if line else str(self.path)
        if section and key:
            where += f" [{section}] {key}"
        elif section:
            where += f" [{section}]"
        super().__init__(f"{where}: {problem}", fix)


class SettingError(MLTrainingError):
    """A VDK configuration key of the plugin (`ml_training_*`, env `VDK_ML_TRAINING_*`) is not valid."""

    def __init__(self, key: str, problem: str, fix: str):
        self.key = key
        variable = setting_variable(key)
        super().__init__(f"VDK configuration {key} ({variable}): {problem}", f"{fix} (in {variable} or `{key}`)")

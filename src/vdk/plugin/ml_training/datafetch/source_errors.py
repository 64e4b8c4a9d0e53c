"""The one error the data sources raise: what is wrong with a dataset and what to do, printed by the command
line as JSON (`to_dict`) for `vdk` to report with the config.ini line that names the dataset. Standard
library only."""

from __future__ import annotations

from vdk.plugin.ml_training.vocabulary.wire import with_fix

# Kinds, so that the deploying side can say more (a missing bucket, refused credentials, ...).
NOT_FOUND = "not-found"
DENIED = "denied"
UNREACHABLE = "unreachable"
CHANGED = "changed"  # the content changed since it was pinned, and that version cannot be fetched any more
INVALID = "invalid"
NO_SPACE = "no-space"
TOOLS = "tools"  # boto3 / huggingface_hub missing where the step runs


class SourceError(Exception):
    def __init__(self, problem: str, fix: str, kind: str = INVALID, target: str | None = None):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.kind = kind
        self.target = target

    def to_dict(self) -> dict:
        return {"problem": self.problem, "fix": self.fix, "kind": self.kind, "target": self.target}

    @classmethod
    def from_dict(cls, data: dict) -> SourceError:
        return cls(data.get("problem", "?"), data.get("fix", ""), data.get("kind", ""), data.get("target"))

    def __str__(self) -> str:
        where = f"{self.target}: " if self.target else ""
        return with_fix(f"{where}{self.problem}", self.fix)


def missing_tool(module: str, requirement: str) -> SourceError:
    return SourceError(
        f"{module} is not installed where the data is fetched",
        f"the job image's dependency layer holds {requirement} when config.ini references such data: deploy the "
        "job again with this version of vdk-ml-training",
        TOOLS,
    )

"""The one error the data sources raise: what is wrong with a dataset and what to do, printed by the command
line as JSON (`to_dict`) for `vdk` to report with the config.ini line that names the dataset. Standard
library only."""

from __future__ import annotations

from vdk.plugin.ml_training.vocabulary.human_units import size_text
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
    """What is wrong with a dataset and what to do. `credentials`: the variables the source reads its credentials
    from when the problem is theirs (missing, refused), each as [ml-training.secrets] would map it (`HF_TOKEN =
    hf-credentials/token`), and `credential_fix` the part of `fix` about them, as it is right where the error is
    raised (a pod: the Secrets of [ml-training.secrets]); the deploying side says it for where it resolved the data
    instead (a local run reads them from the shell: ops/data_resolution.py)."""

    def __init__(
        self,
        problem: str,
        fix: str,
        kind: str = INVALID,
        target: str | None = None,
        credentials: tuple[str, ...] = (),
        credential_fix: str = "",
    ):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.kind = kind
        self.target = target
        self.credentials = tuple(credentials)
        self.credential_fix = credential_fix

    def to_dict(self) -> dict:
        return {
            "problem": self.problem,
            "fix": self.fix,
            "kind": self.kind,
            "target": self.target,
            "credentials": list(self.credentials),
            "credential_fix": self.credential_fix,
        }

    @classmethod
    def from_dict(cls, data: dict) -> SourceError:
        return cls(
            data.get("problem", "?"),
            data.get("fix", ""),
            data.get("kind", ""),
            data.get("target"),
            tuple(str(name) for name in data.get("credentials") or ()),
            str(data.get("credential_fix") or ""),
        )

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


def too_big_to_sample(target: str, source: str, what: str, smallest: str, size: int, max_bytes: int) -> SourceError:
    """Every `what` (object, file) of a dataset is larger than a smoke run's sample may be: the sample's cap and the
    smallest one, in human units, and the two ways out. (A dataset with none at all is the source's to say, as
    the deploy says it: raising the cap would not help.)"""
    return SourceError(
        f"every {what} of {source} is larger than a smoke run's sample may be ({size_text(max_bytes)}, "
        f"smoke_sample_size): the smallest, {smallest}, is {size_text(size)}",
        f"raise smoke_sample_size in [ml-training] to at least {size_text(size)} (`smoke_sample_size = "
        f"{_quantity_at_least(size)}`), or give the smoke run a few files of your own with "
        f"`smoke_data = {target}=PATH`",
        NOT_FOUND,
        target,
    )


def _quantity_at_least(size: int) -> str:
    """The smallest whole `NMi` (or `NGi`) that holds `size` bytes, as config.ini writes a quantity."""
    mebibytes = -(-size // 2**20)
    return f"{-(-mebibytes // 1024)}Gi" if mebibytes > 4096 else f"{mebibytes}Mi"

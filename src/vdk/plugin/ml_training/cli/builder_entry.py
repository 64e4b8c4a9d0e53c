"""`vdk-ml-training-builder`: the entry point of the builder image an operator names in the VDK Control Service's
ml-training entry (its `builderImage`; docs/control-service-operator.md). The service starts it with its eleven
positional arguments and variables (ops/cs_build.py); everything it says goes to stdout, the log the service
reads: the job's own problems between the service's `>requirements_failed<` markers, anything else as an error.
Exit status 0: the image is pushed and tagged as the service expects; 1: it is not."""

from __future__ import annotations

import os
import sys

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_progress import StderrProgress


class BuilderLog(api.Reporter):
    """Everything on stdout, the log the service reads: the notes as they are (the markers must stay whole), the
    build's stages and transfers as lines."""

    def __init__(self) -> None:
        self._progress = StderrProgress(sys.stdout)

    @property
    def progress(self) -> Progress:
        return self._progress

    def note(self, text: str) -> None:
        print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return 0 if api.build_as_builder(args, dict(os.environ), reporter=BuilderLog()) else 1


if __name__ == "__main__":
    sys.exit(main())

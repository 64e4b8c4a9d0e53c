"""`vdk-ml-training-builder`: the entry point of the builder image an operator names in the VDK Control Service's
ml-training entry (its `builderImage`; docs/control-service-operator.md). The service starts it with its eleven
positional arguments and variables (ops/cs_build.py); everything it says goes to stdout, the log the service
reads: the job's own problems between the service's `>requirements_failed<` markers, anything else as an error.
Exit status 0: the image is pushed and tagged as the service expects; 1: it is not."""

from __future__ import annotations

import os
import sys

from vdk.plugin.ml_training.errors import MLTrainingError


def _say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    from vdk.plugin.ml_training.image.build_progress import StderrProgress
    from vdk.plugin.ml_training.ops import cs_build

    args = sys.argv[1:] if argv is None else argv
    try:
        request = cs_build.request_from(args, dict(os.environ))
        with cs_build.temporary_workdir() as workdir:
            from pathlib import Path

            cs_build.build_for_service(request, Path(workdir), _say, StderrProgress(sys.stdout))
    except cs_build.UserError as e:
        _say(f"error: {e.problem}")
        if e.fix:
            _say(f"Fix: {e.fix}")
        _say(cs_build.requirements_failed(e.message))
        return 1
    except MLTrainingError as e:
        _say(f"error: {e.problem}")
        if e.fix:
            _say(f"Fix: {e.fix}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

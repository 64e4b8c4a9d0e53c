"""The smoke check's verdict of one job: `vdk run JOB` through the Python API it runs on (ops.local_run.run_job,
the same import check, overlay, smoke run and diagnosis), in a process of its own, with the verdict written as
JSON: whether it passed, where in the job's files the failing rank's traceback ends (or where the import check
says the first missing import is), the error's line, and what the smoke check named a limit of itself.

    python -m functional_tests.gpu.smoke_verdict JOB_DIR RESULT.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from functional_tests.gpu import agreement


def verdict(job: Path) -> agreement.Verdict:
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.ops import deploy
    from vdk.plugin.ml_training.ops import local_run

    started = time.monotonic()
    try:
        spec = deploy.deploy_spec(str(job))
        result = local_run.run_job(spec)
    except MLTrainingError as e:  # the import check, or a job the loader refused: nothing ran
        text = e.message
        return agreement.Verdict(
            False,
            where=agreement.where_in_import_check(text),
            error=text.splitlines()[0][:300],
            limit=agreement.limit_named(text),
            seconds=round(time.monotonic() - started, 2),
            note="stopped before the run",
        )
    seconds = round(time.monotonic() - started, 2)
    outcome = result.outcome
    steps = outcome.steps
    if result.passed:
        return agreement.Verdict(True, seconds=seconds, steps=steps)
    cause = outcome.root_cause
    error = (cause.error or {}) if cause is not None else {}
    work = str(result.run.work.path) if result.run.work is not None and hasattr(result.run.work, "path") else ""
    traceback_text = error.get("traceback", "") or (cause.stack if cause is not None else "")
    finding = result.finding
    said = "\n".join(
        x for x in (outcome.headline, finding.what if finding else "", (finding.fix or "") if finding else "") if x
    )
    if result.error is not None:
        said += "\n" + result.error.message
    return agreement.Verdict(
        False,
        where=agreement.where_in_traceback(traceback_text, str(job.resolve()), work),
        error=agreement.one_line(error.get("message", "") or outcome.headline),
        limit=agreement.limit_named(said),
        seconds=seconds,
        steps=steps,
    )


def main(argv: list[str]) -> int:
    job, result = Path(argv[0]), Path(argv[1])
    found = verdict(job)
    result.write_text(json.dumps(found.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The check of many argument lists against a job's script on this machine, in one interpreter that forks after
the script's imports (runtime/argument_check.py), in a working directory made like a smoke run's: nothing it
writes reaches the job directory, nothing is left behind."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.local import workdir
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.runtime import argument_check
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.source.job_files import FileSet

CHECK_MODULE = "vdk.plugin.ml_training.runtime.argument_check"
SECONDS_A_LIST = 0.05  # beyond the smoke timeout (the script's imports), what a fork and a parse may take


@dataclass(frozen=True)
class ArgumentsChecked:
    """What the script made of each list: `status` (runtime/argument_check.py: PARSED, NO_PARSER, OWN_LIST,
    ERROR), per list `accepted` and argparse's message, and `why` when no list could be checked."""

    status: str
    results: tuple[dict, ...] = ()
    why: str = ""

    @property
    def checked(self) -> bool:
        return self.status == argument_check.PARSED


def check_arguments(
    spec: MLJobSpec, argument_lists: list[list[str]], env: dict[str, str] | None = None, files: FileSet | None = None
) -> ArgumentsChecked:
    """Whether the entrypoint of `spec` accepts each of `argument_lists`; `env`: the processes' environment
    beyond the smoke run's (a trial's [ml-training.env] values). `files`: the job directory's files as the command
    found them already (default: found now)."""
    base = smoke_plan(spec).env
    folder = Path(tempfile.mkdtemp(prefix=f"{spec.name}-arguments-"))
    try:
        work = workdir.prepare(spec.job_dir, folder / "work", files=files)
        result = folder / "result.json"
        lists = folder / "lists.json"  # a file: any number of trials fits (the environment would not)
        argument_check.write_lists(str(lists), argument_lists)
        (folder / "tmp").mkdir()
        environment = {**base, **(env or {})}
        environment["TMPDIR"] = str(folder / "tmp")  # what the check and the script's imports leave goes with it
        for name in (protocol.MODE, protocol.RUN_DIR):
            environment.pop(name, None)
        argv = [sys.executable, "-m", CHECK_MODULE, str(result), str(lists), "--", *spec.entrypoint.argv()]
        timeout = spec.smoke_timeout_seconds + len(argument_lists) * SECONDS_A_LIST
        try:
            done = subprocess.run(
                argv, cwd=work.path, env=environment, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=timeout, check=False, start_new_session=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return ArgumentsChecked(argument_check.ERROR, why=f"it took longer than {timeout:.0f} s")
        if not result.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            return ArgumentsChecked(argument_check.ERROR, why=tail[0])
        outcome = argument_check.read_result(str(result))
        return ArgumentsChecked(outcome["status"], tuple(outcome.get("results") or ()), outcome.get("why", ""))
    finally:
        shutil.rmtree(folder, ignore_errors=True)

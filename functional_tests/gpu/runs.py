"""The check's runs: `vdk run --full` of an example on the GPU, and a case's two verdicts, the smoke check's
(smoke_verdict.py, on the CPUs) and the real GPU's (cut_rank.py, in a copy of what the job's image holds, one
rank, the job's GPUs if it asks for any, none if it asks for none).

Every run is a process of its own with a timeout; what it printed last is kept for the report when it fails.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functional_tests.gpu import agreement
from functional_tests.gpu.cases import ROOT
from functional_tests.gpu.cases import Case

CUT_RANK = Path(__file__).with_name("cut_rank.py")
_PASSED = re.compile(r"full run PASSED in ([\d.]+) s")
_FAILED = re.compile(r"full run FAILED after ([\d.]+) s: (.*)")
_RANK = re.compile(r"^\s+rank (\d+): (\d+) steps?(?:, last loss (\S+?))?,", re.M)
_RATE = re.compile(r"([\d.]+) steps/s")
_NOTE = re.compile(r"^\s+note: (.*)$", re.M)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the plugin's own settings (the check sets those it means)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def vdk_command() -> list[str]:
    """`vdk` as this environment has it: next to the interpreter (a venv), else its entry point."""
    beside = Path(sys.executable).with_name("vdk")
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-c", "import sys; from vdk.internal.cli_entry import main; sys.exit(main())"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(command: list[str], timeout: float, **kwargs: Any) -> tuple[int | None, str]:
    """(exit code or None when it ran out of time, stdout and stderr together)."""
    try:
        done = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kwargs
        )
        return done.returncode, done.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# --- vdk run --full of an example ---------------------------------------------------------------------------


@dataclass
class FullRun:
    example: str
    passed: bool
    seconds: float | None = None
    steps: int | None = None
    last_loss: float | None = None
    steps_per_s: float | None = None
    layout: str = ""  # what the run said of its processes on this machine (world size 1 where distributed)
    gpu: dict | None = None  # the GPU sampler's totals
    error: str = ""
    output_tail: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def full_run(job: Path, name: str, runs_dir: Path, timeout: float) -> FullRun:
    """`vdk run --full JOB` on this machine's GPU, progress lines every 2 s."""
    env = clean_env({"VDK_ML_TRAINING_PROGRESS_SECONDS": "2", "VDK_ML_TRAINING_RUNS_DIR": str(runs_dir)})
    code, out = _run([*vdk_command(), "run", "--full", str(job)], timeout, env=env)
    from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_lines

    passed = _PASSED.search(out)
    failed = _FAILED.search(out)
    ranks = _RANK.findall(out)
    rates = _RATE.findall(out)
    gpu = parse_gpu_lines(out.splitlines()).get("0")
    notes = [n for n in _NOTE.findall(out) if "GPU" in n or "node" in n or "process" in n]
    loss = ranks[0][2] if ranks else None
    return FullRun(
        example=name,
        passed=code == 0 and passed is not None,
        seconds=float(passed.group(1)) if passed else (float(failed.group(1)) if failed else None),
        steps=int(ranks[0][1]) if ranks else None,
        last_loss=float(loss) if loss and _is_number(loss) else None,
        steps_per_s=float(rates[-1]) if rates else None,
        layout="; ".join(notes) or "as configured",
        gpu=gpu.to_dict() if gpu is not None else None,
        error=""
        if code == 0
        else ("ran out of time" if code is None else (failed.group(2) if failed else f"exit {code}")),
        output_tail="" if code == 0 else _tail(out),
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


# --- a case's two verdicts ---------------------------------------------------------------------------------


def smoke_verdict(job: Path, work: Path, timeout: float) -> agreement.Verdict:
    """The smoke check of `job` (smoke_verdict.py), its run directory under `work`."""
    work.mkdir(parents=True, exist_ok=True)
    result = work / "smoke.json"
    env = clean_env({"VDK_ML_TRAINING_RUNS_DIR": str(work / "runs")})
    command = [sys.executable, "-m", "functional_tests.gpu.smoke_verdict", str(job), str(result)]
    code, out = _run(command, timeout, env=env, cwd=ROOT)
    if code is None:
        return agreement.Verdict(None, note=f"the smoke check ran out of its {timeout:.0f} s")
    if not result.exists():
        return agreement.Verdict(None, note=f"smoke_verdict exited {code} without a verdict: {_tail(out, 1)}")
    return agreement.Verdict.from_dict(json.loads(result.read_text()))


def gpu_needed(job: Path) -> int:
    from vdk.plugin.ml_training.job import load_job_spec

    return load_job_spec(job).gpus_per_node.devices


def gpu_verdict(case: Case, job: Path, work: Path, timeout: float) -> tuple[agreement.Verdict, dict]:
    """The job's script cut to the smoke run's steps (cut_rank.py), one rank, in a copy of the image's files;
    the GPU if the job asks for one, none if it asks for none. Returns the verdict and what cut_rank recorded."""
    from vdk.plugin.ml_training.job import load_job_spec
    from vdk.plugin.ml_training.local import workdir

    spec = load_job_spec(job)
    place = workdir.prepare(job, work / "gpu-work", protected=False).path
    result = work / "gpu.json"
    args = list(spec.smoke_args if spec.smoke_args is not None else spec.args)
    hidden = ",".join(case.hide) or "-"
    epoch_end = "1" if spec.smoke_epoch_end else "0"
    command = [sys.executable, str(CUT_RANK), str(result), str(spec.smoke_steps), epoch_end, hidden, "--"]
    command += [*spec.entrypoint.argv(), *args]
    env = clean_env(
        {
            **dict(spec.env),
            "CUDA_VISIBLE_DEVICES": "0" if spec.gpus_per_node.devices else "",
            "RANK": "0",
            "LOCAL_RANK": "0",
            "GROUP_RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    started = time.monotonic()
    code, out = _run(command, timeout, env=env, cwd=place)
    seconds = round(time.monotonic() - started, 2)
    if code is None:
        return agreement.Verdict(None, seconds=seconds, note=f"the GPU run ran out of its {timeout:.0f} s"), {}
    if not result.exists():
        return agreement.Verdict(None, seconds=seconds, note=f"no result (exit {code}): {_tail(out, 1)}"), {}
    record = json.loads(result.read_text())
    record["output_tail"] = _tail(out, 15) if record["status"] == "failed" else ""
    passed = record["status"] in ("stopped", "finished")
    note = "" if record.get("cuda_used") or not spec.gpus_per_node.devices else "the script did not use the GPU"
    verdict = agreement.Verdict(
        passed,
        where=record.get("where"),
        error=record.get("error", ""),
        seconds=seconds,
        steps=record.get("steps"),
        note=note,
    )
    return verdict, record

"""A local run's directory as a real run leaves it (the ranks' result files, stack dumps, torchrun's log),
without running anything: the input of the tests that read a local run's outcome (local/outcome.py) and
diagnose it (diagnosis/)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.local.launcher import LocalRun
from vdk.plugin.ml_training.runtime import protocol


def make_run(
    tmp_path: Path, ranks: dict[int, dict], agent_log: str = "", exit_code: int = 1, timed_out=False
) -> LocalRun:
    job = write_job(tmp_path, "job", ml="nodes = 2\nsmoke_steps = 2\n", files={"train.py": "print()\n"})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for rank, record in ranks.items():
        stack = record.pop("stack", None)
        if stack is not None:
            protocol.stack_path(run_dir, rank).write_text(stack)
        protocol.result_path(run_dir, rank).write_text(json.dumps({"rank": rank, "pid": 100 + rank, **record}))
    (run_dir / "agent.log").write_text(agent_log)
    return LocalRun(smoke_plan(load_job_spec(job)), run_dir, exit_code, 3.0, timed_out)


def missing_module(module: str) -> dict:
    return {
        "status": "failed",
        "ended_at": 1.0,
        "error": {
            "type": "ModuleNotFoundError",
            "message": f"ModuleNotFoundError: No module named '{module}'",
            "traceback": f"Traceback ...\nModuleNotFoundError: No module named '{module}'\n",
        },
    }

"""`vdk deploy --if-changed` run twice at once (a CI retry next to a schedule, two people): the real vdk CLI in
two processes, a real registry, the fake API server (which serves Leases as the real one does). One run starts;
the other waits for the job's lease, reads the runs again, finds that run pending with the same code and starts
nothing (exit 0, saying which run). Run again while that run is pending, it starts nothing either; nothing of
the lease is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin

pytestmark = pytest.mark.usefixtures("isolated_environment")
VDK = Path(sys.executable).with_name("vdk")
TRAIN = "if __name__ == '__main__':\n    print('training')\n"


def deploy(job: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(VDK), "deploy", "-p", str(job), "--if-changed", "--skip-smoke", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def test_two_if_changed_at_once_start_one_run(tmp_path, cluster, registry, base_image, monkeypatch):
    fake, _ = cluster(pytorchjob=True)
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = write_job(
        tmp_path,
        "twice",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\ngpus_per_node = 0\n",
        files={"train.py": TRAIN},
    )
    fake.slow("POST", "pytorchjobs", 2.0)  # the first to create holds the lease a while: the other must wait
    first, second = deploy(job), deploy(job)
    results = [(p, *p.communicate(timeout=300)) for p in (first, second)]
    for process, _, err in results:
        assert process.returncode == 0, err
    answers = [json.loads(out) for _, out, _ in results]
    started = [a for a in answers if a["started"]]
    assert len(started) == 1, answers
    (run,) = [o["metadata"]["name"] for o in fake.stored("pytorchjobs")]
    assert started[0]["run"] == run
    (skipped,) = [a for a in answers if not a["started"]]
    assert (
        skipped["active_run"] == run and skipped["reason"] == f"run {run} (Pending) is the same and has not ended yet"
    )
    assert fake.stored("leases") == []  # each gave it back
    assert fake.requests_to("POST", "/leases") + fake.requests_to("PUT", "/leases/twice-deploy") >= 2

    again = CliEntryBasedTestRunner(plugin).invoke(["deploy", "-p", str(job), "--if-changed", "--skip-smoke"])
    assert again.exit_code == 0, again.output
    assert f"Run {run} of twice (namespace ml) is the same and has not ended yet (Pending)" in again.stdout
    assert len(fake.stored("pytorchjobs")) == 1 and fake.stored("leases") == []

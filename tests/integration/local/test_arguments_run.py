"""A sweep's argument check at sizes the config accepts (local/arguments_run.py, runtime/argument_check.py): the
trials' argument lists reach the script through a file, so lists that would overflow an environment variable or a
command line (the kernel's 128 KiB a string) are all checked, and the forks that parse them run a bounded number at
a time. A tiny argparse script stands in for a training script: what is measured is the check, not torch."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.arguments_run import check_arguments
from vdk.plugin.ml_training.runtime import argument_check

pytestmark = pytest.mark.usefixtures("isolated_environment")

SCRIPT = """
import argparse, os, sys, time

def slot(text):
    # each parse marks itself present while it runs, and writes how many it saw at once
    folder = os.environ["BUSY_DIR"]
    mine = os.path.join(folder, str(os.getpid()))
    open(mine, "w").close()
    time.sleep(0.002)
    seen = len(os.listdir(folder))
    os.unlink(mine)
    with open(os.path.join(os.environ["SEEN_DIR"], str(os.getpid())), "w") as f:
        f.write(str(seen))
    return text

parser = argparse.ArgumentParser()
parser.add_argument("--note", type=slot, required=True)
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
print("training would start here")
"""


def test_thirteen_hundred_trials_of_long_arguments_are_each_checked_a_bounded_number_at_a_time(tmp_path):
    busy, seen = tmp_path / "busy", tmp_path / "seen"
    busy.mkdir()
    seen.mkdir()
    job = write_job(tmp_path, "many", ml={"args": "--lr 1", "gpus_per_node": "0"}, files={"train.py": SCRIPT})
    spec = load_job_spec(job)
    note = "x" * 90  # 1300 lists of ~110 bytes: 143 KB, beyond what one environment variable may hold
    lists = [["--note", note, "--lr", str(i)] for i in range(1300)]
    lists[1234] = ["--note", note, "--lr", "fast"]  # the one the script refuses
    checked = check_arguments(spec, lists, {"BUSY_DIR": str(busy), "SEEN_DIR": str(seen)})
    assert checked.status == argument_check.PARSED, checked.why
    assert [r["index"] for r in checked.results] == list(range(1300))
    refused = [r for r in checked.results if not r["accepted"]]
    assert [r["index"] for r in refused] == [1234]
    assert "invalid float value: 'fast'" in refused[0]["message"]
    counts = [int(p.read_text()) for p in seen.iterdir()]
    assert len(counts) == 1300  # the first list's own parse counts too: the script parses once, then forks
    assert 1 <= max(counts) <= argument_check.CHILDREN

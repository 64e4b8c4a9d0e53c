"""README stays true: the job-format table lists exactly the keys the parser accepts, and the
set-up commands are the ones CI runs."""

import re
from pathlib import Path

from vdk.plugin.ml_training.job import KEYS
from vdk.plugin.ml_training.job.settings import CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_job_format_table_matches_the_parser():
    section = README.split("## The job format")[1].split("\n## ")[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    vdk_keys = {k for k in documented if k.startswith("ml_training_")}
    assert set(documented) - vdk_keys == set(KEYS)
    assert vdk_keys == set(CONFIG_KEYS)


def test_setup_commands_are_what_ci_runs():
    assert "make demo" in README and "make test" in README
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.M)

"""The environments of their own that `uv run --with` makes for the data tools and the viewers (ops/data_tools.uv_run)
find their packages as the job's installs find theirs (dependencies/uv_install.py): the job's `index_strategy` over
two package indexes, and a uv.toml in the job's directory although the command runs elsewhere. Real uv, local
indexes made here; the environment is the data tools' (data_tools.environment)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.wheels import make_wheel
from tests.support.wheels import simple_index
from tests.support.wheels import two_indexes
from vdk.plugin.ml_training.ops import data_tools
from vdk.plugin.ml_training.ops.viewers import ViewerKind

VERSION = ["python", "-c", "import timmy; print(timmy.__version__)"]


pytestmark = pytest.mark.usefixtures("only_named_indexes")


def version_with(argv: list[str], cwd) -> str:
    done = subprocess.run(argv, cwd=cwd, env=data_tools.environment({}), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_job_s_index_strategy_chooses_between_two_indexes_as_for_its_installs(tmp_path, monkeypatch):
    for name, url in two_indexes(tmp_path, "timmy", "1.0", "2.0", "index-url").items():
        monkeypatch.setenv(name, url)  # pip's, handed to uv as the installs get them
    job = tmp_path / "job"
    job.mkdir()
    # best-match (the default, pip's way): the newest of both; first-index: the extra index, which uv asks first
    assert version_with([*data_tools.uv_run(["timmy"], "best-match", job), *VERSION], tmp_path) == "2.0"
    assert version_with([*data_tools.uv_run(["timmy"], "first-index", job), *VERSION], tmp_path) == "1.0"
    # the viewers' and the data command's environments are made by the same uv arguments
    viewer = ViewerKind("timmy's viewer", ("timmy",), "timmy-viewer", "/").command(["--port", "1"], "first-index", job)
    assert viewer == [*data_tools.uv_run(["timmy"], "first-index", job), "timmy-viewer", "--port", "1"]
    tools = data_tools.command({"s3"}, ["resolve"], "first-index", job)
    assert tools[: tools.index("--with")] == data_tools.uv_run([], "first-index", job)


def test_a_uv_toml_in_the_job_s_directory_is_read_wherever_the_command_runs(tmp_path):
    one = simple_index(tmp_path / "one", [make_wheel(tmp_path / "one-files", "timmy", "1.0")])
    two = simple_index(tmp_path / "two", [make_wheel(tmp_path / "two-files", "timmy", "3.0")])
    job, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    job.mkdir()
    elsewhere.mkdir()
    (elsewhere / "uv.toml").write_text(f"[[index]]\nurl = '{one}'\ndefault = true\n")
    (job / "uv.toml").write_text(f"[[index]]\nurl = '{two}'\ndefault = true\n")
    assert version_with([*data_tools.uv_run(["timmy"], "best-match", job), *VERSION], elsewhere) == "3.0"
    assert version_with([*data_tools.uv_run(["timmy"], "best-match"), *VERSION], elsewhere) == "1.0"  # no job

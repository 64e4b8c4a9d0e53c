"""Linking a job directory into a run's output directory (runtime/output_workdir.py) without a process:
ranks that link at once into the same directory, and the outputs of an earlier attempt, are kept; only
those outputs are listed. (The bootstrap working there: tests/integration/runtime/test_output_workdir_bootstrap.py.)"""

from __future__ import annotations

from tests.support.tutorial_job import tutorial_job
from vdk.plugin.ml_training.runtime import output_workdir


def test_ranks_that_link_at_once_and_outputs_of_an_earlier_attempt_are_kept(tmp_path):
    job = tutorial_job(tmp_path)
    outputs = tmp_path / "run"
    outputs.mkdir()
    (outputs / "helper.py").write_text("# written by the run: an output, not replaced by the link\n")
    output_workdir.link_tree(str(job), str(outputs))
    output_workdir.link_tree(str(job), str(outputs))  # another rank, the same directory
    assert (outputs / "helper.py").read_text().startswith("# written by the run")
    assert (outputs / "train.py").is_symlink() and (outputs / "data" / "words.txt").is_symlink()
    assert [path for path, _, _ in output_workdir.output_files(str(outputs))] == ["helper.py"]

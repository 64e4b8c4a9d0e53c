"""The import check as `vdk run` and `vdk deploy` use it (ops/imports.py): what `base_provides` names counts before
the base image was ever read (it said torch's origin was "not known yet" and to set the key that was set), and what
may come from an unread base is a note's text, which the caller prefixes once (a sweep printed `note: note:`)."""

from __future__ import annotations

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops.imports import check_job_imports
from vdk.plugin.ml_training.ops.smoke_gaps import check_gaps

TRAIN = "import torch\nimport numpy\n"


def spec_of(tmp_path, **ml):
    return load_job_spec(write_job(tmp_path, ml={"gpus_per_node": "0", **ml}, files={"train.py": TRAIN}))


def test_what_base_provides_names_is_not_noted_as_unknown_before_the_base_is_read(tmp_path):
    notes = check_job_imports(spec_of(tmp_path / "a", base_provides="torch"), None)  # None: the base never read
    assert len(notes) == 1 and notes[0].startswith("train.py:2: `import numpy` needs numpy")
    assert not any("torch" in note.split(";")[0] for note in notes)
    assert check_job_imports(spec_of(tmp_path / "b", base_provides="torch, numpy"), None) == []


def test_a_note_of_the_import_check_is_not_prefixed_by_it(tmp_path):
    (note, *_) = check_job_imports(spec_of(tmp_path), None)
    assert not note.startswith("note:")
    assert "must come from the base image" in note and "whose packages are not known yet" in note


def test_the_smoke_gaps_count_base_provides_before_the_base_is_read(tmp_path):
    spec = spec_of(tmp_path, base_provides="wandb")
    gaps = check_gaps(spec, {"report_to=wandb": "wandb"}, None, "run it again")
    assert gaps.lines == ["report_to=wandb: turned off here; wandb, which the cluster run imports, is in the image"]

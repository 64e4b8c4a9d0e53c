"""What the smoke run turned off (ops/smoke_gaps.py): each module the cluster run imports for it checked against
the image (requirements.txt, the base), the rest named as not checked."""

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops.smoke_gaps import check_gaps

AGAIN = "run it again"


def spec_with(tmp_path, requirements: str | None = None, **ml):
    files = {"train.py": "", **({"requirements.txt": requirements} if requirements is not None else {})}
    return load_job_spec(write_job(tmp_path, ml={"gpus_per_node": "0", **ml}, files=files))


def test_nothing_turned_off_says_nothing(tmp_path):
    gaps = check_gaps(spec_with(tmp_path), {}, (), AGAIN)
    assert gaps.lines == [] and gaps.finding is None


def test_an_integration_the_image_lacks_fails_with_the_fix(tmp_path):
    spec = spec_with(tmp_path, "torch\n")
    gaps = check_gaps(spec, {"report_to=mlflow": "mlflow", "push_to_hub": None}, ("torch",), AGAIN)
    assert gaps.finding is not None
    assert gaps.finding.what.startswith("the job asks for report_to=mlflow (for which the Trainer imports mlflow)")
    assert f"add `mlflow` to {spec.job_dir / 'requirements.txt'}" in gaps.finding.fix
    assert gaps.finding.fix.endswith(f"Then {AGAIN}")
    assert gaps.lines == [
        "not checked here, the cluster run does it: pushing to the Hugging Face Hub (its token and network)"
    ]


def test_an_integration_listed_or_in_the_base_passes_and_says_so(tmp_path):
    listed = check_gaps(spec_with(tmp_path / "a", "torch\nwandb==0.19\n"), {"report_to=wandb": "wandb"}, (), AGAIN)
    assert listed.finding is None
    assert listed.lines == ["report_to=wandb: turned off here; wandb, which the cluster run imports, is in the image"]
    in_base = check_gaps(spec_with(tmp_path / "b"), {"report_to=tensorboard": "tensorboard"}, ("tensorboard",), AGAIN)
    assert in_base.finding is None


def test_a_base_never_read_makes_it_a_note_and_import_check_false_leaves_it_unchecked(tmp_path):
    unknown = check_gaps(spec_with(tmp_path / "a"), {"report_to=wandb": "wandb"}, None, AGAIN)
    assert unknown.finding is None
    assert "wandb is not in requirements.txt, so it must come from the base image" in unknown.lines[0]
    off = check_gaps(spec_with(tmp_path / "b", import_check="false"), {"report_to=wandb": "wandb"}, (), AGAIN)
    assert off.finding is None and off.lines == ["report_to=wandb: turned off here; not checked (import_check = false)"]

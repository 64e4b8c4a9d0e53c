"""The changes between two runs' records: code files added, changed and removed, requirements (the installed versions),
config keys (not where it runs), the base image's digest and each dataset's version, with the files that changed;
what a record does not say is unknown (and counts as changed), never "unchanged"."""

import dataclasses

from tests.support.jobs import write_job
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from vdk.plugin.ml_training.cli.diff_views import changes_lines
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs import record as run_record
from vdk.plugin.ml_training.ops.run_changes import RunState
from vdk.plugin.ml_training.ops.run_changes import changes_between

BASE = "registry.example.com/pytorch@sha256:"
TRAIN_V1 = DataPin(
    "data/train", "s3://vision/train", "as of 2026-01-01T00:00:00+00:00", "a" * 64, True, "2026-01-01T00:00:00+00:00",
    2, 20, objects={"cat.jpg": "e1 v1", "dog.jpg": "e2 v1"},
)  # fmt: skip
TRAIN_V2 = dataclasses.replace(
    TRAIN_V1, fingerprint="b" * 64, objects={"cat.jpg": "e3 v2", "dog.jpg": "e2 v1", "owl.jpg": "e4 v1"}
)
CLAIM = DataPin("/data", "pvc:imagenet")


def record_of(tmp_path, name, ml, data, code, dependencies, base):
    spec = load_job_spec(
        write_job(tmp_path / name, "vision", ml=ml, extra="[ml-training.mounts]\n/data = pvc:imagenet\n")
    )
    run = dataclasses.replace(
        make_run(spec, name=f"vision-{name}"),
        data=data,
        code_files=tuple(code.items()),
        dependencies=tuple(dependencies.items()),
        base_digest=base,
    )
    return run_record.parse(render_run(spec, IMAGE, run, "ml", "job")[-1])


def test_every_part_that_changed_is_named(tmp_path):
    before = record_of(
        tmp_path, "aaaaaaa1", {"nodes": "2", "registry": "r.example.com/a"}, (TRAIN_V1, CLAIM),
        {"train.py": "1" * 64, "old.py": "2" * 64, "lib.py": "3" * 64}, {"timm": "1.0.3", "numpy": "2.0.0"},
        BASE + "1" * 64,
    )  # fmt: skip
    after = record_of(
        tmp_path, "aaaaaaa2", {"nodes": "4", "registry": "r.example.com/b"}, (TRAIN_V2, CLAIM),
        {"train.py": "9" * 64, "new.py": "4" * 64, "lib.py": "3" * 64}, {"timm": "1.0.7", "pillow": "11.0"},
        BASE + "2" * 64,
    )  # fmt: skip
    manifest = {"files": 3, "bytes": 30, "sha256": "c" * 64, "partial": False}
    changes = changes_between(
        RunState.from_record(before, {"/data": manifest}), RunState.from_record(after, {"/data": manifest})
    )
    assert changes.code == {"added": ["new.py"], "changed": ["train.py"], "removed": ["old.py"]}
    assert changes.requirements == {
        "added": {"pillow": "11.0"},
        "removed": {"numpy": "2.0.0"},
        "changed": {"timm": ["1.0.3", "1.0.7"]},
    }
    assert changes.config == {"nodes": ["2", "4"]}  # the registry is where it runs, not what it trains
    assert changes.base == [BASE + "1" * 64, BASE + "2" * 64]
    train, claim = sorted(changes.data, key=lambda d: d.target, reverse=True)
    assert (train.same, train.changed, train.added, train.removed) == (False, ["cat.jpg"], ["owl.jpg"], [])
    assert claim.same is True  # the same manifest reported by both runs' pods
    assert changes.changed_parts == ["code", "requirements", "config", "base", "data"] and changes.unknown == []
    text = "\n".join(changes_lines(changes))
    assert "1 added: new.py; 1 changed: train.py; 1 removed: old.py" in text
    assert "timm 1.0.3 -> 1.0.7; added pillow 11.0; removed numpy 2.0.0" in text
    assert "nodes: 2 -> 4" in text and "files 1 changed: cat.jpg; 1 added: owl.jpg" in text


def test_two_runs_of_the_same_everything_do_not_differ(tmp_path):
    code, dependencies = {"train.py": "1" * 64}, {"timm": "1.0.3"}
    same = dict(data=(TRAIN_V1, CLAIM), code=code, dependencies=dependencies, base=BASE + "1" * 64)
    before = record_of(tmp_path, "bbbbbbb1", {}, **same)
    after = record_of(tmp_path, "bbbbbbb2", {}, **same)
    reported = {"/data": {"files": 3, "bytes": 30, "sha256": "c" * 64, "partial": False}}
    changes = changes_between(RunState.from_record(before, reported), RunState.from_record(after, reported))
    assert not changes.changed and changes.changed_parts == []
    text = changes_lines(changes)
    assert "/data (pvc:imagenet): unchanged, not versioned; manifest cccccccccccc" in text[0]
    assert "data/train (s3://vision/train): unchanged" in text[1]
    assert text[-1].strip().startswith("nothing changed")


def test_what_a_record_does_not_say_is_unknown_and_counts_as_a_change(tmp_path):
    older = record_of(tmp_path, "ccccccc1", {}, (), {}, {}, None)
    configmap = render_run(
        load_job_spec(write_job(tmp_path / "old", "vision", extra="[ml-training.mounts]\n/data = pvc:imagenet\n")),
        IMAGE,
        make_run(load_job_spec(write_job(tmp_path / "old2", "vision")), name="vision-ccccccc0"),
        "ml",
        "job",
    )[-1]
    for key in (run_record.KEY_DATA, run_record.KEY_CODE, run_record.KEY_BASE):
        configmap["data"].pop(key, None)
    pre_pins = run_record.parse(configmap)  # a record of an earlier version
    newer = record_of(tmp_path, "ccccccc2", {}, (TRAIN_V1, CLAIM), {"train.py": "1" * 64}, {}, BASE + "1" * 64)
    changes = changes_between(RunState.from_record(pre_pins), RunState.from_record(newer))
    assert changes.code is None and changes.changed
    assert any(u.startswith("code: run vision-ccccccc0 has no manifest") for u in changes.unknown)
    assert any(u.startswith("base image: run vision-ccccccc0 does not record its digest") for u in changes.unknown)
    claim = next(d for d in changes.data if d.target == "/data")
    assert claim.same is None  # a claim without manifests: not versioned, unknown
    assert any("pvc:imagenet is not versioned" in u for u in changes.unknown)
    assert older.code is None  # an empty manifest is not recorded: unknown, not "no files"

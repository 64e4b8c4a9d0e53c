"""A Hub sample is put in place while another smoke run of the same data may read it (two terminals, two test
workers): none of the files it reads goes missing while the new sample is published beside it."""

from __future__ import annotations

import os

from vdk.plugin.ml_training.datafetch import hf_source


def staged(tmp_path, files: dict[str, bytes]):
    staging = tmp_path / "sample.hub"
    for name, data in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_bytes(data)
    return staging


def test_a_sample_published_again_never_takes_a_file_from_a_run_that_reads_it(tmp_path, monkeypatch):
    staging = staged(tmp_path, {"a.txt": b"a", "train/b.txt": b"b", "old.txt": b"o"})
    dest = tmp_path / "sample"
    hf_source.publish(staging, dest, ["a.txt", "train/b.txt", "old.txt"])  # the first run's sample
    seen = []
    real_link = os.link

    def reader_looks(source, target, *args, **kwargs):  # the first run reads its files while the next publishes
        seen.append(sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()))
        return real_link(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "link", reader_looks)
    hf_source.publish(staging, dest, ["a.txt", "train/b.txt"])  # the next run's: old.txt left out
    assert seen and all({"a.txt", "train/b.txt"} <= set(files) for files in seen)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == ["a.txt", "train/b.txt"]
    assert (dest / "train" / "b.txt").read_bytes() == b"b"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".vdk-part")] == []  # nothing left beside it

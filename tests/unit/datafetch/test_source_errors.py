"""The data sources' one error: a dataset whose every file is too big for a smoke run's sample says the cap and the
smallest file in human units, and the least smoke_sample_size that takes it, as config.ini writes a quantity."""

from __future__ import annotations

from vdk.plugin.ml_training.datafetch.source_errors import too_big_to_sample


def test_a_sample_too_small_for_every_file_names_the_smallest_and_the_setting_that_takes_it():
    error = too_big_to_sample("data/train", "hf://datasets/org/big", "file", "part-0.parquet", 1_500_000, 2**20)
    assert error.problem == (
        "every file of hf://datasets/org/big is larger than a smoke run's sample may be (1.0 MB, smoke_sample_size): "
        "the smallest, part-0.parquet, is 1.5 MB"
    )
    assert "(`smoke_sample_size = 2Mi`)" in error.fix and "`smoke_data = data/train=PATH`" in error.fix
    assert "`smoke_sample_size = 64Mi`" in too_big_to_sample("t", "s", "object", "k", 64 * 2**20, 1).fix
    assert "`smoke_sample_size = 5Gi`" in too_big_to_sample("t", "s", "object", "k", 4097 * 2**20, 1).fix

"""Sizes and counts as every message writes them: powers of 1000 with one decimal, never raw bytes nor `0.00 MB`
for a few kilobytes; a count agrees with its noun."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import plural
from vdk.plugin.ml_training.vocabulary.human_units import size_text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (4500, "4.5 KB"),  # the code of a small job: not `0.00 MB`
        (67108864, "67.1 MB"),  # 64Mi: not `67108864 bytes`
        (999_960, "1.0 MB"),  # rounds up into the next unit, not `1000.0 KB`
        (1_234_567_890, "1.2 GB"),
        (2 * 10**12, "2.0 TB"),
        (5 * 10**18, "5000.0 PB"),
        (-3, "0 B"),
    ],
)
def test_sizes_are_written_in_the_unit_that_reads(n, text):
    assert size_text(n) == text


def test_counts_agree_with_their_noun():
    assert counted(1, "package") == "1 package"
    assert counted(2, "package") == "2 packages"
    assert counted(0, "file") == "0 files"
    assert counted(1, "process") == "1 process" and counted(3, "process") == "3 processes"
    assert counted(2, "entry") == "2 entries" and counted(2, "day") == "2 days"
    assert counted(2, "child", "children") == "2 children"
    assert plural("patch") == "patches" and plural("box") == "boxes"

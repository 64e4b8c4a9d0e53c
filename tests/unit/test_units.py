"""Kubernetes quantities and durations (units.py): what they parse to, the shortest exact text they format to, and
that formatting and parsing again give the same value."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vdk.plugin.ml_training.units import format_bytes
from vdk.plugin.ml_training.units import format_duration
from vdk.plugin.ml_training.units import parse_duration
from vdk.plugin.ml_training.units import parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16Gi", Decimal(16 * 2**30)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        (".5Ki", Decimal(512)),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        (" 4M ", Decimal(4 * 10**6)),
        ("+1Ei", Decimal(2**60)),
    ],
)
def test_a_quantity_is_read_as_kubernetes_reads_it(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "16GB", "Gi", "1.2.3", "16 Gi", "ten", "1e", "--1"])
def test_a_malformed_quantity_is_a_value_error(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_a_quantity_too_large_to_compute_is_a_value_error():
    with pytest.raises(ValueError):
        parse_quantity("1e999999999999")


@pytest.mark.parametrize(
    ("value", "text"),
    [(8 * 2**30, "8Gi"), (1536 * 2**20, "1536Mi"), (2**60, "1Ei"), (1000, "1000"), (0, "0"), (Decimal("1.2"), "2")],
)
def test_bytes_take_the_largest_exact_binary_suffix(value, text):
    assert format_bytes(Decimal(value)) == text


@given(st.integers(min_value=0, max_value=2**70))
def test_formatted_bytes_read_back_as_the_same_count(count):
    assert parse_quantity(format_bytes(Decimal(count))) == count


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("1w", 604800), ("1h30m", 5400)],
)
def test_a_duration_is_read_in_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "1x", "1h 30m", "-5", "1.5h", "h1"])
def test_a_malformed_duration_is_a_value_error(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (90, "1m30s"), (604800, "7d"), (90061, "1d1h1m1s")])
def test_a_duration_is_written_compactly(seconds, text):
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**9))
def test_a_formatted_duration_reads_back_as_the_same_seconds(seconds):
    assert parse_duration(format_duration(seconds)) == seconds

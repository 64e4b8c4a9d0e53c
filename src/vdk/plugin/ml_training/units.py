"""Kubernetes resource quantities and human durations: parsing and formatting, nothing else."""

from __future__ import annotations

import re
from decimal import Decimal
from decimal import DecimalException

# The pattern Kubernetes itself enforces on resource quantities (as in the CRD schemas).
QUANTITY_PATTERN = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity ("16Gi" -> 17179869184). ValueError if malformed."""
    text = text.strip()
    if not QUANTITY_PATTERN.match(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number = re.match(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)", text)
    assert number is not None  # guaranteed by QUANTITY_PATTERN
    suffix = text[number.end() :]
    try:
        value = Decimal(number.group(0))
        if suffix in _BINARY:
            return value * _BINARY[suffix]
        if suffix in _DECIMAL:
            return value * _DECIMAL[suffix]
        return value * Decimal(10) ** Decimal(suffix[1:])
    except (DecimalException, OverflowError) as e:  # InvalidOperation, and Overflow of an exponent too large
        raise ValueError(f"{text!r} is not a usable quantity") from e


def format_bytes(value: Decimal) -> str:
    """The shortest exact binary quantity for a byte count (8589934592 -> "8Gi")."""
    whole = int(value.to_integral_value(rounding="ROUND_CEILING"))
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if whole and whole % _BINARY[suffix] == 0:
            return f"{whole // _BINARY[suffix]}{suffix}"
    return str(whole)


_DURATION_PART = re.compile(r"(\d+)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> int:
    """Seconds in "90", "90s", "30m", "12h", "7d", "1w", "1h30m". ValueError if malformed."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    parts = _DURATION_PART.findall(text)
    if not text or not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration")
    return sum(int(n) * _SECONDS[u] for n, u in parts)


def format_duration(seconds: int) -> str:
    """A compact duration: 90 -> "1m30s", 604800 -> "7d"."""
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)

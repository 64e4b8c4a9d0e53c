"""Every `type: ignore` and every `noqa` of src/ says why. mypy and ruff (`make lint`) check the rest: that each
names its code (ignore-without-code; a `noqa` always does) and still silences something (warn_unused_ignores,
RUF100)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(.*)$")
NOQA = re.compile(r"#\s*noqa(:\s*[A-Z]+[0-9]+(?:,\s*[A-Z]+[0-9]+)*)?(.*)$")


def unexplained(lines: list[str]) -> list[int]:
    """The line numbers (1-based) of the ignores among `lines` that do not say why."""
    found = []
    for number, line in enumerate(lines, start=1):
        match = IGNORE.search(line)
        if match is None:
            continue
        reason_beside = re.match(r"\s+#\s*\S", match.group(2))
        above = lines[number - 2].strip() if number > 1 else ""
        # above it: a comment line; a decorator with a comment line above it; an ignore explained so (one
        # comment for a run of them)
        explained_above = above.startswith("#") or _commented_above(lines, number - 2)
        run_above = number > 1 and IGNORE.search(above) is not None and number - 1 not in found
        if not reason_beside and not explained_above and not run_above:
            found.append(number)
    return found


def _commented_above(lines: list[str], index: int) -> bool:
    """A decorator line (`@property`) with a comment line just above it."""
    return index >= 1 and lines[index].strip().startswith("@") and lines[index - 1].strip().startswith("#")


def test_every_type_ignore_says_why():
    bare = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        bare += [f"{path.relative_to(SRC)}:{number}" for number in unexplained(lines)]
    assert bare == [], "say why beside each (`# type: ignore[code]  # why`) or on the comment line above it"


def unexplained_noqa(lines: list[str]) -> list[int]:
    """The line numbers (1-based) of the `noqa`s that do not say why beside them (`# noqa: BLE001 - why`)."""
    return [
        number
        for number, line in enumerate(lines, start=1)
        if (match := NOQA.search(line)) is not None and not re.match(r"\s*-\s*\S", match.group(2))
    ]


def test_every_noqa_says_why():
    bare = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        bare += [f"{path.relative_to(SRC)}:{number}" for number in unexplained_noqa(lines)]
    assert bare == [], "say why beside each: `# noqa: BLE001 - why`"


def test_a_noqa_with_its_reason_counts_and_one_without_does_not():
    lines = [
        "except Exception:  # noqa: BLE001 - reporting must never break training",
        "except Exception:  # noqa: BLE001",
        "except Exception:  # noqa",
    ]
    assert unexplained_noqa(lines) == [2, 3]


def test_a_reason_beside_or_above_counts_and_none_does_not():
    lines = [
        "x.mark = True  # type: ignore[attr-defined]  # a function's own attribute",
        "# patched for the rest of the process",
        "Parser.parse = parse  # type: ignore[method-assign]",
        "Parser.parse_args = parse_args  # type: ignore[method-assign]",
        "# TextIOBase declares it an attribute",
        "@property",
        "def encoding(self) -> str:  # type: ignore[override]",
        "    return self._stream.encoding",
        "y = f()  # type: ignore[arg-type]",
        "z = g()  # type: ignore",
        "w = h()  # type: ignore[misc]",
    ]
    assert unexplained(lines) == [9, 10, 11]

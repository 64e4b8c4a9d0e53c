"""Sizes and counts are written one way (vocabulary/human_units.py): no message of src/ divides bytes by hand into a
unit (`{n / 1e6:.2f} MB` wrote `0.00 MB` for 4.5 KB) or writes a count as `N thing(s)` (`1 package(s)`). Docstrings
and comments are prose, not messages."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3] / "src" / "vdk" / "plugin" / "ml_training"
HOME = "vocabulary/human_units.py"
_PLURAL_IN_PARENS = re.compile(r"[a-z]\((?:s|es|ies)\)")
_SCALES = {1e3, 1e6, 1e9, 1e12, 1024, 2**20, 2**30}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def slips(source: str) -> list[tuple[int, str]]:
    """(line, what) of each count written `thing(s)` and each size divided by hand inside an f-string."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            match = _PLURAL_IN_PARENS.search(node.value)
            if match:
                found.append((node.lineno, f"a count as {match.group(0)!r}: use counted()"))
        if isinstance(node, ast.FormattedValue):
            value = node.value
            if (
                isinstance(value, ast.BinOp)
                and isinstance(value.op, (ast.Div, ast.FloorDiv))
                and isinstance(value.right, ast.Constant)
                and value.right.value in _SCALES
            ):
                found.append((node.lineno, "a size divided by hand: use size_text()"))
    return found


def test_no_message_writes_a_size_or_a_count_by_hand():
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative == HOME:
            continue
        hits = slips(path.read_text(encoding="utf-8"))
        if hits:
            found[relative] = hits
    assert found == {}, "write sizes with size_text() and counts with counted() (vocabulary/human_units.py)"


def test_the_guard_finds_both_slips_and_leaves_prose_alone():
    source = (
        '"""Counts the file(s)."""\n'
        "def f(n, size):\n"
        '    """Sizes in MB: {n / 1e6}."""\n'
        '    a = f"{n} package(s)"  # the file(s)\n'
        '    b = f"{size / 1e6:.2f} MB"\n'
        '    c = f"{size // 1024} KiB"\n'
        '    d = f"{n / 2} halves, (see above)"\n'
    )
    assert [line for line, _ in slips(source)] == [4, 5, 6]

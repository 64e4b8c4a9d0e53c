"""Each project-specific literal has one home (docs/architecture.md, "One home for each fact"): an environment
variable the plugin defines (`VDK_ML_TRAINING_*`), a Kubernetes label or annotation key it defines (`vdk.io/...`)
and the wire prefix (`[vdk-ml-training]`) are each written in one module, which every other imports.

A module defines a literal when its code holds it: assigned, or used inline (a part of an f-string or of a regular
expression too). Docstrings and comments are prose about a fact, not a definition of it. The environment variable of
each VDK setting is defined by the key catalogue, which derives `VDK_ML_TRAINING_<KEY>` from the key: written out
anywhere else, it is a second definition.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

from vdk.plugin.ml_training.job import keys

ROOT = Path(__file__).resolve().parents[3] / "src" / "vdk" / "plugin" / "ml_training"
LITERAL = re.compile(r"VDK_ML_TRAINING_[A-Z0-9_]*|vdk\.io/[a-z0-9][a-z0-9.-]*|\[vdk-ml-training\]")
CATALOGUE = "job/keys.py"
# Literals written in more than one module on purpose, each with why (none so far).
EXCEPTIONS: dict[str, str] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def literals(source: str) -> set[str]:
    """The project-specific literals a module's code holds (not its docstrings or comments); a regular expression's
    escapes (`\\[vdk-ml-training\\]`, `vdk\\.io/`) read as what they match."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value.replace("\\[", "[").replace("\\]", "]").replace("\\.", ".")
            found.update(LITERAL.findall(text))
    return found


def homes(sources: Mapping[str, str], derived: Mapping[str, str]) -> dict[str, set[str]]:
    """literal -> the modules that define it: those whose code holds it, and the module that derives it."""
    found: dict[str, set[str]] = {}
    for module, source in sources.items():
        for literal in literals(source):
            found.setdefault(literal, set()).add(module)
    for literal, module in derived.items():
        found.setdefault(literal, set()).add(module)
    return found


def defined_twice(sources: Mapping[str, str], derived: Mapping[str, str]) -> dict[str, list[str]]:
    return {
        literal: sorted(modules)
        for literal, modules in sorted(homes(sources, derived).items())
        if len(modules) > 1 and literal not in EXCEPTIONS
    }


def test_every_project_specific_literal_is_defined_in_one_module():
    sources = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in sorted(ROOT.rglob("*.py"))}
    derived = {key.variable: CATALOGUE for key in keys.settings()}
    assert defined_twice(sources, derived) == {}, "import each from its home instead of writing it again"


def test_the_guard_finds_a_literal_written_in_two_modules_and_not_in_prose():
    sources = {
        "runtime/home.py": '"""Reads VDK_ML_TRAINING_ALPHA."""\nALPHA = "VDK_ML_TRAINING_ALPHA"\n'
        'LABEL = "vdk.io/thing"\n',
        "k8s/again.py": 'def fix(x):\n    return f"set VDK_ML_TRAINING_ALPHA={x}"  # VDK_ML_TRAINING_BETA\n',
        "local/pattern.py": 'import re\nLINE = re.compile(r"\\[vdk-ml-training\\] x")\n'
        'KEY = re.compile(r"vdk\\.io/thing")\n',
        "local/wire.py": 'PREFIX = "[vdk-ml-training]"\n',
        "ops/prose.py": '"""Says VDK_ML_TRAINING_BETA and [vdk-ml-training] in prose only."""\n',
        "ops/setting.py": 'HINT = "set VDK_ML_TRAINING_REGISTRY"\n',
    }
    found = defined_twice(sources, {"VDK_ML_TRAINING_REGISTRY": CATALOGUE})
    assert found == {
        "VDK_ML_TRAINING_ALPHA": ["k8s/again.py", "runtime/home.py"],
        "VDK_ML_TRAINING_REGISTRY": [CATALOGUE, "ops/setting.py"],  # the catalogue derives it
        "[vdk-ml-training]": ["local/pattern.py", "local/wire.py"],  # a regular expression's escapes too
        "vdk.io/thing": ["local/pattern.py", "runtime/home.py"],
    }
    del sources["k8s/again.py"], sources["local/pattern.py"], sources["ops/setting.py"]
    assert defined_twice(sources, {"VDK_ML_TRAINING_REGISTRY": CATALOGUE}) == {}

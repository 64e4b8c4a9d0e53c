"""One name per test file: no two test files of the repository share a base name (pytest would take them, its
rootdir packages tell them apart, but a reader asked to look at `test_deploy.py` would not know which). The unit
test of a module is `tests/unit/<package>/test_<module>.py`; an integration test of the same module says what it
adds in its name (`test_client.py` and `test_client_apiserver.py`)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[3]
TREES = ("tests", "functional_tests", "benchmarks")


def shared_names(paths: list[Path]) -> dict[str, list[str]]:
    """The base names of the test files among `paths` that more than one has, with their paths."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        if path.name.startswith("test_") and path.suffix == ".py":
            by_name[path.name].append(str(path))
    return {name: sorted(found) for name, found in sorted(by_name.items()) if len(found) > 1}


def test_no_two_test_files_share_a_name():
    paths = [path.relative_to(PROJECT) for tree in TREES for path in (PROJECT / tree).rglob("test_*.py")]
    assert len(paths) > 100
    assert shared_names(paths) == {}, "name the integration test for what it adds to the unit test's name"


def test_a_shared_name_is_found_in_any_two_trees():
    paths = [
        Path("tests/unit/k8s/test_client.py"),
        Path("tests/integration/k8s/test_client.py"),
        Path("tests/integration/k8s/test_client_apiserver.py"),
        Path("functional_tests/test_deploy.py"),
        Path("tests/integration/cli/test_deploy.py"),
        Path("tests/support/registry.py"),
    ]
    assert shared_names(paths) == {
        "test_client.py": ["tests/integration/k8s/test_client.py", "tests/unit/k8s/test_client.py"],
        "test_deploy.py": ["functional_tests/test_deploy.py", "tests/integration/cli/test_deploy.py"],
    }

"""`make test` (README's test command, and CI's) stops on a lint or format error, or a broken link of the
documentation site, before any test runs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(sys.prefix)  # the environment running these tests (it has ruff)
SOURCES = ("src", "tests", "benchmarks", "functional_tests", "Makefile", "pyproject.toml", "docs", "mkdocs.yml")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make(repo: Path, *targets: str) -> subprocess.CompletedProcess:
    """`make TARGETS` in `repo` with this environment, its installation taken as done (-o install)."""
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # set when the tests themselves run under `make test`
    return subprocess.run(
        ["make", "-o", "install", "-o", "install-cs", *targets, f"VENV={VENV}"],
        cwd=repo,
        env={k: v for k, v in os.environ.items() if k not in outer},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def repo(tmp_path):
    copy = tmp_path / "repo"
    copy.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, copy / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, copy / name)
    return copy


def test_the_tree_is_lint_clean_and_formatted(repo):
    done = make(repo, "lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_lint_error_fails_make_test_before_any_test(repo):
    units = repo / "src" / "vdk" / "plugin" / "ml_training" / "units.py"
    units.write_text(units.read_text() + "\n\ndef unused():\n    import os\n")
    done = make(repo, "test")
    assert done.returncode != 0
    assert "F401" in done.stdout and "-m pytest" not in done.stdout


def test_a_format_error_fails_make_test_before_any_test(repo):
    units = repo / "src" / "vdk" / "plugin" / "ml_training" / "units.py"
    units.write_text(units.read_text() + "\n\nBADLY =    {'formatted':1}\n")
    done = make(repo, "test")
    assert done.returncode != 0
    assert "1 file would be reformatted" in done.stdout and "-m pytest" not in done.stdout


def test_the_documentation_site_builds_strict(repo):
    done = make(repo, "docs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo / "site" / "index.html").is_file()


def test_a_broken_link_fails_make_test_before_any_test(repo):
    page = repo / "docs" / "hangs.md"
    page.write_text(page.read_text() + "\nSee [the runbook](runbook.md).\n")
    done = make(repo, "test")
    assert done.returncode != 0
    assert "runbook.md" in done.stderr and "-m pytest" not in done.stdout

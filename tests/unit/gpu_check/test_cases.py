"""The agreement table's cases (functional_tests/gpu/cases.py): read from the test modules that hold the fixtures,
every planted bug of them in the table (run, or kept with the reason it is not), and every job a directory the
real loader accepts."""

from __future__ import annotations

import ast
import importlib

import pytest
from functional_tests.gpu import cases

from vdk.plugin.ml_training.job import load_job_spec

MODULES = (cases.SMOKE_CHECKS, cases.VIRTUAL_GPUS, cases.PATTERNS, cases.GAPS)
PARTS = {"SETUP", "TRAIN"}  # pieces of the emulation-gap scripts, in every gap case


def _scripts(module: str) -> set[str]:
    """The top-level constants of a test module that hold a training script (or a table of bugs)."""
    tree = ast.parse((cases.ROOT / module).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper():
            try:
                value = cases.fixture(module, node.targets[0].id)
            except ValueError:  # a path, a compiled pattern: no script
                continue
            if (isinstance(value, str) and "import " in value) or isinstance(value, dict):
                names.add(node.targets[0].id)
    return names - PARTS


def test_every_fixture_of_the_tests_is_a_case_of_the_table():
    table = cases.all_cases()
    for module in MODULES:
        base = module.rsplit("/", 1)[1]
        referenced = {
            c.source.split("::", 1)[1].split("[")[0].split(" ")[0] for c in table if c.source.startswith(base)
        }
        missing = _scripts(module) - referenced
        assert missing == set(), f"{module}: add these fixtures to functional_tests/gpu/cases.py: {sorted(missing)}"
    bugs, gaps = cases.fixture(cases.VIRTUAL_GPUS, "BUGS"), cases.fixture(cases.GAPS, "GAPS")
    names = {c.name for c in table}
    assert {f"placement-{bug}" for bug in bugs} <= names and {f"gap-{gap}" for gap in gaps} <= names
    assert len(names) == len(table)  # one name each: the table's rows and the cases' directories


@pytest.mark.parametrize(
    ("module", "name"),
    [(cases.SMOKE_CHECKS, "HF_TRAINER"), (cases.VIRTUAL_GPUS, "MP_SPAWN"), (cases.GAPS, "GAPS")],
)
def test_a_fixture_read_from_the_source_is_the_constant_the_module_defines(module, name):
    imported = importlib.import_module(module.removesuffix(".py").replace("/", "."))
    assert cases.fixture(module, name) == getattr(imported, name)


def test_a_name_a_module_does_not_define_is_said_as_such():
    with pytest.raises(KeyError, match="test_smoke_checks.py has no constant NOT_THERE"):
        cases.fixture(cases.SMOKE_CHECKS, "NOT_THERE")


def test_every_case_is_a_job_the_loader_accepts_or_says_why_it_is_not_run(tmp_path):
    for case in cases.all_cases():
        assert case.kind in (cases.EXAMPLE, cases.FIXTURE, cases.TUTORIAL)
        if case.skip:
            assert not case.script and not case.example or case.skip, case.name
            continue
        assert case.expect in ("pass", "fail"), case.name
        job = case.write(tmp_path / "jobs", port=29512)
        spec = load_job_spec(job)
        assert spec.entrypoint.file(job).is_file(), case.name
        assert "{port}" not in (job / "train.py").read_text(), case.name


def test_a_script_that_sets_its_own_port_gets_the_one_it_is_given(tmp_path):
    spawn = next(c for c in cases.all_cases() if c.name == "mp-spawn")
    assert "{port}" in spawn.script
    assert 'os.environ["MASTER_PORT"] = "29512"' in (spawn.write(tmp_path, port=29512) / "train.py").read_text()

"""The front door (vdk.plugin.ml_training.api): every verb a typed function whose docstring says its arguments,
what it returns and what it raises, quiet unless given a reporter; every type it names resolves to the class its
module defines; the page (docs/python-api.md) lists every verb with its
arguments."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.api import job_verbs
from vdk.plugin.ml_training.api import run_verbs
from vdk.plugin.ml_training.api import service_verbs
from vdk.plugin.ml_training.api import viewer_verbs

ROOT = Path(__file__).resolve().parents[3]
# What reads a job or a setting, and does no work to be told about
NOT_REPORTED = {
    "parse_overrides",
    "job_spec",
    "deploy_spec",
    "find_scope",
    "default_team",
    "set_default_team",
    "service_route",
    "check_service_setup",
}


def verbs() -> dict[str, object]:
    return {
        name: function
        for module in (job_verbs, run_verbs, service_verbs, viewer_verbs)
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__ and not name.startswith("_")
    }


def test_every_verb_and_type_is_exported_and_resolves():
    assert set(verbs()) <= set(api.__all__)
    for name in api.__all__:
        value = getattr(api, name)
        if name in api._TYPES:
            module = importlib.import_module(f"vdk.plugin.ml_training.{api._TYPES[name]}")
            assert value is getattr(module, name)
        else:
            assert value is verbs()[name]
    assert set(api.__all__) == set(verbs()) | set(api._TYPES)
    with pytest.raises(AttributeError):
        api.NoSuchThing  # noqa: B018


def test_the_types_the_type_checker_sees_are_the_ones_exported():
    tree = ast.parse(Path(api.__file__).read_text())
    checked = {
        alias.asname: node.module.removeprefix("vdk.plugin.ml_training.")
        for block in tree.body
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert checked == api._TYPES


@pytest.mark.parametrize("name", sorted(verbs()))
def test_each_verb_is_typed_and_says_its_arguments_returns_and_raises(name):
    function = verbs()[name]
    signature = inspect.signature(function)
    doc = inspect.getdoc(function) or ""
    assert signature.return_annotation is not inspect.Signature.empty
    for parameter in signature.parameters.values():
        assert parameter.annotation is not inspect.Parameter.empty, parameter.name
    sections = re.findall(r"^(Args|Returns|Raises):$", doc, re.M)
    assert sections == [s for s in ("Args", "Returns", "Raises") if s != "Args" or signature.parameters]
    args = doc.split("Args:", 1)[1].split("\n\n", 1)[0] if "Args:" in doc else ""
    assert re.findall(r"^    (\w+):", args, re.M) == list(signature.parameters)


@pytest.mark.parametrize("name", sorted(set(verbs()) - NOT_REPORTED))
def test_each_verb_that_works_is_quiet_unless_given_a_reporter(name):
    reporter = inspect.signature(verbs()[name]).parameters["reporter"]
    assert reporter.kind is inspect.Parameter.KEYWORD_ONLY and reporter.default is None


def test_the_page_lists_every_verb_with_its_signature():
    page = (ROOT / "docs" / "python-api.md").read_text()
    table = page.split("## The verbs", 1)[1].split("\n## ", 1)[0]
    shown = dict(re.findall(r"`api\.(\w+)\(([^`]*)\)`", table))
    assert set(shown) == set(verbs())
    for name, arguments in shown.items():  # what `help()` says, less the keyword every verb takes
        parameters = [p for p in inspect.signature(verbs()[name]).parameters.values() if p.name != "reporter"]
        real = [p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in parameters]
        assert arguments.replace('"', "'") == ", ".join(real), name

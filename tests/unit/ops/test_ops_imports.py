"""The use cases are the Python API, read from the source: no use case imports click or anything of the
command line; the backends (k8s, image, local) import neither the use cases nor the command line; the
modules of k8s/ and ops/ import one another without circles (lazy imports inside functions count too)."""

from __future__ import annotations

from tests.support.source_imports import PACKAGE
from tests.support.source_imports import ROOT
from tests.support.source_imports import circles
from tests.support.source_imports import imported
from tests.support.source_imports import sources


def test_no_use_case_imports_click():
    assert [str(s) for s in sources("ops") if any(m.split(".")[0] == "click" for m in imported(s))] == []


def test_the_use_cases_import_nothing_of_the_command_line():
    found = {
        (source.stem, module)
        for source in sources("ops")
        for module in imported(source)
        if module == f"{PACKAGE}.cli" or module.startswith(f"{PACKAGE}.cli.")
    }
    assert found == set()


def test_the_backends_import_no_use_case_and_no_command_line():
    above = (f"{PACKAGE}.ops", f"{PACKAGE}.cli")
    found = [
        f"{source.relative_to(ROOT)} -> {module}"
        for package in ("k8s", "image", "local")
        for source in sources(package)
        for module in imported(source)
        if module in above or module.startswith(tuple(f"{p}." for p in above))
    ]
    assert found == []


def test_the_modules_of_k8s_and_ops_import_one_another_without_circles():
    assert circles("k8s") == [] and circles("ops") == []

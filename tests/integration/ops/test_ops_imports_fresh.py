"""The use cases are the Python API: a fresh interpreter (a notebook) imports every module of ops/ without
loading click or anything of the command line, and the front door (api/) without anything heavy. (What the
sources import: tests/unit/ops/test_ops_imports.py.)"""

from __future__ import annotations

import subprocess
import sys

from tests.support.source_imports import PACKAGE
from tests.support.source_imports import module_name
from tests.support.source_imports import sources


def test_a_notebook_imports_the_use_cases_without_click():
    modules = [module_name(s) for s in sources("ops")]
    code = (
        f"import sys; import {', '.join(modules)}; "
        f"print(sorted(m for m in sys.modules if m == 'click' or m.startswith('{PACKAGE}.cli')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_notebook_imports_the_front_door_for_nothing_heavy():
    # the API's functions import what they need when they run, its types when first used: `vdk run` and
    # `vdk list` import it too (cli/), and pay neither for kubernetes nor for torch's launcher
    heavy = ("click", "kubernetes", "torch", "yaml", f"{PACKAGE}.ops.", f"{PACKAGE}.k8s", f"{PACKAGE}.cli")
    code = (
        "import sys; from vdk.plugin.ml_training import api; "
        f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

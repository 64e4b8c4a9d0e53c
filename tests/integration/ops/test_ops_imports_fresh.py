"""The use cases are the Python API: a fresh interpreter (a notebook) imports every module of ops/ without
loading click or anything of the command line. (What the sources import: tests/unit/ops/test_ops_imports.py.)"""

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

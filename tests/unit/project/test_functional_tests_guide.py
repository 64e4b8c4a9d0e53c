"""The real-cluster test, skipped without a cluster, points to instructions of the documentation that exist."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _real_cluster_test():
    path = ROOT / "functional_tests" / "test_k8s_real_cluster.py"
    spec = importlib.util.spec_from_file_location("real_cluster_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_skip_reasons_point_to_the_readme_section_that_says_how():
    module = _real_cluster_test()
    page, section = module.HOW_TO.split(" > ")
    text = (ROOT / page).read_text()
    section_text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    for mark in module.pytestmark:
        reason = mark.kwargs["reason"]
        assert module.HOW_TO in reason
        for variable in re.findall(r"VDK_ML_TRAINING_E2E_[A-Z]+", reason):
            assert variable in section_text, f"{variable} is not explained in {page} > {section}"

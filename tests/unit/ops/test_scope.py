"""Every verb that works on one run resolves "RUN or its suffix" (-i) in one place, ops/scope.py: its name, or
the part after `<job>-`, else the latest; an unknown run's error lists the job's runs."""

from __future__ import annotations

import re

import pytest

from tests.support.source_imports import ROOT
from tests.support.source_imports import sources
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.job.teams import TeamChoice
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
from vdk.plugin.ml_training.k8s.runs.selection import TeamRuns
from vdk.plugin.ml_training.k8s.runs.summary import summarize
from vdk.plugin.ml_training.ops.scope import named_run


class _Client:  # what a selection's messages read of its client; no connection
    namespace, context = "ml", None


def _selection(tmp_path, *suffixes: str) -> JobSelection:
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="8")
    runs = [
        summarize(render_run(spec, IMAGE, make_run(spec, name=f"mnist-ddp-{s}"), "ml", "pytorchjob")[0])
        for s in suffixes
    ]
    return JobSelection(
        _Client(), "mnist-ddp", TeamRuns("vision-research", runs), TeamChoice("Vision Research", "-t", True)
    )


def test_a_run_is_named_by_its_name_or_the_part_after_the_job_s_name_else_the_latest(tmp_path):
    selection = _selection(tmp_path, "bbbb0002", "aaaa0001")  # newest first
    assert named_run(selection, None, "execute --logs").name == "mnist-ddp-bbbb0002"
    assert named_run(selection, "aaaa0001", "execute --logs -i aaaa0001").name == "mnist-ddp-aaaa0001"
    assert named_run(selection, "mnist-ddp-aaaa0001", "diff").name == "mnist-ddp-aaaa0001"
    with pytest.raises(KubeApiError, match="has no run mnist-ddp-cccc0003") as raised:
        named_run(selection, "cccc0003", "execute --show -i cccc0003")
    assert raised.value.fix == "its runs are: mnist-ddp-bbbb0002, mnist-ddp-aaaa0001"


def test_no_other_module_of_ops_picks_a_run_itself():
    picking = re.compile(r"\.pick\(")
    found = [
        str(source.relative_to(ROOT))
        for source in sources("ops")
        if source.name != "scope.py" and picking.search(source.read_text())
    ]
    assert found == []

"""The engine: the rule list asked in order, a cluster rank's ending read as words, log hints, and one
rule with a local and a cluster wording."""

import importlib
import pkgutil

import pytest

from vdk.plugin.ml_training.diagnosis import engine
from vdk.plugin.ml_training.diagnosis import rules
from vdk.plugin.ml_training.diagnosis.evidence import Blame
from vdk.plugin.ml_training.diagnosis.evidence import ClusterFacts
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs.cluster_evidence import ending


def container_failed(termination: pod_states.Termination) -> Evidence:
    """A failed cluster run whose rank 0 (pod x-0) ended so."""
    rank = RankEvidence("0", "rank 0", index=0, pod="x-0", ended=ending(termination))
    return Evidence((rank,), Blame(rank, rank.ended), cluster=ClusterFacts(failed=True))


@pytest.mark.parametrize(
    "code, reason, words",
    [
        (137, "Error", "killed (SIGKILL, exit code 137)"),
        (143, "Error", "stopped (SIGTERM, exit code 143)"),
        (1, "Error", "exited with code 1"),
        (134, "Error", "ended by SIGABRT (exit code 134)"),
        (128, "ContainerCannotRun", "could not start"),
    ],
)
def test_exit_codes_and_signals_read_as_words(code, reason, words):
    what = engine.why_failed(
        container_failed(pod_states.Termination(code, reason, "exec: python: not found", None))
    ).what
    assert words in what


def test_log_hints_name_well_known_failures():
    tail = [
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "  exitcode  : 1 (pid: 41)",
    ]
    assert engine.log_hints(tail) == [rules.LOG_HINTS[0][1]]
    assert "requirements.txt" in engine.log_hints(["ModuleNotFoundError: No module named 'peft'"])[0]
    assert "host memory" in engine.log_hints(["  exitcode  : -9 (pid: 77)"])[0]
    assert engine.log_hints(["all good"]) == []


def test_every_rule_module_is_in_the_rule_list():
    """A rule written but not listed would never be asked."""
    modules = {f"{rules.__name__}.{m.name}" for m in pkgutil.iter_modules(rules.__path__)}
    asked = [*rules.FAILURE, *rules.ADMISSION, *rules.RANK_WAITING, *rules.NO_PODS, *rules.ERROR_NOTES]
    listed = {rule.__module__ for rule in asked}
    listed |= {m for m in modules if any(hint in vars(importlib.import_module(m)).values() for hint in rules.LOG_HINTS)}
    assert modules == listed


def test_a_cluster_rank_killed_and_a_local_rank_killed_are_one_rule_with_two_wordings(tmp_path):
    from tests.support.jobs import write_job
    from vdk.plugin.ml_training.diagnosis.evidence import Ending
    from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
    from vdk.plugin.ml_training.job import load_job_spec

    cluster = engine.why_failed(container_failed(pod_states.Termination(137, "Error", None, None)))
    assert cluster.what == "rank 0 (pod x-0) was killed (SIGKILL, exit code 137)"
    rank = RankEvidence("1", "rank 1", index=1, ended=Ending(exit_code=-9, signal="SIGKILL"), peak_memory=2_000_000_000)
    spec = load_job_spec(write_job(tmp_path, "job", files={"train.py": "print()\n"}))
    local = LocalFacts(spec, "full", "rank 1 was killed by SIGKILL", "run it again", machine_memory=8_000_000_000)
    found = engine.why_failed(Evidence((rank,), Blame(rank, rank.ended), local=local))
    assert found.what == "rank 1 was killed by SIGKILL" and found.ranks == ["1"]
    assert found.fix == (
        "a rank was killed by SIGKILL, most likely by the out-of-memory killer: the ranks had up to 2.0 GB each "
        "(2.0 GB together; this machine has 8.0 GB). Lower the batch size in `args`, or run fewer processes "
        "(`procs_per_node`). Then run it again"
    )

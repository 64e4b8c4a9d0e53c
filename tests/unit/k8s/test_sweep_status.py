"""Where `vdk show` finds a sweep's study (k8s/sweep_status.py): in the last few lines of its study pod's log, each
of which holds every trial (megabytes for a big sweep), and in the last 40 only when something printed after it."""

from __future__ import annotations

from vdk.plugin.ml_training.k8s.sweep_status import study_snapshot
from vdk.plugin.ml_training.runtime.sweep_protocol import study_line


class Logs:
    """A client whose study pod has `log`; what each log request asked for."""

    def __init__(self, log: str):
        self.log = log
        self.asked: list[int | None] = []

    def list_pods(self, selector: str) -> list[dict]:
        return [{"metadata": {"name": "s-study-abcde", "creationTimestamp": "2024-01-01T00:00:00Z"}}]

    def pod_log(self, name, container, previous=False, tail_lines=None):
        if previous:
            return None, "no previous container"
        self.asked.append(tail_lines)
        lines = self.log.splitlines(keepends=True)
        return "".join(lines[-tail_lines:] if tail_lines else lines), None


class Run:
    name = "s"


def test_the_last_study_line_is_read_from_the_last_few_lines():
    big = {"trials": [{"number": n, "params": {"lr": n}} for n in range(10_000)], "finished": False}
    log = Logs(study_line({"trials": [], "finished": False}) + "\n" + study_line(big) + "\n")
    snapshot, why = study_snapshot(log, Run())
    assert why is None and len(snapshot["trials"]) == 10_000
    assert log.asked == [4]  # one short read: not the 40 lines of a big study's log


def test_a_study_line_followed_by_other_lines_is_found_in_the_last_forty():
    log = Logs(study_line({"trials": [], "finished": True}) + "\n" + "grpc: a warning\n" * 12)
    snapshot, _ = study_snapshot(log, Run())
    assert snapshot == {"trials": [], "finished": True} and log.asked == [4, 40]

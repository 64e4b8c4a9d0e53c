#!/usr/bin/env python3
"""How many requests the verbs send to the Kubernetes API server, and that they do not grow with the
number of runs or pods: the real `vdk` CLI against the test fake API server (tests/support), in a
namespace of 1,000 runs across 50 jobs of 5 teams on the 3 backends, plus a run on 64 nodes (one pod
each), running and failed by a stalled rank; and the same verbs in a namespace of 30 runs, side by side.

Prints, for each verb, the requests by kind and the wall time, then

    list_requests=N show_requests=M execute_logs_requests=K

Targets (issue 11): `vdk list` <= 3 requests whatever the number of runs; `vdk show` of a 64-node run
<= 6 requests (the sixth: the shown run's record, for the data it trained on) plus at most one log request per
failed rank; no request per run or per pod. `vdk execute
--logs` reads one log per pod (the API has no request for the logs of several pods): it is shown, not
held to a target. Exits 1 when a target is not met.

    .venv/bin/python benchmarks/control_plane.py [--runs 1000] [--jobs 50]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for its tests package
from tests.support import busy_namespace  # the fake cluster and the runs the tests use
from tests.support import upstream_crds
from tests.support.vdk_cli import vdk

BIG_FAILED = "big-failed"


def measure(fake, *args: str) -> tuple[list[tuple[str, str, dict]], float]:
    """The requests `vdk ARGS` sent, and its wall time."""
    fake.requests.clear()
    started = time.perf_counter()
    result = vdk(*args)
    seconds = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"vdk {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return list(fake.requests), seconds


def kinds(requests: list[tuple[str, str, dict]]) -> str:
    """ "configmaps 1, jobs 1, pods 1, pods/log 2" """
    counted = collections.Counter(
        "pods/log" if path.endswith("/log") else path.rstrip("/").rsplit("/", 1)[-1] for _, path, _ in requests
    )
    return ", ".join(f"{kind} {count}" for kind, count in sorted(counted.items()))


def logs(requests: list[tuple[str, str, dict]]) -> int:
    return sum(1 for _, path, _ in requests if path.endswith("/log"))


def namespace(root: Path, runs: int, jobs: int):
    fake = busy_namespace.kube().start()
    busy_namespace.populate(fake, root / "jobs", runs=runs, jobs=jobs)
    busy_namespace.big_run(fake, root / "jobs")
    busy_namespace.big_run(fake, root / "jobs", failed=True, name=BIG_FAILED)
    return fake


VERBS = {
    "list": ("list", "-a"),
    "list -t": ("list", "-t", "team-1"),
    "show (20 runs, 2 nodes)": ("show", "-n", "job-07", "-t", "team-2"),
    "show (64 nodes, running)": ("show", "-n", busy_namespace.BIG_JOB, "-t", "team-0"),
    "show (64 nodes, failed)": ("show", "-n", BIG_FAILED, "-t", "team-0"),
    "execute --logs (64 nodes)": ("execute", "--logs", "-n", busy_namespace.BIG_JOB, "-t", "team-0"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    for name in list(os.environ):  # the plugin's settings of this shell, but where the upstream CRDs are
        if (
            name.startswith("VDK_ML_TRAINING_") and name != upstream_crds.CRD_DIR_ENV
        ) or name == "KUBERNETES_SERVICE_HOST":
            del os.environ[name]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["VDK_BASE_CONFIG_FOLDER"] = str(root)  # no default team of this machine
        results: dict[str, dict[str, tuple[list, float]]] = {}
        for size, (runs, jobs) in {"small": (30, 10), "large": (args.runs, args.jobs)}.items():
            started = time.perf_counter()
            fake = namespace(root / size, runs, jobs)
            os.environ["KUBECONFIG"] = str(fake.kubeconfig(root / f"kubeconfig-{size}"))
            made = time.perf_counter() - started
            print(f"{size}: {runs} runs of {jobs} jobs + 2 runs on 64 nodes, made in {made:.1f} s")
            results[size] = {label: measure(fake, *argv) for label, argv in VERBS.items()}
            fake.stop()
    print(f"\n{'verb':<28}{'30 runs':>9}{args.runs:>7} runs{'time':>9}  requests ({args.runs} runs)")
    for label in VERBS:
        small, _ = results["small"][label]
        large, seconds = results["large"][label]
        print(f"{label:<28}{len(small):>9}{len(large):>12}{seconds:>8.2f}s  {kinds(large)}")

    large = results["large"]
    list_requests = len(large["list"][0])
    show_running = len(large["show (64 nodes, running)"][0])
    show_failed, _ = large["show (64 nodes, failed)"]
    logs_requests = len(large["execute --logs (64 nodes)"][0])
    print(f"\nlist_requests={list_requests} show_requests={show_running} execute_logs_requests={logs_requests}")
    print(f"failed 64-node run: show_requests={len(show_failed)} of which log requests {logs(show_failed)}")

    failed_ranks = 64  # rank 5 stalled, the others were stopped after it
    problems = []
    for label in VERBS:
        if label.startswith("execute"):
            continue
        if len(results["small"][label][0]) != len(results["large"][label][0]):
            problems.append(f"{label}: {len(results['small'][label][0])} requests with 30 runs, more with more runs")
    if any(len(results[size][label][0]) > 3 for size in results for label in ("list", "list -t")):
        problems.append("vdk list sends more than 3 requests")
    if show_running > 6:
        problems.append(f"vdk show of a running 64-node run sends {show_running} requests (target <= 6)")
    if len(show_failed) - logs(show_failed) > 6 or logs(show_failed) > failed_ranks:
        problems.append(f"vdk show of a failed 64-node run sends {len(show_failed)} requests")
    if len(large["show (20 runs, 2 nodes)"][0]) != show_running:
        problems.append("vdk show sends more requests for a run with more pods")
    for problem in problems:
        print(f"NOT MET: {problem}")
    if not problems:
        print(
            "targets met: list <= 3, show of a 64-node run <= 6 (+ 1 log request per failed rank read), "
            "the same number of requests for 30 and for 1000 runs, for 2 and for 64 pods"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""The backend interface: every registered backend renders its main object first and only the types it
declares, reads its runs back (status, shape, pods, ranks) and says when a cluster cannot run it; and
only the backend modules know a backend's kinds."""

import re
from pathlib import Path

import pytest

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.job import backend_choices
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.backends import Discovery
from vdk.plugin.ml_training.k8s.runs import summary as run_summary
from vdk.plugin.ml_training.runtime.kubeflow_status import trainer_status
from vdk.plugin.ml_training.runtime.progress_lines import Figures

EACH = pytest.mark.parametrize("backend", backends.REGISTRY, ids=lambda b: b.name)


@EACH
def test_render_puts_the_main_object_first_and_creates_only_declared_types(tmp_path, backend):
    spec = make_spec(tmp_path, nodes="3", gpus_per_node="2")
    objects = backend.render(spec, IMAGE, make_run(spec), "ml", None)
    main = objects[0]
    assert (main["apiVersion"], main["kind"]) == (backend.main.api_version, backend.main.kind)
    assert {(o["apiVersion"], o["kind"]) for o in objects} <= {(t.api_version, t.kind) for t in backend.creates}
    assert backend.creates[0] == backend.main
    assert backends.of_object(main) is backend
    # the status of a run reads the shape back as it was rendered
    assert run_summary.shape(main) == ("3", 2, "nvidia.com/gpu")
    assert run_summary.run_phase(main) == (run_summary.PENDING, None)


@EACH
def test_its_pods_are_selected_and_ranked(tmp_path, backend):
    spec = make_spec(tmp_path, nodes="3", gpus_per_node="1")
    main = backend.render(spec, IMAGE, make_run(spec), "ml", None)[0]
    run_name = main["metadata"]["name"]
    pods = [cs.rank_pod(main, backend.name, rank, cs.running()) for rank in range(3)]
    key, value = backend.pod_selector(run_name).split("=")
    assert all(pod["metadata"]["labels"][key] == value for pod in pods)
    assert [backend.rank_of(pod) for pod in pods] == [(0, "0"), (1, "1"), (2, "2")]
    assert {pod["spec"]["containers"][0]["name"] for pod in pods} == {backend.container}


# What each operator writes while 1 of a run's 3 nodes is still pending, and once all 3 run.
OPERATOR_STATUS = {
    "pytorchjob": (
        {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 1}}},
        {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}}},
    ),
    # JobSet counts child Jobs of the `node` replicated job: ready when all their pods are
    "trainjob": (
        {"jobsStatus": [{"name": "node", "active": 1, "ready": 0}]},
        {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]},
    ),
    "job": ({"active": 3, "ready": 2}, {"active": 3, "ready": 3}),  # `active` counts pending pods too
}


@EACH
def test_its_status_says_whether_ranks_are_still_starting(tmp_path, backend):
    spec = make_spec(tmp_path, nodes="3", gpus_per_node="1")
    main = backend.render(spec, IMAGE, make_run(spec), "ml", None)[0]
    assert backend.starting(main) is None  # no status yet: cannot tell
    some, every = OPERATOR_STATUS[backend.name]
    running = {"conditions": [{"type": "Running", "status": "True"}]}
    assert backend.starting({**main, "status": some}) is True
    assert backend.starting({**main, "status": every}) is False
    # `vdk list` shows the honest phase without reading pods
    assert run_summary.summarize({**main, "status": {**running, **some}}).phase == run_summary.PENDING
    assert run_summary.summarize({**main, "status": {**running, **every}}).phase == run_summary.RUNNING


@EACH
def test_a_cluster_that_does_not_serve_it_is_refused_with_what_to_do(backend):
    bare = Discovery(resources=frozenset())
    problem = backend.unavailable(bare)
    assert problem is not None and problem.fix and not backend.ready(bare)
    with pytest.raises(type(problem)):
        backends.choose_backend(bare, backend.name)


def test_names_are_unique_and_the_job_config_accepts_exactly_them_and_auto():
    assert len(set(backends.NAMES)) == len(backends.NAMES) == len(backends.REGISTRY)
    assert backend_choices() == ("auto", *backends.NAMES)
    assert sorted(b.name for b in backends.AUTO_PREFERENCE) == sorted(backends.NAMES)
    assert backends.find("nope") is None and backends.find(None) is None
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        backends.get("nope")


def test_only_the_backend_modules_know_backend_kinds():
    """The check of docs/architecture.md:
    `grep -rn "PyTorchJob\\|TrainJob\\|kubeflow.org" src/vdk/plugin/ml_training/k8s`."""
    k8s = Path(backends.__file__).resolve().parents[1]
    found = [
        f"{path.relative_to(k8s)}:{number}"
        for path in sorted(k8s.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"PyTorchJob|TrainJob|kubeflow.org", line)
    ]
    assert found and all(place.startswith("backends/") for place in found), found


@EACH
def test_the_progress_its_status_says_is_read_without_a_log_request(tmp_path, backend):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="1")
    main = backend.render(spec, IMAGE, make_run(spec), "ml", None)[0]
    # what rank 0 posts to Kubeflow Trainer, which its status server applies as status.trainerStatus
    posted = trainer_status(Figures(300, 1000, 0.25, 4.0, 75.0, 175.0), None, 1767323045.0)
    status = {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}], "trainerStatus": posted}
    summary = run_summary.summarize({**main, "status": status})
    assert run_summary.summarize(main).progress is None  # nothing posted yet
    if backend.name != "trainjob":  # only a TrainJob has a status the training writes into
        assert summary.progress is None
        return
    assert (summary.progress.step, summary.progress.percent, summary.progress.eta) == (300, 30, "2m55s")
    assert summary.to_dict()["progress"]["percent"] == 30

"""The backend choice from what a cluster serves (a Discovery made by hand): `auto` by the resources,
Trainer runtimes and elasticity; an explicit backend the cluster lacks names what to install; the
choice is explained in one line. (Discovery by the real `kubernetes` client against the fake API server:
tests/integration/k8s/test_backend_choice_discovered.py.)"""

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.backends import Discovery
from vdk.plugin.ml_training.k8s.backends import choose_backend
from vdk.plugin.ml_training.k8s.backends import describe_choice
from vdk.plugin.ml_training.k8s.backends.trainjob import TrainerFacts

JOBS = ("batch/v1", "jobs")
PYTORCHJOBS = ("kubeflow.org/v1", "pytorchjobs")
TRAINJOBS = ("trainer.kubeflow.org/v1alpha1", "trainjobs")


def discovery(*resources, runtimes=frozenset({"torch-distributed"})):
    facts = {"trainjob": TrainerFacts(runtimes=runtimes)} if TRAINJOBS in resources else {}
    return Discovery(resources=frozenset(resources), facts=facts)


@pytest.mark.parametrize(
    "served, runtimes, elastic, expected",
    [
        ((JOBS,), None, False, "job"),
        ((JOBS, PYTORCHJOBS), None, False, "pytorchjob"),
        ((JOBS, TRAINJOBS), {"torch-distributed"}, False, "trainjob"),
        ((JOBS, PYTORCHJOBS, TRAINJOBS), {"torch-distributed"}, False, "trainjob"),
        ((JOBS, PYTORCHJOBS, TRAINJOBS), {"torch-distributed"}, True, "pytorchjob"),  # TrainJob is not elastic
        ((JOBS, TRAINJOBS), {"torch-distributed"}, True, "trainjob"),
        ((JOBS, PYTORCHJOBS, TRAINJOBS), {"deepspeed-distributed"}, False, "pytorchjob"),  # no torch runtime
        ((JOBS, TRAINJOBS), set(), False, "job"),
        ((JOBS, PYTORCHJOBS, TRAINJOBS), None, False, "pytorchjob"),  # runtimes unreadable: not assumed
    ],
)
def test_auto(served, runtimes, elastic, expected):
    d = discovery(*served, runtimes=None if runtimes is None else frozenset(runtimes))
    assert choose_backend(d, "auto", elastic=elastic) == expected


def test_explicit_backends_the_cluster_lacks_name_what_to_install():
    bare = discovery(JOBS)
    with pytest.raises(MLTrainingError) as e:
        choose_backend(bare, "pytorchjob")
    assert "does not serve PyTorchJob" in e.value.problem and "Training Operator" in e.value.fix
    with pytest.raises(MLTrainingError) as e:
        choose_backend(bare, "trainjob")
    assert "does not serve TrainJob" in e.value.problem and "Kubeflow Trainer v2" in e.value.fix
    with pytest.raises(MLTrainingError) as e:
        choose_backend(discovery(JOBS, TRAINJOBS, runtimes=frozenset()), "trainjob")
    assert "torch-distributed" in e.value.problem and "runtimes" in e.value.fix
    assert choose_backend(discovery(JOBS, TRAINJOBS, runtimes=None), "trainjob") == "trainjob"
    assert choose_backend(bare, "job") == "job"


def test_choice_is_explained():
    d = discovery(JOBS, PYTORCHJOBS, TRAINJOBS, runtimes=None)
    line = describe_choice(d, "auto", choose_backend(d, "auto"))
    assert line.startswith("backend pytorchjob (auto; the cluster serves TrainJob, PyTorchJob)")
    assert "could not be listed" in line

"""API failures as messages: a 404 on a core resource or a subresource is an object that is gone, never a
missing CRD; the server's Retry-After is kept for the retries."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.k8s.api_errors import Action
from vdk.plugin.ml_training.k8s.api_errors import brief
from vdk.plugin.ml_training.k8s.api_errors import from_api_exception
from vdk.plugin.ml_training.k8s.api_errors import retry_after

POD_LOG = Action("get", "pods/log", "", "Pod", "ml", "mnist-abc-master-0", "v1")
PODS = Action("list", "pods", "", "Pod", "ml", None, "v1")
WORKLOADS = Action("list", "workloads", "kueue.x-k8s.io", "Workload", "ml", None, "v1beta1")
NOT_FOUND = {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'pods "mnist-abc-master-0" not found'}


@pytest.mark.parametrize(
    "body",
    [
        "404 page not found",  # whatever a proxy in between answers
        {**NOT_FOUND, "details": {}},
        NOT_FOUND,  # a Status without details
        {**NOT_FOUND, "details": {"name": "mnist-abc-master-0", "kind": "pods"}},  # what the API server answers
    ],
)
@pytest.mark.parametrize("action", [POD_LOG, PODS])
def test_a_404_on_a_core_resource_or_subresource_is_no_missing_crd(body, action):
    error = from_api_exception(404, "Not Found", body, action, "lab")
    assert not error.not_served and error.status == 404
    assert "CustomResourceDefinition" not in error.problem and "not installed" not in error.problem
    assert error.problem.startswith(("Pod mnist-abc-master-0 was not found in namespace ml", "Pod was not found"))


def test_a_404_on_a_group_s_unrouted_path_is_a_type_the_cluster_does_not_serve():
    error = from_api_exception(404, "Not Found", "404 page not found", WORKLOADS, "lab")
    assert error.not_served and "its CustomResourceDefinition is not installed" in error.problem


@pytest.mark.parametrize(
    "headers, seconds",
    [
        ({"Retry-After": "3"}, 3.0),
        ({"Retry-After": "0"}, 0.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({"Retry-After": "-1"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_is_read_in_seconds(headers, seconds):
    assert retry_after(headers) == seconds
    error = from_api_exception(
        429, "Too Many Requests", {"kind": "Status", "message": "slow down"}, PODS, None, headers
    )
    assert error.retry_after == seconds


def test_brief_says_what_went_wrong_in_a_few_words():
    error = from_api_exception(500, "Internal Server Error", {"kind": "Status", "message": "etcd down"}, PODS, None)
    assert brief(error) == " (500): etcd down"

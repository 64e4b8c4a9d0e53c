"""How long the registry client waits and what it says while it waits (image/registry_timing.py), and the
errors it ends with (image/registry_errors.py)."""

from __future__ import annotations

import socket

import pytest
import requests
import urllib3

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.image.registry_errors import BASE
from vdk.plugin.ml_training.image.registry_errors import TARGET
from vdk.plugin.ml_training.image.registry_errors import gave_up
from vdk.plugin.ml_training.image.registry_errors import name_error
from vdk.plugin.ml_training.image.registry_timing import ANSWER_TIMEOUT_ENV
from vdk.plugin.ml_training.image.registry_timing import RetryPolicy
from vdk.plugin.ml_training.image.registry_timing import Waits
from vdk.plugin.ml_training.image.registry_timing import seconds
from vdk.plugin.ml_training.image.registry_timing import timed_out
from vdk.plugin.ml_training.image.registry_timing import unresolved_name


def test_timeouts_are_sized_to_the_operation():
    policy = RetryPolicy()
    assert policy.timeouts() == (10.0, 30.0)
    connect, answer = policy.timeouts(upload_bytes=2_000_000_000)  # a 2 GB layer: the registry checks it first
    assert connect == 10.0 and answer == 130.0
    assert policy.push_seconds(0) == 900 and policy.push_seconds(3_000_000_000) == 900 + 3000


def test_the_answer_timeout_comes_from_the_environment_and_is_checked():
    assert RetryPolicy.from_environment({}) == RetryPolicy()
    slow = RetryPolicy.from_environment({ANSWER_TIMEOUT_ENV: "120"})
    assert slow.answer_seconds == 120 and slow.operation_seconds == 480
    for bad in ("0", "-3", "ten", "99999"):
        with pytest.raises(MLTrainingError) as caught:
            RetryPolicy.from_environment({ANSWER_TIMEOUT_ENV: bad})
        assert f"{ANSWER_TIMEOUT_ENV} is {bad!r}" in caught.value.problem and "=120" in caught.value.fix


def test_a_dns_failure_is_found_behind_the_errors_that_wrap_it():
    resolution = urllib3.exceptions.NameResolutionError("mirror.invalid", None, socket.gaierror(-2, "Name unknown"))
    wrapped = requests.ConnectionError(urllib3.exceptions.MaxRetryError(None, "/v2/", resolution))
    assert unresolved_name(wrapped) is resolution
    chained = requests.ConnectionError("failed")
    chained.__cause__ = socket.gaierror(-3, "Temporary failure in name resolution")
    assert isinstance(unresolved_name(chained), socket.gaierror)
    refused = requests.ConnectionError(urllib3.exceptions.NewConnectionError(None, "Connection refused"))
    assert unresolved_name(refused) is None


def test_a_read_timeout_counts_as_no_answer_also_in_the_middle_of_a_body():
    assert timed_out(requests.ReadTimeout("Read timed out. (read timeout=30)"))
    assert timed_out(requests.ConnectionError("HTTPConnectionPool(host=x): Read timed out."))
    assert not timed_out(requests.ConnectionError("Connection refused"))


def test_durations_read_as_people_say_them():
    assert [seconds(s) for s in (0.4, 45, 119.4, 125, 600)] == ["0 s", "45 s", "119 s", "2 min 5 s", "10 min"]


def test_a_wait_is_said_after_a_while_and_again_while_it_lasts_but_not_while_bytes_move():
    now = [100.0]
    said: list[str] = []
    policy = RetryPolicy(notice_after=2, notice_every=10)
    waits = Waits("r.example", policy, said.append, clock=lambda: now[0], ticking=False)

    def at(t: float) -> None:
        now[0] = 100.0 + t
        waits.tick()

    with waits.waiting("store manifest ml/job:abc", 30):
        for t in (1, 2.5, 5, 12.4, 12.6):
            at(t)
    assert said == [
        "  waiting for r.example to answer (store manifest ml/job:abc): no answer for 2 s, giving up after 30 s",
        "  waiting for r.example to answer (store manifest ml/job:abc): no answer for 13 s, giving up after 30 s",
    ]
    said.clear()
    now[0] = 200.0
    with waits.waiting("upload code layer", 130) as alive:
        for t in range(1, 30):  # bytes keep moving: no silence to speak of
            now[0] = 200.0 + t
            alive(1 << 20)
            waits.tick()
        at(200 - 100 + 29 + 3)  # then the registry takes its time to answer
    assert said == [
        "  waiting for r.example to answer (upload code layer): no answer for 3 s, giving up after 2 min 10 s"
    ]
    at(1000)
    assert len(said) == 1  # the wait is over: nothing more is said


def test_a_name_that_does_not_resolve_is_fixed_where_the_registry_comes_from():
    base = name_error("docker.io", "registry-1.docker.io", BASE, "read manifest pytorch/pytorch:2")
    assert base.problem.startswith("the name registry-1.docker.io of registry docker.io (Docker Hub) does not resolve")
    assert (
        "VDK_ML_TRAINING_BASE_IMAGE" in base.fix and "mirror" in base.fix and "VDK_ML_TRAINING_REGISTRY" not in base.fix
    )
    target = name_error("registry.corp:5000", "registry.corp:5000", TARGET, "check blob sha256:1")
    assert "the name registry.corp of registry registry.corp:5000 does not resolve" in target.problem
    assert "VDK_ML_TRAINING_REGISTRY" in target.fix and "base_image" not in target.fix
    both = name_error("registry.corp", "registry.corp", "", "check blob sha256:1")
    assert "VDK_ML_TRAINING_REGISTRY" in both.fix and "VDK_ML_TRAINING_BASE_IMAGE" in both.fix
    assert all(e.fix.endswith("see docs/offline-registries.md") for e in (base, target, both))


def test_giving_up_says_how_often_and_for_how_long_and_why():
    policy = RetryPolicy(answer_seconds=30)
    silent = gave_up("r.example.com", "r.example.com", policy, "upload code layer", requests.ReadTimeout("x"), 2, 2, 61)
    assert silent.problem == (
        "r.example.com accepts connections but did not answer (upload code layer) within 30 s (2 attempts in 61 s)"
    )
    refused = gave_up(
        "r.example.com", "r.example.com", policy, "check blob", requests.ConnectionError("Connection refused"), 5, 0, 9
    )
    assert refused.problem == "cannot reach r.example.com to check blob (5 attempts in 9 s): connection refused"

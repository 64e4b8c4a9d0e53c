"""What a user reads of the Control Service's answers (control_service/rest.py): its error body's what and why with
its countermeasures, or the fix of the situation the caller knows; its empty 404s and its proxies' pages; the
credentials it refused."""

from __future__ import annotations

import json

from vdk.plugin.ml_training.control_service.endpoint import LOGIN_FIX
from vdk.plugin.ml_training.control_service.rest import refusal
from vdk.plugin.ml_training.control_service.rest import server_message

URL = "http://cs.example.com"
NOT_DEPLOYED = {
    "what": "The Data Job 'mnist-ddp' is not deployed.",
    "why": "The Data Job must be deployed.",
    "consequences": "Operation cannot complete since it expects the data job to have a deployment.",
    "countermeasures": "Deploy the Data Job and try again.",
}


def test_the_servers_error_body_is_read_and_nothing_else_is_taken_for_one():
    assert server_message(json.dumps(NOT_DEPLOYED).encode())["what"] == NOT_DEPLOYED["what"]
    assert server_message(b"") is None  # the empty body of many of its 404s
    spring = {"timestamp": "2025-05-13T00:00:00.000+00:00", "status": 404, "error": "Not Found", "path": "/x"}
    assert server_message(json.dumps(spring)) is None  # Spring's own answer to an unknown path
    assert server_message(b"<html>Bad Gateway</html>") is None
    assert server_message(json.dumps({"messages": ["the api.yaml's Error, which the server never sends"]})) is None


def test_a_refusal_says_the_servers_what_and_why_and_its_countermeasures_unless_the_caller_knows_better():
    error = refusal(URL, "start an execution of mnist-ddp", 404, json.dumps(NOT_DEPLOYED))
    assert error.problem == (
        f"the VDK Control Service at {URL} refused to start an execution of mnist-ddp (HTTP 404): "
        "The Data Job 'mnist-ddp' is not deployed.: The Data Job must be deployed."
    )
    assert error.fix == "Deploy the Data Job and try again." and error.status == 404
    better = refusal(URL, "start an execution", 404, json.dumps(NOT_DEPLOYED), fix="vdk deploy -p mnist-ddp")
    assert better.fix == "vdk deploy -p mnist-ddp"


def test_credentials_missing_permissions_empty_answers_and_failing_servers_each_get_their_fix():
    assert refusal(URL, "read the job", 401, b"").fix == LOGIN_FIX
    assert "ask the Control Service's operator" in refusal(URL, "read the job", 403, b"").fix
    empty = refusal(URL, "read the log", 404, b"")
    assert empty.problem.endswith("(HTTP 404) with no explanation") and "job's name and team" in empty.fix
    down = refusal(URL, "deploy", 503, b"upstream connect error")
    assert "upstream connect error" in down.problem and down.fix.startswith("try again in a few minutes")

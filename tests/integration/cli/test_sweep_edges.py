"""A sweep on the fake API server, its study's table in its study pod's log, through the real `vdk`: text from a
user or a cluster reaches no terminal raw (trials' parameters written in config.ini, failure reasons written by
its pods, holding terminal escape sequences, are shown escaped; `-o json` gives them exactly, JSON escaping them
its own way); and a trial that failed is not started as a full run unless asked with --force."""

from __future__ import annotations

import json

import pytest

from tests.support import cluster_state as cs
from tests.support.jobs import write_job
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.sweep_manifests import LABEL_STUDY_OF
from vdk.plugin.ml_training.k8s.sweep_manifests import STUDY_CONTAINER
from vdk.plugin.ml_training.runtime.sweep_protocol import study_line

pytestmark = pytest.mark.usefixtures("isolated_environment")

TITLE = "\x1b]0;owned\x07"  # retitles the terminal's window
CLEAR = "\x1b[2J"  # clears the screen
REORDER = "\u202e"  # shows what follows right to left


@pytest.fixture
def sweep_run(cluster, tmp_path):
    """(the fake API server, the client) with a finished two-trial sweep of job esc-sweep: trial 0 complete (the
    best), trial 1 failed; parameters and the failure's reason hold escape sequences."""
    fake, client = cluster()
    fake.add_claim("sweeps")
    sweep = "[ml-training.sweep]\nopt = adam, 'sgd\x1b[2J'\nmetric = loss\n"
    ml = {"args": "--opt ${opt}", "gpus_per_node": "0", "output_pvc": "sweeps"}
    spec = load_job_spec(write_job(tmp_path, "esc-sweep", ml=ml, team="vision", extra=sweep))
    run = make_run(spec)
    client.apply(render_run(spec, IMAGE, run, "ml", "job"))
    trial = {"state": "complete", "metric": 0.5, "steps": 3, "started": None, "ended": None, "seconds": 12.0}
    snapshot = {
        "metric": "loss", "goal": "min", "trials_planned": 2, "best": 0, "stopped": None, "finished": True,
        "trials": [
            {**trial, "number": 0, "params": {"opt": f"adam{TITLE}"}, "slot": 0, "why": None},
            {**trial, "number": 1, "params": {"opt": f"sgd{CLEAR}"}, "slot": 1, "state": "failed", "metric": None,
             "why": f"the training exited{REORDER} with code 1"},
        ],
    }  # fmt: skip
    pod = fake.add(
        "pods",
        {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{run.name}-study-x1y2z", "namespace": "ml", "creationTimestamp": cs.ago(60),
                         "labels": {LABEL_STUDY_OF: run.name, "vdk.io/job": "esc-sweep"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": STUDY_CONTAINER, "image": IMAGE.reference}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": STUDY_CONTAINER, "state": {"running": {}}}]},
        },
    )  # fmt: skip
    fake.set_log(pod["metadata"]["name"], STUDY_CONTAINER, study_line(snapshot) + "\n")
    return fake, client


def test_a_sweeps_trial_table_shows_escape_sequences_escaped(sweep_run):
    shown = vdk("show", "-n", "esc-sweep", "-t", "vision")
    assert shown.exit_code == 0, shown.stderr
    assert "\x1b" not in shown.stdout and REORDER not in shown.stdout
    assert "opt=adam\\x1b]0;owned\\x07" in shown.stdout and "opt=sgd\\x1b[2J" in shown.stdout
    assert "the training exited\\u202e with code 1" in shown.stdout
    as_json = json.loads(vdk("show", "-n", "esc-sweep", "-t", "vision", "-o", "json").stdout)
    assert {t["params"]["opt"] for t in as_json["sweep"]["study"]["table"]} == {f"adam{TITLE}", f"sgd{CLEAR}"}


def test_a_failed_trial_is_started_in_full_only_when_asked_with_force(sweep_run):
    fake, client = sweep_run
    before = {r.name for r in client.list_runs()}
    refused = vdk("execute", "--start", "-n", "esc-sweep", "-t", "vision", "--trial", "1")
    assert refused.exit_code != 0
    assert (
        "trial 1 of esc-sweep-" in refused.stderr and "did not complete (failed: the training exited" in refused.stderr
    )
    assert "add --force" in refused.stderr and "--trial best" in refused.stderr
    assert {r.name for r in client.list_runs()} == before  # nothing started

    started = vdk("execute", "--start", "-n", "esc-sweep", "-t", "vision", "--trial", "1", "--force", "-o", "json")
    assert started.exit_code == 0, started.stderr
    assert json.loads(started.stdout)["trial"] == 1
    assert len({r.name for r in client.list_runs()} - before) == 1
    misplaced = vdk("execute", "--logs", "-n", "esc-sweep", "-t", "vision", "--trial", "1", "--force")
    assert misplaced.exit_code != 0 and "--force goes with --start --trial" in misplaced.stderr

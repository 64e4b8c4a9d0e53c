"""A TrainJob's progress posted into Kubeflow from inside real training processes (the bootstrap as a job image
runs it), to Kubeflow Trainer's status server as tests/support/trainer_status_server.py plays it: over TLS with
the injected CA, a bearer token read from its file on every post (rotated between two posts), the payload
checked against the upstream CRD's schema and Go's int32 decode; no more than the first post and the last in a
run shorter than the shortest period however many progress lines it prints; training never waiting on a server
that does not answer; a failing server said once. transformers' own Kubeflow callback stays silent (one writer).
The payload, the poster's pace and its failures with a stand-in network: tests/unit/runtime/test_kubeflow_status.py."""

from __future__ import annotations

import itertools
import json
import time

import pytest

from tests.support.bootstrap_runs import bootstrap_script
from vdk.plugin.ml_training.runtime import kubeflow_status
from vdk.plugin.ml_training.runtime.kubeflow_status import PostFailed
from vdk.plugin.ml_training.runtime.kubeflow_status import StatusSettings
from vdk.plugin.ml_training.runtime.kubeflow_status import post
from vdk.plugin.ml_training.runtime.progress_lines import MARK

pytestmark = pytest.mark.slow

# 12 optimizer steps 0.1 s apart; records when each ended, when the script ended, and what transformers would read.
LOOP = """
import json, os, time
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
times = []
for step in range(12):
    model(torch.ones(3, 4)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.time())
    while step == 0 and os.environ.get("AFTER_FIRST_POST") and not os.path.exists(os.environ["AFTER_FIRST_POST"]):
        time.sleep(0.05)  # the test's pace, not the plugin's: the server has the first step's post
    time.sleep(0.1)
switch = os.environ.get("DISABLE_KUBEFLOW_INTEGRATION")
json.dump({"times": times, "switch": switch, "ended": time.time()}, open("seen.json", "w"))
"""


def metrics(status: dict) -> dict[str, str]:
    return {m["name"]: m["value"] for m in status["metrics"]}


def run_loop(tmp_path, server, **env):
    settings = {"RANK": "0", "VDK_ML_TRAINING_PROGRESS_SECONDS": "0.1", "VDK_ML_TRAINING_TOTAL_STEPS": "12"}
    done = bootstrap_script(tmp_path, LOOP, {**settings, **server.env(), **env})
    assert done.returncode == 0, done.stderr
    return done, json.loads((tmp_path / "seen.json").read_text())


def test_rank_0_posts_its_first_and_last_progress_with_the_token_of_the_moment(tmp_path, trainer_status_server):
    tokens, posted = [], tmp_path / "posted"

    def accept(status):
        tokens.append(server.rotate_token())  # the kubelet rotates the token: the next post must read it again
        posted.touch()

    server = trainer_status_server(on_accept=accept)
    first_token = server.token()
    done, seen = run_loop(tmp_path, server, AFTER_FIRST_POST=str(posted))
    assert "[vdk-ml-training]" not in done.stderr
    assert done.stdout.count(MARK) >= 4  # a progress line every 0.1 s...
    assert [p.code for p in server.posts] == [200, 200]  # ...but posts 15 s apart at least: the first and the end
    first, last = server.accepted()
    assert (metrics(first)["current_step"], first["progressPercentage"]) == ("1", 8)
    assert (metrics(last)["current_step"], metrics(last)["script"]) == ("12", "finished")
    assert (last["progressPercentage"], last["estimatedRemainingSeconds"]) == (100, 0)
    assert [p.token for p in server.posts] == [first_token, tokens[0]]
    assert seen["switch"] == "TRUE"  # transformers' callback is off in the script's process


def test_a_server_that_does_not_answer_never_slows_training_and_is_said_once(tmp_path, trainer_status_server):
    server = trainer_status_server()
    server.delay = 30  # every post hangs past the client's timeout
    started = time.time()
    done, seen = run_loop(tmp_path, server)
    ended = time.time()
    gaps = [b - a for a, b in itertools.pairwise(seen["times"])]
    assert max(gaps) < 2.0, gaps  # steps 0.1 s apart while the first post hangs for 5 s
    # the end waited for the last post at most FINAL_WAIT_SECONDS (the process's own start and exit aside)
    assert ended - seen["ended"] < kubeflow_status.FINAL_WAIT_SECONDS + 5, (started, seen["ended"], ended)
    warnings = [line for line in done.stderr.splitlines() if "[vdk-ml-training]" in line]
    assert warnings == [
        "[vdk-ml-training] warning: the TrainJob's progress is not reported to Kubeflow "
        f"(127.0.0.1:{server.port}: no answer within 5 s); training goes on, its progress stays in the log; "
        "posts go on, less often (every 5 min at most)"
    ]
    assert "script=finished" in done.stdout  # the progress lines went on


def test_a_refusing_server_is_one_line_for_all_its_refusals(tmp_path, trainer_status_server):
    server = trainer_status_server()
    server.answer = (403, "Forbidden")
    done, _ = run_loop(tmp_path, server)
    assert [p.code for p in server.posts] == [403, 403]
    warnings = [line for line in done.stderr.splitlines() if "[vdk-ml-training]" in line]
    assert len(warnings) == 1 and "(the server answered 403 Forbidden)" in warnings[0], warnings


def test_a_post_says_why_the_server_did_not_take_it(trainer_status_server, trainer_status_tls, tmp_path):
    server = trainer_status_server()
    env = server.env()
    settings = StatusSettings(env[kubeflow_status.URL], env[kubeflow_status.CA_CERT], env[kubeflow_status.TOKEN])
    good = {"lastUpdatedTime": "2026-01-02T03:04:05Z", "progressPercentage": 12, "metrics": []}
    post(settings, {"trainerStatus": good})
    assert server.accepted() == [good]

    def refused(payload, settings=settings) -> str:
        with pytest.raises(PostFailed) as failed:
            post(settings, payload)
        return str(failed.value)

    assert refused({"trainerStatus": {**good, "progressPercentage": 12.5}}) == (
        "the server answered 422 (Invalid payload: cannot unmarshal 12.5 into trainerStatus.progressPercentage "
        "of type int32)"
    )
    assert "lastUpdatedTime is required" in refused({"trainerStatus": {"progressPercentage": 12}})
    server.files.joinpath("token").write_text(server.issue(audience="trainer.kubeflow.org/v1alpha1/other"))
    assert refused({"trainerStatus": good}) == "the server answered 403 Forbidden"  # the token of another TrainJob
    server.rotate_token()
    stranger = tmp_path / "other-ca.crt"
    stranger.write_bytes(trainer_status_tls[1].read_bytes())  # the server's own certificate is no CA of it
    untrusted = StatusSettings(settings.url, str(stranger), settings.token_file)
    assert refused({"trainerStatus": good}, untrusted).startswith("the server's certificate is not trusted")
    missing = StatusSettings(settings.url, settings.ca_file, str(tmp_path / "no-token"))
    assert refused({"trainerStatus": good}, missing).startswith(f"cannot read {tmp_path / 'no-token'}")
    assert len(server.accepted()) == 1


# transformers' Trainer twice: with report_to="none" (transformers would add its Kubeflow callback since the URL
# is set) and with the callback named; which Kubeflow callbacks each Trainer holds.
HF_TRAINERS = """
import json
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        ids = torch.arange(8) + i
        return {"input_ids": ids, "attention_mask": torch.ones(8, dtype=torch.long), "labels": torch.tensor(i % 2)}


config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, num_labels=2)
seen = {}
for report_to in ("none", ["kubeflow"]):
    args = TrainingArguments(output_dir="out", max_steps=3, per_device_train_batch_size=4, report_to=report_to,
                             save_strategy="no", logging_steps=1, use_cpu=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Data())
    trainer.train()
    names = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    seen[str(report_to)] = [name for name in names if "Kubeflow" in name]
json.dump(seen, open("seen.json", "w"))
"""


@pytest.mark.needs_transformers
def test_transformers_kubeflow_callback_stays_silent_whether_added_or_named(tmp_path, trainer_status_server):
    server = trainer_status_server()
    done = bootstrap_script(tmp_path, HF_TRAINERS, {"RANK": "0", **server.env()})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"none": [], "['kubeflow']": ["SilentKubeflowCallback"]}
    statuses = server.accepted()
    # only this plugin's posts (transformers' first says progress 0 with total_steps alone, at once)
    assert statuses and all("elapsed_seconds" in metrics(s) for s in statuses), statuses
    assert (
        metrics(statuses[-1])["script"] == "finished" and metrics(statuses[-1])["current_step"] == "3"
    )  # the second Trainer counts its own steps

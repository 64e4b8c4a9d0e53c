"""`vdk execute --outputs` and the outputs line of `vdk show`, through the real vdk CLI and `kubernetes` client
against the fake API server, whose kubelet (tests/support/kubelet.py) runs the copy pod the command creates:
the real export module over a directory that stands for the run's directory of the output claim."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import cluster_state as cs
from tests.support.kubelet import LocalKubelet
from tests.support.processes import with_stack_dumps
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from tests.support.viewers import Served
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.runtime.board_events import BOARD_DIR
from vdk.plugin.ml_training.runtime.board_events import BoardWriter
from vdk.plugin.ml_training.runtime.series import Point
from vdk.plugin.ml_training.runtime.series import RunFacts

pytestmark = pytest.mark.usefixtures("isolated_environment")


@pytest.fixture
def outputs_run(cluster, tmp_path):
    """A PyTorchJob run of a job with output_pvc, and the claim's directory of the run with what it wrote."""
    fake, client = cluster(pytorchjob=True)
    claim = tmp_path / "claim-ml-outputs"
    fake.kubelet = LocalKubelet({"ml-outputs": claim})
    spec = make_spec(tmp_path / "jobs", name="mnist-ddp", nodes="2", gpus_per_node="8", output_pvc="ml-outputs")
    run = make_run(spec)
    client.apply(render_run(spec, IMAGE, run, "ml", "pytorchjob"))
    directory = claim / run.name
    (directory / "checkpoints").mkdir(parents=True)
    (directory / "snapshot.pt").write_bytes(os.urandom(100_000))  # several base64 lines
    (directory / "checkpoints" / "final.safetensors").write_bytes(b"weights")
    (directory / "empty.txt").write_bytes(b"")
    (directory / "train.py").symlink_to("/opt/vdk-ml/job/train.py")  # the code, linked in: not an output
    (directory / "__pycache__").mkdir()
    (directory / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"cache")
    return fake, run, directory


def test_outputs_lists_what_the_run_wrote_and_removes_its_pod(outputs_run):
    fake, run, _ = outputs_run
    done = vdk("execute", "--outputs", "-n", "mnist-ddp")
    assert done.exit_code == 0, done.output
    assert "checkpoints/final.safetensors" in done.stdout and "snapshot.pt" in done.stdout
    assert "100.0 KB" in done.stdout and "3 files, 100.0 KB" in done.stdout
    assert "train.py" not in done.stdout and "pyc" not in done.stdout
    assert f"PersistentVolumeClaim ml-outputs, directory {run.name}/" in done.stderr
    assert fake.stored("pods") == []  # the copy pod is gone
    created = [p for m, p, _ in fake.requests if m == "POST" and p.endswith("/pods")]
    assert created == ["/api/v1/namespaces/ml/pods"]


def test_outputs_to_a_directory_copies_the_files_with_progress(outputs_run, tmp_path):
    fake, run, directory = outputs_run
    target = tmp_path / "back-home"
    done = vdk("execute", "--outputs", "-n", "mnist-ddp", "-i", run.name, "--to", str(target), "-o", "json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["copied_to"] == str(target) and result["location"] == {"claim": "ml-outputs", "directory": run.name}
    assert sorted(f["path"] for f in result["files"]) == ["checkpoints/final.safetensors", "empty.txt", "snapshot.pt"]
    for relative in ("snapshot.pt", "checkpoints/final.safetensors", "empty.txt"):
        assert (target / relative).read_bytes() == (directory / relative).read_bytes()
    assert not list(target.rglob("*.part")) and not (target / "train.py").exists()
    assert "snapshot.pt  100.0 KB" in done.stderr  # progress, file by file
    assert fake.stored("pods") == []
    (copy_command,) = fake.kubelet.commands
    assert "--copy" in copy_command and copy_command[-1] == str(directory)  # the run's directory, read-only


def test_a_run_without_an_output_claim_says_how_to_get_one(cluster, tmp_path):
    fake, client = cluster(pytorchjob=True)
    spec = make_spec(tmp_path / "jobs", name="mnist-ddp", nodes="2", gpus_per_node="8")
    client.apply(render_run(spec, IMAGE, make_run(spec), "ml", "pytorchjob"))
    done = vdk("execute", "--outputs", "-n", "mnist-ddp")
    assert done.exit_code == 1
    assert "has no output claim" in done.stderr and "output_pvc = NAME" in done.stderr
    assert fake.stored("pods") == []


def test_a_stream_cut_short_is_an_error_and_leaves_no_partial_file(outputs_run, tmp_path, monkeypatch):
    fake, run, directory = outputs_run
    real = fake.kubelet

    def lossy(fake_, pod, namespace):  # the log loses a line in the middle of snapshot.pt (a rotation)
        original = fake_.append_log
        count = {"n": 0}

        def append(name, container, text, ns="ml"):
            count["n"] += 1
            if count["n"] != 11:  # entries 1-3, a file 4-6, an empty one 7-8, snapshot.pt from 9
                original(name, container, text, ns)

        fake_.append_log = append
        real(fake_, pod, namespace)

    fake.kubelet = lossy
    target = tmp_path / "copy"
    done = vdk("execute", "--outputs", "-n", "mnist-ddp", "--to", str(target))
    assert done.exit_code == 1
    assert "the copy of the outputs failed" in done.stderr and "snapshot.pt" in done.stderr
    assert not (target / "snapshot.pt").exists() and not list(target.rglob("*.part"))
    assert fake.stored("pods") == []


def test_show_names_the_output_location_and_what_rank_0_last_said_of_its_size(outputs_run):
    fake, run, _ = outputs_run
    main = fake.stored("pytorchjobs")[0]
    fake.set_status("pytorchjobs", run.name, {"conditions": [{"type": "Running", "status": "True"}]})
    pod = fake.add("pods", cs.rank_pod(main, "pytorchjob", 0, cs.running()))
    fake.set_log(
        pod["metadata"]["name"],
        "pytorch",
        "epoch 0\n[vdk-ml-training] outputs files=3 bytes=2500000 dir=/opt/vdk-ml/outputs\n",
    )
    done = vdk("show", "-n", "mnist-ddp")
    assert done.exit_code == 0, done.output
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("outputs"))
    assert f"PersistentVolumeClaim ml-outputs, directory {run.name}/" in line and "3 files, 2.5 MB" in line
    shown = json.loads(vdk("show", "-n", "mnist-ddp", "-o", "json").stdout)["latest"]["outputs"]
    assert shown == {"claim": "ml-outputs", "directory": run.name, "files": 3, "bytes": 2500000}


def test_a_copy_pod_whose_create_answer_was_lost_is_used_and_deleted(outputs_run, fast_retries):
    fake, run, _ = outputs_run
    fake.drop("POST", "pods", after=True)
    done = vdk("execute", "--outputs", "-n", "mnist-ddp")
    assert done.exit_code == 0, done.output
    assert "snapshot.pt" in done.stdout
    assert fake.requests_to("POST", "/pods") == 1  # one copy pod, found by its name
    assert "closed the connection without an answer to create Pod" in done.stderr and "but it was done" in done.stderr
    assert fake.stored("pods") == []


def test_names_with_terminal_escape_sequences_are_never_printed_raw(outputs_run, tmp_path):
    fake, run, directory = outputs_run
    evil = "\x1b]0;owned\x07\x1b[2Jreport.txt"
    (directory / evil).write_bytes(b"text")
    listed = vdk("execute", "--outputs", "-n", "mnist-ddp")
    assert listed.exit_code == 0, listed.output
    assert "\x1b" not in listed.stdout + listed.stderr and "\x07" not in listed.stdout + listed.stderr
    assert "\\x1b]0;owned\\x07\\x1b[2Jreport.txt" in listed.stdout
    target = tmp_path / "copy"
    copied = vdk("execute", "--outputs", "-n", "mnist-ddp", "--to", str(target))
    assert copied.exit_code == 0, copied.output
    assert (target / evil).read_bytes() == b"text"  # the file itself keeps its name
    assert "\x1b" not in copied.stdout + copied.stderr and "\\x1b]0;owned" in copied.stderr
    as_json = json.loads(vdk("execute", "--outputs", "-n", "mnist-ddp", "-o", "json").stdout)
    assert evil in [f["path"] for f in as_json["files"]]  # JSON escapes it, and keeps it exact


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_copy_deletes_its_pod(cluster, tmp_path, sig):
    fake, client = cluster(pytorchjob=True)  # no kubelet: the copy pod stays Pending, the copy waits for it
    spec = make_spec(tmp_path / "jobs", name="mnist-ddp", nodes="2", gpus_per_node="8", output_pvc="ml-outputs")
    client.apply(render_run(spec, IMAGE, make_run(spec), "ml", "pytorchjob"))
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("vdk")), "execute", "--outputs", "-n", "mnist-ddp", "--to", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=with_stack_dumps(),
    )
    deadline = time.monotonic() + 60
    while not fake.stored("pods") and time.monotonic() < deadline:
        time.sleep(0.05)
    (pod,) = fake.stored("pods")
    time.sleep(0.5)
    process.send_signal(sig)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # it outlived the signal: where it was, in the failure's stderr
        process.send_signal(signal.SIGABRT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 128 + sig, err
    assert fake.stored("pods") == []  # not left mounting the claim for an hour
    assert f"Deleted the copy pod {pod['metadata']['name']}" in err
    assert f"vdk execute interrupted by {signal.Signals(sig).name}." in err
    assert not list(tmp_path.glob("**/*.part"))


def test_a_target_that_cannot_be_written_is_a_clear_error(outputs_run, tmp_path, monkeypatch):
    from vdk.plugin.ml_training.runtime import outputs_stream

    fake, run, directory = outputs_run

    def full(source, target):  # the local disk fills up as the first file is put in place
        raise OSError(28, "No space left on device", str(target))

    monkeypatch.setattr(outputs_stream.os, "replace", full)
    target = tmp_path / "copy"
    done = vdk("execute", "--outputs", "-n", "mnist-ddp", "--to", str(target))
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert "the copy of the outputs could not be written (" in done.stderr
    assert "No space left on device" in done.stderr and "another directory (--to)" in done.stderr
    assert not [p for p in target.rglob("*") if p.is_file()]  # no half-written file
    assert fake.stored("pods") == []


def test_the_board_of_a_cluster_run_copies_only_its_event_files_and_serves_them(outputs_run, tmp_path):
    """`vdk show --board` as a user runs it: the copy pod sends the event files of the run's output directory (not its
    checkpoints), and TensorBoard serves them on a loopback port until Ctrl-C."""
    fake, run, directory = outputs_run
    writer = BoardWriter(str(directory / BOARD_DIR), RunFacts(run=run.name))
    writer.write([Point("loss", 0.9, 1, 1000.0), Point("loss", 0.3, 50, 1060.0)])
    writer.close("finished")
    board = tmp_path / "board"
    served = Served(["show", "-n", "mnist-ddp", "--board", "--to", str(board)], dict(os.environ))
    try:
        files = [p.relative_to(board) for p in board.rglob("*") if p.is_file()]
        assert len(files) == 1 and files[0].parent == Path(run.name), files  # the events, no checkpoint
        with urllib.request.urlopen(f"{served.url}data/plugin/scalars/scalars?run={run.name}&tag=vdk/loss") as answer:
            served_points = json.loads(answer.read())
        assert [(step, value) for _, step, value in served_points] == [
            (1, pytest.approx(0.9)),
            (50, pytest.approx(0.3)),
        ]
    finally:
        code, out, err = served.stop()
    assert code == 0, err
    (copy_command,) = fake.kubelet.commands
    assert copy_command[-3:-1] == ["--only", BOARD_DIR] and "--copy" in copy_command
    assert fake.stored("pods") == []

"""The command line of ml-training jobs agrees with itself and with VDK (the real `vdk` in a new process): per-run
overrides without editing config.ini (`--set KEY=VALUE`, `--args`), vdk-core's `--arguments` refused rather than
ignored, help that describes ml-training jobs, and a directory of training code without config.ini named as such
instead of a "successful" data job that ran nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.jobs import write_job

VDK = Path(sys.executable).parent / "vdk"
# Takes --steps optimizer steps (a smoke run stops it at smoke_steps) and prints the arguments it got.
SCRIPT = """import sys

import torch

if __name__ == "__main__":
    print("ARGS", sys.argv[1:])
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        opt.zero_grad()
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
"""


def vdk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    return subprocess.run([str(VDK), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def job(tmp_path: Path) -> Path:
    return write_job(
        tmp_path,
        "overrides",
        ml={"gpus_per_node": "0", "args": "--from-config", "smoke_epoch_end": "false"},
        team="vision",
        files={"train.py": SCRIPT},
    )


def test_run_takes_keys_and_arguments_for_one_run_and_says_so(tmp_path):
    path = job(tmp_path)
    done = vdk("run", path.name, "--set", "smoke_steps=3", "--args", "--lr 1e-3 --name 'a b'", cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "ARGS ['--lr', '1e-3', '--name', 'a b']" in out  # instead of config.ini's args
    assert "for this run, over config.ini: smoke_steps=3, args=\"--lr 1e-3 --name 'a b'\"" in out
    assert "rank 0: 3 steps" in out
    assert "smoke_steps" not in (path / "config.ini").read_text()  # config.ini is not changed


def test_a_bad_override_is_refused_with_the_key_meant_or_the_fix(tmp_path):
    path = job(tmp_path)
    unknown = vdk("run", path.name, "--set", "smoke_stepz=3", cwd=tmp_path)
    assert "'smoke_stepz' is not a key of [ml-training]" in unknown.stdout + unknown.stderr
    assert "did you mean `--set smoke_steps=...`?" in unknown.stdout + unknown.stderr
    bad = vdk("run", path.name, "--set", "nodes=0", cwd=tmp_path)
    text = bad.stdout + bad.stderr
    assert "--set nodes=0 (for this run, over config.ini): '0': a run needs at least 1 machine" in text
    assert "Fix: write `--set nodes=1`" in text


def test_vdk_arguments_is_refused_for_ml_jobs_with_what_to_use(tmp_path):
    path = job(tmp_path)
    done = vdk("run", path.name, "--arguments", '{"lr": 0.001}', cwd=tmp_path)
    text = done.stdout + done.stderr
    assert "ARGS" not in text  # nothing ran
    assert "--arguments passes JSON arguments to a data job's steps" in text
    assert 'vdk run JOB --args "--lr 1e-3"' in text


def test_ml_only_options_are_refused_for_data_jobs(tmp_path):
    data = tmp_path / "data-job"
    data.mkdir()
    (data / "config.ini").write_text("[owner]\nteam = t\n")
    (data / "10_step.py").write_text("def run(job_input):\n    print('data step ran')\n")
    done = vdk("run", "data-job", "--set", "smoke_steps=3", cwd=tmp_path)
    assert done.returncode == 2 and "--set applies to ml-training jobs only" in done.stderr
    assert "data step ran" not in done.stdout + done.stderr


def test_deploy_takes_the_same_overrides_and_the_run_keeps_them(tmp_path):
    path = job(tmp_path)
    done = vdk("deploy", "-p", str(path), "--dry-run", "--backend", "job", "--set", "nodes=3", "--args", "--lr 1e-3",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifests = [m for m in yaml.safe_load_all(done.stdout) if m]
    job_object, record = manifests[0], manifests[-1]
    assert job_object["spec"]["completions"] == 3
    assert job_object["metadata"]["annotations"]["vdk.io/overrides"] == "nodes=3, args='--lr 1e-3'"
    assert json.loads(record["data"]["overrides.json"]) == {"nodes": "3", "args": "--lr 1e-3"}
    assert json.loads(record["data"]["spec.json"])["args"] == ["--lr", "1e-3"]


def test_help_describes_ml_training_jobs(tmp_path):
    root = vdk("--help", cwd=tmp_path).stdout
    assert "ML training jobs (config.ini `[job] type = ml-training`)" in root and "vdk deploy -p my-job" in root
    run = vdk("run", "--help", cwd=tmp_path).stdout
    assert "ml-training jobs (config.ini" in run and "--set KEY=VALUE" in run and "--args TEXT" in run
    deploy = " ".join(vdk("deploy", "--help", cwd=tmp_path).stdout.split())
    # what --dry-run contacts, as the documentation says it (docs/deploy.md)
    assert "contacts no cluster and no registry, except once the registry of a base image" in deploy


def test_a_directory_of_training_code_without_config_ini_says_so(tmp_path):
    path = tmp_path / "mytrain"
    path.mkdir()
    (path / "train.py").write_text(SCRIPT)
    for args in (["run", "mytrain"], ["deploy", "-p", str(path), "--dry-run"]):
        done = vdk(*args, cwd=tmp_path)
        assert done.returncode != 0, done.stdout + done.stderr
        assert "it has no config.ini, so VDK would run it as a data job" in done.stderr
        assert "It holds training code (train.py imports torch)" in done.stderr
        assert "create" in done.stderr and "`type = ml-training`" in done.stderr
        assert "SUCCESS" not in done.stdout + done.stderr

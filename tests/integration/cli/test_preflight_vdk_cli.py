"""A job meant as ml-training whose config.ini is broken or misnamed gets one clear message from the
real `vdk` CLI — not vdk-core's traceback, and not a "successful" data-job run that ran nothing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.jobs import write_job

VDK = Path(sys.executable).parent / "vdk"
SCRIPT = 'import sys\n\nif __name__ == "__main__":\n    sys.exit(3)\n'


def vdk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    return subprocess.run([str(VDK), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def job(tmp_path: Path, config: str) -> Path:
    return write_job(tmp_path, config=config, files={"train.py": SCRIPT})


@pytest.mark.parametrize(
    "config, message, fix",
    [
        (
            "[job]\ntype = ml-training\n[ml-training]\nnodes = 1\nnodes = 2\n",
            "already exists",
            "keep one `nodes = ...` line",
        ),
        (
            "[job]\ntype = ml-training\n[ml-training]\nthis is not ini\n",
            "line 4: 'this is not ini'",
            "write every line as `key = value`",
        ),
        ("[job]\ntype = ml_training\n", "'ml_training' is not a job type", "did you mean `type = ml-training`?"),
        ("[owner]\nteam = t\n[ml-training]\nnodes = 2\n", "would run it as a data job", "add `type = ml-training`"),
    ],
)
def test_vdk_run_of_a_broken_ml_job_is_one_clear_message(tmp_path, config, message, fix):
    path = job(tmp_path, config)
    done = vdk("run", path.name, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert message in done.stderr and f"Fix: {fix}" in done.stderr
    assert "my-job/config.ini" in done.stderr


def test_deploy_dry_run_of_an_unreadable_ml_config_names_the_syntax_error(tmp_path):
    path = job(tmp_path, "[job]\ntype = ml-training\n[ml-training]\ncpu = 8\ncpu = 4\n")
    done = vdk("deploy", "-p", str(path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 1
    assert "is not an ml-training job" not in done.stderr
    assert "keep one `cpu = ...` line in [ml-training]" in done.stderr
    assert done.stdout.strip() == ""


def test_data_jobs_still_run_under_vdk(tmp_path):
    path = tmp_path / "data-job"
    path.mkdir()
    (path / "config.ini").write_text("[owner]\nteam = t\n")
    (path / "10_step.py").write_text("def run(job_input):\n    print('data step ran')\n")
    done = vdk("run", "data-job", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "data step ran" in done.stdout + done.stderr


def test_a_binary_config_ini_is_named_as_such_by_run_and_deploy(tmp_path):
    path = write_job(tmp_path, files={"train.py": SCRIPT}, config="")
    (path / "config.ini").write_bytes(b"\x00\x01\xff\xfe[job]\x00type = ml-training\n")
    for args in (["run", path.name], ["deploy", "-p", str(path), "--dry-run"]):
        done = vdk(*args, cwd=tmp_path)
        assert done.returncode in (1, 2), done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr and "TypeError" not in done.stderr
        assert "is not an ml-training job" not in done.stderr
        assert "config.ini: is not a text file (it holds binary data" in done.stderr
        assert "Fix: write config.ini as UTF-8 text" in done.stderr


def _bom(job: Path) -> None:
    (job / "config.ini").write_bytes(b"\xef\xbb\xbf[job]\ntype = ml-training\n")


def _key_first(job: Path) -> None:
    (job / "config.ini").write_text("nodes = 2\n[job]\ntype = ml-training\n")


def _directory(job: Path) -> None:
    (job / "config.ini").unlink()
    (job / "config.ini").mkdir()


def _link_to_script(job: Path) -> None:
    (job / "config.ini").unlink()
    (job / "config.ini").symlink_to("train.py")


def _link_loop(job: Path) -> None:
    (job / "a").symlink_to("b")
    (job / "b").symlink_to("a")


def _unreadable(job: Path) -> None:
    (job / "data").mkdir()
    (job / "data" / "x.csv").write_text("1\n")
    (job / "data").chmod(0)


def _not_utf8(job: Path) -> None:
    with open(os.path.join(os.fsencode(job), b"caf\xe9.csv"), "wb") as f:
        f.write(b"1\n")


def _empty(job: Path) -> None:
    (job / "config.ini").write_text("")


def _typo(job: Path) -> None:
    (job / "config.ini").write_text("[job]\ntyp = ml-training\n")


# Root reads a chmod 0 directory; without these capabilities it cannot, like any user.
NO_READ_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def tree(root: Path) -> dict[str, tuple[int, float]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime)
        for p in sorted(root.rglob("*"))
        if p.parent.stat().st_mode & 0o400
    }


@pytest.mark.parametrize(
    "spoil, problem",
    [
        (_bom, "starts with a byte-order mark (BOM)"),
        (_key_first, "line 1: 'nodes = 2' comes before any [section] header"),
        (_directory, "config.ini: is a directory"),
        (_link_to_script, "is a symbolic link to train.py, which cannot be read"),
        (_link_loop, "is a symbolic link that loops"),
        (_unreadable, "cannot read the directory"),
        (_not_utf8, "is not UTF-8"),
        (_empty, "is empty, so VDK would run the directory as a data job"),
        (_typo, "`typ = ml-training` does not make it an ml-training job"),
    ],
)
def test_a_bad_job_directory_is_one_clear_message_and_nothing_created(tmp_path, spoil, problem):
    path = write_job(tmp_path, ml="nodes = 1", files={"train.py": SCRIPT})
    spoil(path)
    before = tree(tmp_path)
    prefix = NO_READ_OVERRIDE if spoil is _unreadable else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    for args in (["run", path.name], ["deploy", "-p", str(path), "--dry-run"]):
        done = subprocess.run(
            [*prefix, str(VDK), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        output = done.stdout + done.stderr
        assert done.returncode in (1, 2), f"{args}: {output}"
        assert "Traceback" not in output, f"{args}: {output}"
        assert problem in done.stderr and "Fix: " in done.stderr, f"{args}: {output}"
        assert tree(tmp_path) == before, args


HF_TOKEN = "hf_" + "Ab1Cd2Ef3G" * 4


def test_credentials_in_arguments_or_the_registry_address_are_refused_unshown_and_nothing_is_pushed(tmp_path, registry):
    path = write_job(tmp_path, ml="gpus_per_node = 0", files={"train.py": SCRIPT})
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    env["VDK_ML_TRAINING_REGISTRY"] = f"{registry.host}/leaks"
    cases = [
        (["run", path.name, "--args", f"--hf-token {HF_TOKEN}"], env, "argument 2 is a Hugging Face token"),
        (["deploy", "-p", str(path), "--build-only", "--set", f"smoke_args=--x {HF_TOKEN}"], env, "argument 2 is a"),
        (
            ["deploy", "-p", str(path), "--build-only", "--args", "--password=hunter2 --db-token Zq9Zq9Zq9Zq9Zq9Zq9"],
            env,
            "argument 1 is a password (the value of --password)",  # whatever its value: the first one is named
        ),
        (
            ["deploy", "-p", str(path), "--build-only", "--args", "--epochs 3 --db-token Zq9Zq9Zq9Zq9Zq9Zq9"],
            env,
            "argument 4 is a secret (the value of --db-token",
        ),
        (
            ["deploy", "-p", str(path), "--build-only"],
            {**env, "VDK_ML_TRAINING_REGISTRY": f"ada:hunter2@{registry.host}/leaks"},
            "holds credentials (user:password@)",
        ),
    ]
    for args, environment, problem in cases:
        done = subprocess.run(
            [str(VDK), *args], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
        )
        output = done.stdout + done.stderr
        assert done.returncode in (1, 2) and problem in output, f"{args}: {output}"
        for secret in (HF_TOKEN, "hunter2", "Zq9Zq9Zq9Zq9Zq9Zq9"):
            assert secret not in output, f"{args}: {output}"
    catalog = requests.get(f"{registry.url}/v2/_catalog", timeout=10).json()["repositories"]
    assert not [name for name in catalog if name.startswith("leaks/")]

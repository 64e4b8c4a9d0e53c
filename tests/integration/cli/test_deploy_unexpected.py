"""`vdk deploy` never ends silently: the real vdk CLI, a real registry, the fake API server. A full disk while the
code layer is written (a real full filesystem: a small tmpfs as TMPDIR, in a private mount namespace) is said as
such — where, what is free, where to make room — with nothing created in the cluster and nothing left on the
disk; any other unexpected error names itself and where it happened, at every verbosity (vdk-core drops an
exception it does not know), its traceback at DEBUG."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.support.jobs import write_job

pytestmark = pytest.mark.usefixtures("isolated_environment")
TRAIN = "if __name__ == '__main__':\n    print('training')\n"

DEPLOY_ON_A_FULL_DISK = textwrap.dedent(
    """
    import os, subprocess, sys
    full, vdk, job = sys.argv[1:4]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", full], check=True)
    os.mkdir(os.path.join(full, "tmp"))
    env = dict(os.environ, TMPDIR=os.path.join(full, "tmp"))
    done = subprocess.run([vdk, "deploy", "-p", job, "--skip-smoke"], env=env, capture_output=True, text=True)
    print(done.returncode)
    print(sorted(os.listdir(os.path.join(full, "tmp"))))
    print(done.stderr)
    """
)


def job(tmp_path, name: str, base_image: str, files: dict) -> object:
    ml = f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\ngpus_per_node = 0\n"
    return write_job(tmp_path, name, ml=ml, files={"train.py": TRAIN, **files})


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_full_disk_while_the_code_layer_is_written_is_said_as_such(
    tmp_path, cluster, registry, base_image, monkeypatch
):
    fake, _ = cluster(pytorchjob=True)
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    path = job(tmp_path, "full-disk", base_image, {"weights.bin": os.urandom(3 << 20)})  # does not compress
    full = tmp_path / "full"
    full.mkdir()
    vdk = str(os.path.join(os.path.dirname(sys.executable), "vdk"))
    done = subprocess.run(
        ["unshare", "-rm", sys.executable, "-c", DEPLOY_ON_A_FULL_DISK, str(full), vdk, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    code, left, stderr = done.stdout.split("\n", 2)
    assert code == "1", stderr
    assert left == "[]"  # the image's build directory, half a layer in it, went with the deploy
    assert f"Error: the disk is full at {full}/tmp: No space left on device while writing {full}/tmp/" in stderr
    assert re.search(r"\d+(\.\d)? [KMGT]?B free there now, once the unfinished files were removed", stderr), stderr
    assert (
        f"Fix: free space on the disk of {full}/tmp, or set TMPDIR to a directory on a disk with room (images are "
        "assembled there); then run the command again"
    ) in stderr
    assert "Traceback" not in stderr and "cannot read" not in stderr  # not blamed on the job's files
    assert fake.stored("pytorchjobs") == [] and fake.stored("configmaps") == []


SURPRISE = textwrap.dedent(
    """
    from vdk.plugin.ml_training.image import build


    def surprise(*args, **kwargs):
        return {}["config"]  # a bug: what no part of the plugin turns into an error a user can act on


    build.assemble = surprise
    """
)


def test_an_unexpected_error_is_said_with_its_cause_at_every_verbosity(
    tmp_path, cluster, registry, base_image, monkeypatch
):
    fake, _ = cluster(pytorchjob=True)
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    path = job(tmp_path, "surprise", base_image, {})
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SURPRISE)  # the bug, in the real vdk's process
    monkeypatch.setenv("PYTHONPATH", str(site))
    vdk = str(os.path.join(os.path.dirname(sys.executable), "vdk"))
    for verbosity in ([], ["-v", "DEBUG"]):
        done = subprocess.run(
            [vdk, *verbosity, "deploy", "-p", str(path), "--skip-smoke"], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 1, done.stderr
        error = next(line for line in done.stderr.splitlines() if line.startswith("Error: "))
        assert error.startswith("Error: the command stopped on an unexpected error in ops/deploy.py line "), error
        assert error.endswith("(_checked_plan) (raised in sitecustomize.py line 6): KeyError: 'config'"), error
        assert "Fix: nothing the plugin checks explains it: run the command again with `vdk -v DEBUG ...`" in (
            done.stderr
        )
        traced = "The unexpected error, as Python saw it:\nTraceback (most recent call last):" in done.stderr
        assert traced == bool(verbosity), done.stderr  # the traceback at DEBUG only
    assert fake.stored("pytorchjobs") == []

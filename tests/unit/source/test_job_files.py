"""What the code layer (and a local run's working directory) takes from a job directory, and what it leaves
out and why: secrets and clutter always, with a reason; nothing inside an ignored directory comes back;
links inside are kept as links, links outside refused; large files kept but reported; only the executable
bit of a mode kept; special files reported. (.gitignore files in a git repository:
tests/integration/source/test_job_files_git.py.)"""

from __future__ import annotations

import os

import pytest

from tests.support.job_trees import PEM_KEY
from tests.support.job_trees import scanned
from tests.support.job_trees import write
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.source.job_files import LARGE_FILE_BYTES
from vdk.plugin.ml_training.source.job_files import scan_job_dir


def test_secrets_and_clutter_are_always_excluded_with_a_reason(tmp_path):
    job = tmp_path / "job"
    for path in [
        "train.py",
        "pkg/model.py",
        "notes/keys.md",  # kept
        ".env",
        ".env.production",
        "sub/.envrc",
        "svc.keytab",
        "id_rsa",
        "certs/server.key",
        ".netrc",
        ".aws/credentials",
        "deploy/.kube/config",
        "creds/.docker/config.json",
        "token.p12",
        "pkg/__pycache__/model.cpython-311.pyc",
        "stale.pyc",
        ".git/HEAD",
        ".venv/bin/python",
    ]:
        write(job, path)
    write(job, "envs/old/pyvenv.cfg", "home = /usr/bin\n")  # a venv under any name
    write(job, "configs/innocent.txt", PEM_KEY)  # a key under an innocent name
    write(job, "gcp.json", '{"type": "service_account", "private_key": "-----BEGIN"}')
    write(job, "ok.json", '{"type": "dataset", "note": "private_key rotation docs"}')

    files, excluded = scanned(job)

    assert files == ["notes/keys.md", "ok.json", "pkg/model.py", "train.py"]
    assert excluded[".env"].startswith("environment file")
    assert excluded[".env.production"].startswith("environment file")
    assert excluded["sub/.envrc"].startswith("environment file")
    assert "keytab" in excluded["svc.keytab"]
    assert excluded["id_rsa"] == excluded["certs/server.key"] == excluded["token.p12"] == "private key"
    assert excluded["configs/innocent.txt"] == "private key (PEM content)"
    assert excluded["gcp.json"] == "cloud service-account key"
    for credential in (".netrc", ".aws/credentials", "deploy/.kube/config", "creds/.docker/config.json"):
        assert excluded[credential] == "credential file", credential
    assert excluded[".git/"] == "version-control data"
    assert excluded[".venv/"] == excluded["envs/old/"] == "virtual environment"
    assert excluded["pkg/__pycache__/"] == "Python bytecode cache"
    assert excluded["stale.pyc"] == "Python bytecode cache"


def test_nothing_inside_an_ignored_directory_comes_back(tmp_path):
    job = tmp_path / "job"
    write(job, ".gitignore", "build/\n!build/keep.txt\n")
    write(job, "build/keep.txt")
    write(job, "train.py")
    files, excluded = scanned(job)
    assert files == [".gitignore", "train.py"]
    assert "build/" in excluded


def test_symlinks_inside_are_kept_as_links_outside_are_refused(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    write(job, "conf/base.yaml")
    write(tmp_path, "secret.txt", "outside")
    (job / "current.yaml").symlink_to("conf/base.yaml")
    (job / "leak.txt").symlink_to("../secret.txt")
    (job / "abs.txt").symlink_to(tmp_path / "secret.txt")
    result = scan_job_dir(job)
    links = {f.path: f.link for f in result.files if f.link}
    assert links == {"current.yaml": "conf/base.yaml"}
    reasons = {e.path: e.reason for e in result.excluded}
    assert "outside the job directory" in reasons["leak.txt"]
    assert "outside the job directory" in reasons["abs.txt"]


def test_large_files_are_kept_but_reported(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    big = job / "weights.bin"
    with open(big, "wb") as f:
        f.truncate(LARGE_FILE_BYTES + 1)  # sparse: costs no disk
    result = scan_job_dir(job)
    assert [f.path for f in result.large_files] == ["weights.bin"]
    assert "weights.bin" in [f.path for f in result.files]


def test_executable_bit_is_the_only_mode_kept(tmp_path):
    job = tmp_path / "job"
    write(job, "run.sh").chmod(0o750)
    write(job, "train.py").chmod(0o600)
    modes = {f.path: f.executable for f in scan_job_dir(job).files}
    assert modes == {"run.sh": True, "train.py": False}


def test_unreadable_special_files_are_reported(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    os.mkfifo(job / "pipe")
    _, excluded = scanned(job)
    assert "not a regular file" in excluded["pipe"]


def test_a_link_that_leaves_through_dotdot_and_comes_back_points_inside_wherever_the_job_is_copied(tmp_path):
    job = tmp_path / "my-job"
    write(job, "train.py")
    write(job, "data/real.txt", "real\n")
    (job / "alias.txt").symlink_to("../my-job/data/real.txt")
    (job / "conf").mkdir()
    (job / "conf" / "data").symlink_to("../../my-job/data")
    (job / "kept.txt").symlink_to("data/real.txt")
    links = {f.path: f.link for f in scan_job_dir(job).files if f.link}
    assert links == {"alias.txt": "data/real.txt", "conf/data": "../data", "kept.txt": "data/real.txt"}
    # the image's /opt/vdk-ml/job, a local run's working directory: another name, the links still resolve
    copy = tmp_path / "opt" / "job"
    for relpath, target in links.items():
        (copy / relpath).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, copy / relpath)
    write(copy, "data/real.txt", "real\n")
    assert (copy / "alias.txt").read_text() == "real\n" and (copy / "conf/data/real.txt").read_text() == "real\n"


def test_a_key_anywhere_in_a_file_excludes_it_after_the_first_kilobytes_indented_or_in_a_big_file(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    write(job, "late.txt", "x" * 9000 + "\n" + PEM_KEY)  # after the first 8 KiB
    indented = "".join(f"  {line}\n" for line in PEM_KEY.splitlines())
    write(job, "deploy/values.yaml", f"tls:\n  key: |\n{indented}")  # a YAML block
    big = job / "data" / "blob.bin"
    big.parent.mkdir(parents=True)
    with open(big, "wb") as f:  # 3 MB of data, the key straddling two reads of the scan
        f.write(os.urandom(1 << 20)[:-10].replace(b"-", b"_"))
        f.write(PEM_KEY.encode())
        f.write(b"\0" * (2 << 20))
    write(job, "docs/key-format.md", "A key starts with -----BEGIN PUBLIC KEY----- and is public.\n")

    files, excluded = scanned(job)

    assert files == ["docs/key-format.md", "train.py"]
    assert excluded["late.txt"] == excluded["deploy/values.yaml"] == excluded["data/blob.bin"]
    assert excluded["data/blob.bin"] == "private key (PEM content)"


def test_a_symbolic_link_loop_is_one_clear_error(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    os.symlink("b", job / "a")
    os.symlink("a", job / "b")
    with pytest.raises(MLTrainingError) as info:
        scan_job_dir(job)
    assert "is a symbolic link that loops" in info.value.problem and "rm " in info.value.fix


def test_a_file_name_that_is_not_utf8_is_one_clear_error(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    (job / "data").mkdir()
    with open(os.path.join(os.fsencode(job / "data"), b"caf\xe9.csv"), "wb") as f:
        f.write(b"x\n")
    with pytest.raises(MLTrainingError) as info:
        scan_job_dir(job)
    assert "'data/caf\\xe9.csv'" in info.value.problem and "is not UTF-8" in info.value.problem
    assert "rename it" in info.value.fix


HF = "hf_" + "AbCdEf0123" * 4


def test_token_and_secrets_files_are_left_out_by_name_and_tokens_by_content(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    write(job, "token.txt", "x")  # whatever it holds: a W&B key has no shape of its own
    write(job, "deploy/secrets.yaml", "password: hunter2\n")
    write(job, "notes.md", f"the hub token is {HF}\n")
    write(job, "tokens.txt", "a b c\n")  # a tokenizer's vocabulary: kept
    files, excluded = scanned(job)
    assert files == ["tokens.txt", "train.py"]
    assert excluded["token.txt"] == "token file (a credential)"
    assert excluded["deploy/secrets.yaml"] == "secrets file"
    assert excluded["notes.md"] == "a Hugging Face token (in its content)"


def test_a_code_file_holding_a_key_ships_only_when_vdkignore_names_it_and_each_case_is_said(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py", "import keys\n")
    write(job, "keys.py", f'KEY = """{PEM_KEY}"""\n')
    write(job, "fixtures/other.py", f'KEY = """{PEM_KEY}"""\n')
    result = scan_job_dir(job)
    left = {e.path: e for e in result.excluded}
    assert left["keys.py"].reason == "private key (PEM content)"
    fix = left["keys.py"].way_back(job)
    assert "take the credential out of keys.py" in fix and f"`!keys.py` to {job / '.vdkignore'}" in fix
    assert any("keys.py is left out of the image" in w and "`!keys.py`" in w for w in result.credential_warnings())

    write(job, ".vdkignore", "!*.py\n")  # a wildcard brings back no file for its content
    assert {"keys.py", "fixtures/other.py"} <= {e.path for e in scan_job_dir(job).excluded}

    write(job, ".vdkignore", "!keys.py\n")  # the line the fix names: it works
    result = scan_job_dir(job)
    assert "keys.py" in [f.path for f in result.files]
    assert [e.path for e in result.excluded if e.path.endswith(".py")] == ["fixtures/other.py"]
    assert [e.path for e in result.shipped_anyway] == ["keys.py"]
    assert any("keys.py holds private key (PEM content) and goes into the image" in w
               for w in result.credential_warnings())  # fmt: skip


def test_a_file_left_out_by_name_is_never_said_to_come_back_through_vdkignore(tmp_path):
    job = tmp_path / "job"
    write(job, "token.txt", "x")
    write(job, ".vdkignore", "!token.txt\n")
    result = scan_job_dir(job)
    (left,) = [e for e in result.excluded if e.path == "token.txt"]
    assert "vdkignore" not in left.way_back(job) and "rename it" in left.way_back(job)

"""The runtime bootstrap runs the user's entrypoint as `python script.py` / `python -m module` would,
in images (no launcher) and under the local launcher (result file, output routing, no traceback noise)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.bootstrap_runs import BOOTSTRAP
from tests.support.bootstrap_runs import environ_without
from tests.support.bootstrap_runs import torchrun_command
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.report import describe

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

# Prints what a script can observe about how it was started, and pickles a class it defines through a
# spawned worker process, which fails unless the script is the __main__ module as under `python`.
PROBE = """
import json, multiprocessing, os, sys

class Point:
    def __init__(self, x):
        self.x = x

def double(p):
    return Point(p.x * 2)

if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        doubled = pool.map(double, [Point(21)])[0].x
    print(json.dumps({
        "argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]), "path0": sys.path[0],
        "name": __name__, "file": __file__, "doubled": doubled, "main_is_me": sys.modules["__main__"].Point is Point,
    }))
"""


def bootstrap(cwd: Path, *entry: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", BOOTSTRAP, *entry],
        cwd=cwd,
        env={**environ_without("VDK_ML_TRAINING_"), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_script_runs_as_under_python(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(PROBE)
    done = bootstrap(tmp_path, "src/train.py", "--lr", "0.1", "positional")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["argv"] == ["--lr", "0.1", "positional"] and seen["argv0"] == "train.py"
    assert seen["path0"] == str(tmp_path / "src")
    assert seen["name"] == "__main__" and seen["file"] == str(tmp_path / "src" / "train.py")
    assert seen["doubled"] == 42 and seen["main_is_me"] is True


def test_a_module_runs_as_under_python_dash_m(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(PROBE)
    done = bootstrap(tmp_path, "-m", "pkg.train", "a")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["argv"] == ["a"] and seen["argv0"] == "train.py"
    assert seen["path0"] == str(tmp_path)
    assert seen["name"] == "__main__" and seen["doubled"] == 42


def test_in_an_image_errors_surface_as_under_python(tmp_path):
    (tmp_path / "train.py").write_text("def main():\n    raise KeyError('missing')\n\nmain()\n")
    done = bootstrap(tmp_path, "train.py")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "KeyError: 'missing'" in done.stderr


def test_under_the_launcher_a_failure_is_reported_once_in_the_result_file(tmp_path):
    (tmp_path / "train.py").write_text(
        "import sys\n\ndef main():\n    print('to stdout'); print('to stderr', file=sys.stderr)\n"
        "    raise ValueError('bad batch')\n\nif __name__ == '__main__':\n    main()\n"
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    console = tmp_path / "console-stderr"  # the launcher's terminal or FIFO, here a file
    console.write_text("")
    env = {protocol.MODE: protocol.FULL, protocol.RUN_DIR: str(run_dir), protocol.CONSOLE_STDERR: str(console)}
    rank0 = bootstrap(tmp_path, "train.py", env={**env, "RANK": "0", "LOCAL_RANK": "0"})
    rank1 = bootstrap(tmp_path, "train.py", env={**env, "RANK": "1", "LOCAL_RANK": "1"})

    assert rank0.returncode == rank1.returncode == 1
    assert "Traceback" not in rank0.stderr + rank1.stderr  # the launcher shows it, once
    assert rank0.stdout == "to stdout\n" and rank0.stderr == "" and console.read_text() == "to stderr\n"
    assert rank1.stdout == rank1.stderr == ""  # rank 1 writes to its log file
    assert protocol.log_path(run_dir, 1).read_text() == "to stdout\nto stderr\n"

    results = protocol.read_results(run_dir)
    assert results[0]["status"] == results[1]["status"] == protocol.FAILED
    error = results[1]["error"]
    assert error["type"] == "ValueError" and error["message"] == "ValueError: bad batch"
    frames = [line for line in error["traceback"].splitlines() if line.strip().startswith("File ")]
    assert len(frames) == 2 and all(str(tmp_path / "train.py") in f for f in frames), error["traceback"]


def test_sys_exit_counts_as_the_script_ending(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {protocol.MODE: protocol.FULL, protocol.RUN_DIR: str(run_dir), "RANK": "0"}
    (tmp_path / "ok.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "bad.py").write_text("import sys\nsys.exit('no data found')\n")
    assert bootstrap(tmp_path, "ok.py", env=env).returncode == 0
    assert protocol.read_results(run_dir)[0]["status"] == protocol.FINISHED
    assert bootstrap(tmp_path, "bad.py", env=env).returncode == 1
    assert protocol.read_results(run_dir)[0]["error"]["message"] == "no data found"


def test_the_plugins_own_frames_are_left_out_or_marked_so_the_first_frame_is_the_users(tmp_path):
    """A stand-in that calls what fails (a torch operator, the user's collate function) is left out; one
    that raises itself (the write guard) keeps its frame, marked as the plugin's."""
    from vdk.plugin.ml_training.runtime import patching

    def collate(batch):
        raise ValueError("bad batch")

    wrapped = patching.with_arguments(collate, lambda arguments: None)  # a runtime frame between
    with pytest.raises(ValueError) as info:
        wrapped([1])
    frames = [line for line in describe(info.value)["traceback"].splitlines() if line.startswith("  File ")]
    assert all("vdk/plugin/ml_training/runtime" not in f and "vdk-ml-training" not in f for f in frames), frames
    assert frames[-1].endswith("in collate")

    job = tmp_path / "job"
    job.mkdir()
    script = (
        "import os, sys, traceback, json\n"
        "from vdk.plugin.ml_training.runtime import job_dir_protection\n"
        "from vdk.plugin.ml_training.runtime.report import describe\n"
        f"job_dir_protection.install({str(job)!r}, os.getcwd())\n"
        "try:\n"
        f"    open({str(job / 'x.pt')!r}, 'w')\n"
        "except PermissionError as e:\n"
        "    print(json.dumps(describe(e)))\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", script], cwd=work, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)["traceback"]
    frames = [line for line in trace.splitlines() if line.startswith("  File ")]
    assert frames[0].startswith('  File "<string>"')  # the user's code first
    assert frames[-1].startswith('  File "<vdk-ml-training smoke run: runtime/job_dir_protection.py>"'), frames
    assert "raise PermissionError(" in trace  # with its line


def test_the_runtime_imports_nothing_of_the_plugin_but_the_vocabulary():
    # The image builder ships runtime/ with the vocabulary below it: importing it must not need vdk-core or the rest.
    runtime = Path(protocol.__file__).parent
    for source in runtime.glob("*.py"):
        text = source.read_text()
        imports = [line for line in text.splitlines() if line.lstrip().startswith(("import ", "from "))]
        offending = [
            line
            for line in imports
            if (
                "vdk" in line
                and not any(f"vdk.plugin.ml_training.{room}" in line for room in ("runtime", "vocabulary"))
            )
            or "click" in line
        ]
        assert offending == [], f"{source.name}: {offending}"
    check = textwrap.dedent(
        """
        import sys
        sys.modules["vdk.api"] = None  # make any import of vdk-core fail
        import vdk.plugin.ml_training.runtime.bootstrap, vdk.plugin.ml_training.runtime.cpu_shims
        import vdk.plugin.ml_training.runtime.hf_shims, vdk.plugin.ml_training.runtime.steps
        import vdk.plugin.ml_training.runtime.lightning_shims, vdk.plugin.ml_training.runtime.smoke_rank
        import vdk.plugin.ml_training.runtime.spawned_workers, vdk.plugin.ml_training.runtime.rank_process
        from vdk.plugin.ml_training.runtime import smoke_rank
        smoke_rank.install_stand_ins("/tmp")  # the smoke run's stand-ins, virtual GPUs and device tracking
        print(any(m in sys.modules for m in ("transformers", "accelerate", "lightning", "pytorch_lightning")))
        """
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_in_an_image_gpu_code_runs_on_cpu_when_the_job_asks_for_it(tmp_path):
    """VDK_ML_TRAINING_ADAPT_TO_CPU in [ml-training.env]: the smoke run's CPU adaptations for a whole run
    (rehearsing on CPU-only nodes); without it, code that hard-codes NCCL fails on a machine without GPUs."""
    shutil.copy(EXAMPLES / "ddp-nccl" / "train.py", tmp_path / "train.py")
    command = torchrun_command("train.py", "--epochs", "1")
    clean = environ_without("VDK_ML_TRAINING_", "PET_")

    def run(**settings: str) -> subprocess.CompletedProcess:
        env = {**clean, protocol.PROGRESS_SECONDS: "0", **settings}
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    adapted = run(**{protocol.ADAPT_TO_CPU: "1"})
    assert adapted.returncode == 0, adapted.stderr
    assert "[vdk-ml-training] adapted for CPU: nccl->gloo" in adapted.stdout, adapted.stdout
    assert (tmp_path / "model.pt").is_file()  # the script ran to its end, as it would on GPUs

    as_written = run()
    assert as_written.returncode != 0
    assert "nccl" in as_written.stderr.lower() or "cuda" in as_written.stderr.lower(), as_written.stderr

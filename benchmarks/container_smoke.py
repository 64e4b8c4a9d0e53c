"""Wall time of `vdk run --container JOB` (the smoke run in the job's image) against its parts, side by side:

  floor           the engine running the same image with `python3 -c "import torch"`: a container of the
                  image is made, started, imports torch and ends (what no container run can go below)
  local smoke     `vdk run JOB` (the smoke run on this machine)
  container       `vdk run --container JOB`, the image already in the engine (the job unchanged)
  after a change  `vdk run --container JOB` after a one-line change of the code: the image is assembled
                  again and its new code layer loaded into the engine before the run

The job is examples/ddp-nccl (2 ranks, 2 optimizer steps) on a Debian bookworm base with Python 3.11 and
no torch: torch comes in through requirements.txt (the dependency layer is cached). The base is pushed to
a loopback registry and, for the container runs, pulled by podman once before measuring (as a user's
engine keeps it). Variants alternate within each round; medians are compared.

    .venv/bin/python benchmarks/container_smoke.py [--rounds 5] [--podman-dir DIR]

Target: container <= 1.5 x (floor + local smoke), with the base cached.
podman runs as CI runs it here (vfs storage, runc, host network): with vfs every container starts from a
full copy of the image's files, so the storage goes to memory (/dev/shm) when there is plenty, as the tests
do (--podman-dir to choose).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository root, for its tests package
from tests.support.base_images import LocalBases  # noqa: E402
from tests.support.debian_base import RUN_OPTIONS  # noqa: E402
from tests.support.e2e import TORCH_REQUIREMENT  # noqa: E402
from tests.support.e2e import example_job  # noqa: E402
from tests.support.e2e import vdk_environment  # noqa: E402
from tests.support.fixtures import memory_is_plenty  # noqa: E402
from tests.support.registry import Registry  # noqa: E402
from tests.support.registry import podman  # noqa: E402
from tests.support.registry import podman_command  # noqa: E402

VDK = Path(sys.executable).parent / "vdk"
TARGET = 1.5


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--podman-dir", type=Path, default=None, help="where podman's storage goes")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="container-smoke-"))
    parent = args.podman_dir or (Path("/dev/shm") if memory_is_plenty() else work)
    podman_root = Path(tempfile.mkdtemp(prefix="vdk-ml-podman-", dir=parent))
    registry = Registry(work / "registry")
    try:
        _measure(args.rounds, work, podman_root, registry)
    finally:
        registry.stop()
        podman(podman_root, "system", "reset", "--force", check=False, timeout=600)
        subprocess.run(["rm", "-rf", str(podman_root), str(work)], check=False)


def _measure(rounds: int, work: Path, podman_root: Path, registry: Registry) -> None:
    started = time.monotonic()
    base = LocalBases(podman_root, registry.host).debian
    print(f"Debian base {base}: {time.monotonic() - started:.1f} s (built, or uploaded from the cache)")
    job = example_job(
        "ddp-nccl",
        work,
        {"base_image": base, "nodes": "2", "procs_per_node": "2", "gpus_per_node": "0", "memory": "2Gi"},
        # CPU nodes: the CUDA code runs on the virtual GPUs a CPU rehearsal gets (README: runtime settings)
        env={"VDK_ML_TRAINING_ADAPT_TO_CPU": "1"},
        requirements=[TORCH_REQUIREMENT],
    )
    env = vdk_environment(registry.host, podman_root, work)
    env["VDK_ML_TRAINING_RUNS_DIR"] = str(work / "runs")
    started = time.monotonic()
    timed([str(VDK), "run", "--container", str(job)], env)
    seconds = time.monotonic() - started
    print(f"first container run (dependency layer, base and image loaded into podman): {seconds:.1f} s")
    image = _image_of(podman_root, job.name)
    engine, engine_env = podman_command(podman_root)
    floor_argv = [*engine, "run", "--rm", *RUN_OPTIONS, "--entrypoint", "python3", image, "-c", "import torch"]
    script = job / "train.py"
    original = script.read_text()
    changes = iter(range(1, 1000))

    def after_a_change() -> float:
        script.write_text(f"{original}\n# change {next(changes)}\n")
        return timed([str(VDK), "run", "--container", str(job)], env)

    variants = {
        "floor": lambda: timed(floor_argv, engine_env),
        "local smoke": lambda: timed([str(VDK), "run", str(job)], env),
        "container": lambda: timed([str(VDK), "run", "--container", str(job)], env),
        "after a change": after_a_change,
    }
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {rounds} rounds, variants alternate")
    times: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(rounds):
        order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
        for variant in order:
            times[variant].append(variants[variant]())
            if variant == "after a change":
                script.write_text(original)
                timed([str(VDK), "run", "--container", str(job)], env)  # back to the image the others run
        print(f"  round {round_ + 1}: " + "  ".join(f"{v} {t[-1]:.2f} s" for v, t in times.items()))
    medians = {v: statistics.median(t) for v, t in times.items()}
    parts = medians["floor"] + medians["local smoke"]
    ratio = medians["container"] / parts
    print("median: " + ", ".join(f"{v} {m:.2f} s" for v, m in medians.items()))
    print(
        f"container / (floor + local smoke) = {ratio:.2f}x ({'within' if ratio <= TARGET else 'OVER'} the "
        f"{TARGET}x target); container / floor = {medians['container'] / medians['floor']:.2f}x; "
        f"container / local smoke = {medians['container'] / medians['local smoke']:.2f}x; "
        f"after a change / (floor + local smoke) = {medians['after a change'] / parts:.2f}x"
    )


def _image_of(podman_root: Path, job: str) -> str:
    listed = podman(podman_root, "images", "--format", "{{.Repository}}:{{.Tag}}", f"localhost/vdk-ml-training/{job}")
    return listed.stdout.split()[0]


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Redeploy benchmark: this builder vs `buildah bud`, side by side, against a local registry.

A loopback docker-registry holds a base image of about 1 GB (busybox plus incompressible data
layers, like the CUDA libraries of a real PyTorch base). A 1 MB job with one requirement is built
and pushed:

  (a) first build   this builder with an empty dependency cache (base in the same registry: layers
                    mounted), and with the target in another registry (base streamed across);
                    buildah with an empty storage (pulls the base, builds, pushes).
  (b) one-line code change, rebuild + push
                    this builder (in-process, and as a fresh Python process);
                    buildah with its storage kept from the previous build (--layers cache).

buildah runs as CI can run it here: `--storage-driver vfs --isolation chroot`, no daemon.
Targets (issue 4): (b) <= 0.5 s for a 1 MB job, >= 10x faster than buildah's cold build, and
never slower than buildah's warm build.

    .venv/bin/python benchmarks/redeploy.py [--base-mb 1024] [--rebuilds 5] [--buildah-warm 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.image import layer_tarball
from vdk.plugin.ml_training.image import oci
from vdk.plugin.ml_training.image.build_plan import image_env
from vdk.plugin.ml_training.image.oci import OCI_MANIFEST
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.image.registry import file_chunks
from vdk.plugin.ml_training.image.runtime_layer import scan_runtime_package
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.source.job_files import SourceFile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for its tests package
from tests.support.registry import Registry  # the loopback docker-registry the image tests use

CHUNK = 4 << 20


def data_layer(directory: Path, index: int, size: int) -> layer_tarball.LayerBlob:
    """A layer holding `size` bytes of incompressible data (stored with gzip level 0: fast to make)."""
    src = directory / f"src{index}"
    src.mkdir(parents=True)
    block = hashlib.sha256(str(index).encode()).digest() + os.urandom(CHUNK)
    path = src / f"blob{index}.bin"
    with open(path, "wb") as f:
        written = 0
        while written < size:
            n = min(len(block), size - written)
            f.write(block[:n])
            written += n
    files = [SourceFile(f"blob{index}.bin", path, size)]
    blob = layer_tarball.write_layer("/opt/base-data", files, directory / "blobs", level=0)
    path.unlink()
    return blob


def busybox_layer(directory: Path) -> layer_tarball.LayerBlob:
    root = directory / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("busybox"), root / "bin" / "busybox")
    files = [SourceFile("bin/busybox", root / "bin" / "busybox", (root / "bin" / "busybox").stat().st_size, True)]
    for tool in ("sh", "ls", "cat", "env", "echo", "mkdir", "cp"):
        files.append(SourceFile(f"bin/{tool}", root / "bin" / tool, 0, link="busybox"))
    python = root / "usr" / "local" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$@"\n')
    files.append(SourceFile("usr/local/bin/python", python, python.stat().st_size, True))
    files.sort(key=lambda f: f.path)
    return layer_tarball.write_layer("/", files, directory / "blobs")


def push_base(registry: Registry, directory: Path, total_mb: int) -> tuple[str, int]:
    """Push a ~total_mb base (busybox + 4 data layers) as an OCI image; returns its reference."""
    layers = [busybox_layer(directory)]
    per_layer = total_mb * (1 << 20) // 4
    for i in range(4):
        layers.append(data_layer(directory, i, per_layer))
    config = oci.canonical_json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/usr/local/bin:/bin"], "Cmd": ["sh"]},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
            "history": [{"created_by": f"layer {i}"} for i in range(len(layers))],
        }
    )
    manifest = oci.canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": oci.CONFIG_TYPE[OCI_MANIFEST],
                "digest": oci.digest_of(config),
                "size": len(config),
            },
            "layers": [
                {"mediaType": oci.LAYER_TYPE[OCI_MANIFEST], "digest": layer.digest, "size": layer.size}
                for layer in layers
            ],
        }
    )
    with RegistryClient(registry.host) as client:
        for layer in layers:
            client.upload("bench/base", layer.digest, layer.size, lambda p=layer.path: file_chunks(p), "base layer")
        client.upload("bench/base", oci.digest_of(config), len(config), lambda: [config], "config")
        client.put_manifest("bench/base", "1", manifest, OCI_MANIFEST)
    shutil.rmtree(directory / "blobs")
    return f"{registry.host}/bench/base:1", sum(layer.size for layer in layers)


def make_wheel(directory: Path) -> None:
    directory.mkdir(parents=True)
    dist = "tinydep-1.0.dist-info"
    with zipfile.ZipFile(directory / "tinydep-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("tinydep/__init__.py", "VALUE = 1\n")
        zf.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")


def make_job(job: Path, base: str, wheelhouse: Path) -> None:
    """A 1 MB job: 40 modules of ~25 KB, an entrypoint, one requirement."""
    (job / "model").mkdir(parents=True)
    (job / "config.ini").write_text(
        f"[job]\ntype = ml-training\n[ml-training]\nbase_image = {base}\n"
        "base_python = python\nbase_python_version = 3.11\ngpus_per_node = 0\n"
    )
    (job / "requirements.txt").write_text(f"--no-index\n--find-links {wheelhouse}\ntinydep==1.0\n")
    (job / "train.py").write_text("from model import m00\n\nSTEP = 0\n\nif __name__ == '__main__':\n    m00.run()\n")
    for i in range(40):
        lines = [
            f"def f{j}(x):\n    return x * {i} + {j}  # {hashlib.md5(f'{i}-{j}'.encode()).hexdigest()}\n"
            for j in range(400)
        ]
        (job / "model" / f"m{i:02d}.py").write_text("".join(lines) + "\ndef run():\n    print('ok')\n")


def one_line_change(job: Path, n: int) -> None:
    path = job / "train.py"
    path.write_text(path.read_text().replace(f"STEP = {n - 1}", f"STEP = {n}", 1))


def ours(job: Path, registry: str) -> tuple[float, object]:
    spec = load_job_spec(job)
    start = time.perf_counter()
    image = build_and_push(spec, registry, audit.collect(job))
    return time.perf_counter() - start, image


def ours_fresh_process(job: Path, registry: str) -> float:
    code = (
        "import sys; from vdk.plugin.ml_training.image import build_and_push;"
        "from vdk.plugin.ml_training.job import load_job_spec; from vdk.plugin.ml_training.source import audit;"
        f"j={str(job)!r}; print(build_and_push(load_job_spec(j), {registry!r}, audit.collect(j)).reference)"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - start


def buildah_context(ctx: Path, job: Path, base: str) -> None:
    """The equivalent Dockerfile build: FROM base, COPY the same deps, runtime and code."""
    if ctx.exists():
        shutil.rmtree(ctx)
    ctx.mkdir(parents=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "-q",
            "--target",
            str(ctx / "deps"),
            "-r",
            str(job / "requirements.txt"),
            "--python-version",
            "3.11",
            "--python-platform",
            "x86_64-manylinux_2_28",
            "--only-binary",
            ":all:",
        ],
        check=True,
        capture_output=True,
        cwd=job,
    )
    for f in scan_runtime_package().files:
        dest = ctx / "lib" / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f.source, dest)
    shutil.copytree(job, ctx / "job")
    env = image_env("$PATH", None, with_deps=True)  # the environment this builder gives the image
    (ctx / "Dockerfile").write_text(
        f"FROM {base}\n"
        f"COPY deps {layout.DEPS_DIR}\nCOPY lib {layout.LIB_DIR}\nCOPY job {layout.JOB_DIR}\n"
        f"ENV {' '.join(f'{k}={v}' for k, v in env.items())}\nWORKDIR {layout.JOB_DIR}\n"
        f"CMD {json.dumps(layout.launch_command(load_job_spec(job), 'python'))}\n"
    )


def buildah(storage: Path, *args: str) -> None:
    argv = [
        "buildah",
        "--root",
        str(storage / "root"),
        "--runroot",
        str(storage / "run"),
        "--storage-driver",
        "vfs",
        *args,
    ]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(storage / "xdg"), "HOME": str(storage)}
    (storage / "xdg").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def buildah_build_push(storage: Path, ctx: Path, registry: str, tag: str) -> float:
    start = time.perf_counter()
    buildah(
        storage,
        "bud",
        "--layers",
        "--isolation",
        "chroot",
        "--tls-verify=false",
        "-q",
        "-t",
        "localhost/bench-job:latest",
        str(ctx),
    )
    buildah(
        storage,
        "push",
        "--tls-verify=false",
        "-q",
        "localhost/bench-job:latest",
        f"docker://{registry}/bench/buildah-job:{tag}",
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-mb", type=int, default=1024, help="size of the base image's data [1024]")
    parser.add_argument("--rebuilds", type=int, default=5, help="one-line-change rebuilds of this builder [5]")
    parser.add_argument("--buildah-warm", type=int, default=2, help="warm buildah rebuilds [2]")
    parser.add_argument("--skip-buildah", action="store_true")
    args = parser.parse_args()
    for tool in ("docker-registry", "busybox", *(() if args.skip_buildah else ("buildah",))):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (apt-get install docker-registry busybox-static buildah)")

    work = Path(tempfile.mkdtemp(prefix="vdk-redeploy-bench-"))
    os.environ["VDK_ML_TRAINING_CACHE_DIR"] = str(work / "cache")
    registries = []
    try:
        for name in ("registry", "other-registry"):
            registries.append(Registry(work / name))  # appended at once: stopped even if the next fails
        registry, other = registries
        print(f"setting up: base image of ~{args.base_mb} MB in {registry.host} ...", file=sys.stderr)
        base, base_bytes = push_base(registry, work / "base", args.base_mb)
        make_wheel(work / "wheels")
        job = work / "repo" / "bench-job"
        make_job(job, base, work / "wheels")
        rows: list[tuple[str, str, float]] = []

        cold, image = ours(job, f"{registry.host}/ml")
        rows.append(("a", "first build, this builder (base mounted, deps installed by uv)", cold))
        streamed, _ = ours(job, f"{other.host}/ml")
        rows.append(
            ("a", f"first build, this builder, base in another registry ({base_bytes / 1e9:.2f} GB streamed)", streamed)
        )

        times = []
        for n in range(1, args.rebuilds + 1):
            one_line_change(job, n)
            t, image = ours(job, f"{registry.host}/ml")
            times.append(t)
        rebuild = statistics.median(times)
        rows.append(("b", f"one-line change, this builder (median of {len(times)}, in-process)", rebuild))
        one_line_change(job, args.rebuilds + 1)
        fresh = ours_fresh_process(job, f"{registry.host}/ml")
        rows.append(("b", "one-line change, this builder (fresh python process)", fresh))
        code_mb = sum(p.stat().st_size for p in job.rglob("*") if p.is_file()) / 1e6
        pushed = sum(layer.size for layer in image.layers if layer.action == "uploaded")

        b_cold = b_warm = None
        if not args.skip_buildah:
            ctx = work / "ctx"
            buildah_context(ctx, job, base)
            print("buildah cold build (empty vfs storage) ...", file=sys.stderr)
            b_cold = buildah_build_push(work / "buildah-cold", ctx, registry.host, "cold")
            rows.append(("a", "first build, buildah bud + push (empty storage)", b_cold))
            warm = []
            for n in range(args.buildah_warm):
                one_line_change(job, args.rebuilds + 2 + n)
                shutil.copy(job / "train.py", ctx / "job" / "train.py")
                print(f"buildah warm rebuild {n + 1} ...", file=sys.stderr)
                warm.append(buildah_build_push(work / "buildah-cold", ctx, registry.host, f"warm{n}"))
            b_warm = statistics.median(warm)
            rows.append(
                ("b", f"one-line change, buildah bud + push (warm storage, --layers; median of {len(warm)})", b_warm)
            )

        print(
            f"\nRedeploy benchmark: base {base_bytes / 1e9:.2f} GB in 5 layers, job {code_mb:.2f} MB + 1 requirement,"
            f" loopback registry, {os.cpu_count()} cores"
        )
        for case, what, seconds in rows:
            print(f"  ({case}) {what:<84} {seconds:8.3f} s")
        print(f"  rebuild pushed {pushed / 1e3:.0f} KB (code layer) + config + manifest")
        print("ratios:")
        if b_cold:
            print(f"  this builder first build vs buildah cold          {b_cold / cold:8.1f}x faster  (base mounted)")
            print(
                f"  this builder first build vs buildah cold          {b_cold / streamed:8.1f}x faster  "
                "(base streamed from another registry)"
            )
            print(
                f"  this builder rebuild vs buildah cold              {b_cold / rebuild:8.1f}x faster  (target >= 10x)"
            )
            print(
                f"  this builder rebuild vs buildah warm              {b_warm / rebuild:8.1f}x faster  (target >= 1x)"
            )
        else:
            print("  (buildah skipped)")
        print("targets:")
        print(
            f"  rebuild+push <= 0.5 s for a 1 MB job: {'met' if rebuild <= 0.5 else 'NOT met'} "
            f"({rebuild:.3f} s in-process, {fresh:.3f} s fresh process)"
        )
        if b_cold:
            print(f"  >= 10x faster than buildah cold:     {'met' if b_cold / rebuild >= 10 else 'NOT met'}")
            print(f"  never slower than buildah warm:      {'met' if b_warm >= rebuild else 'NOT met'}")
        print(
            "notes: buildah uses vfs storage (no overlay here), which copies the root filesystem per layer;"
            " both push to the same loopback registry."
        )
    finally:
        for r in registries:
            r.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

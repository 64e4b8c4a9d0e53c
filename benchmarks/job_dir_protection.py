#!/usr/bin/env python3
"""What keeping the job directory unchanged costs a local run, side by side (issue 21, item 6).

A job directory of 200 small files (code, configs) and big files (`--big-mb` in all, in 4 files over the
4 MB copy limit, like a tokenizer, a few checkpoints or a small dataset kept beside the code) is prepared as a
local run's working directory, three ways:

  (a) links     big files as symbolic links, with the job directory read-only for the run (what a run does
                where it has mount namespaces): the working directory, plus the mount namespace that
                torchrun's agent enters (measured as a child process that protects the job directory and
                ends, against the same child without it);
  (b) copies    big files copied (what a run does where it has no mount namespaces, up to 2 GB);
  (c) the scan  of the job directory for secrets: whole files (every byte is searched for a private key)
                the first time, then from the cache of what big files held (a stat() per big file), against
                the first 8 KiB of each file (what it read before).

Each is run `--rounds` times (the page cache warm: the second and later runs of a job), medians reported.

    .venv/bin/python benchmarks/job_dir_protection.py [--big-mb 1024] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vdk.plugin.ml_training.local import job_dir_mount
from vdk.plugin.ml_training.local import workdir
from vdk.plugin.ml_training.source import content_scan
from vdk.plugin.ml_training.source.job_files import scan_job_dir

CHILD = "import sys\nfrom vdk.plugin.ml_training.local import job_dir_mount\n"


def make_job(root: Path, big_mb: int) -> Path:
    job = root / "job"
    for i in range(200):
        path = job / f"pkg{i % 10}" / f"module{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"def f{i}():\n    return {i}\n" * 50)
    block = os.urandom(1 << 20)
    for i in range(4):
        with open(job / "data" / f"part{i}.bin" if i else job / "tokenizer.bin", "wb") as f:
            for _ in range(big_mb // 4):
                f.write(block)
    return job


def timed(action, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="vdk-ml-bench-") as tmp:
        root = Path(tmp)
        (root / "job" / "data").mkdir(parents=True)
        job = make_job(root, args.big_mb)
        os.environ["VDK_ML_TRAINING_CACHE_DIR"] = str(root / "cache")
        scan_job_dir(job)  # the page cache warm for everyone

        def prepare(protected: bool):
            def run() -> None:
                into = root / "runs" / "work"
                shutil.rmtree(root / "runs", ignore_errors=True)
                workdir.prepare(job, into, protected=protected)

            return run

        def child(protect: bool):
            code = CHILD + (f"job_dir_mount.protect({str(job)!r})\n" if protect else "")
            return lambda: subprocess.run([sys.executable, "-c", code], check=True)

        def head_scan() -> None:
            for path in job.rglob("*"):
                if path.is_file():
                    with open(path, "rb") as f:
                        content_scan._PEM_PRIVATE_KEY.search(f.read(8192))

        protected = job_dir_mount.available()
        linked = timed(prepare(True), args.rounds)
        copied = timed(prepare(False), args.rounds)
        plain_child = timed(child(False), args.rounds)
        namespace_child = timed(child(True), args.rounds) if protected else float("nan")

        def first_scan() -> None:
            os.environ["VDK_ML_TRAINING_CACHE_DIR"] = tempfile.mkdtemp(dir=root)  # nothing remembered
            content_scan._remembered = None
            scan_job_dir(job)

        whole_scan = timed(first_scan, args.rounds)
        cached_scan = timed(lambda: scan_job_dir(job), args.rounds)
        first_kib = timed(head_scan, args.rounds)

    big = f"{args.big_mb} MB in 4 big files, 200 small files"
    print(f"job directory: {big}; medians of {args.rounds} rounds, page cache warm")
    print(f"(a) links + read-only job dir: working directory {linked:.3f} s", end="")
    if protected:
        print(
            f", namespace {namespace_child - plain_child:+.3f} s (child {namespace_child:.3f} s vs {plain_child:.3f} s)"
        )
    else:
        print(" (this machine has no mount namespaces: runs take (b))")
    print(f"(b) copies:                    working directory {copied:.3f} s = {copied / linked:.1f}x (a)")
    print(
        f"(c) secret scan, whole files:  {whole_scan:.3f} s the first time, {cached_scan:.3f} s after; "
        f"first 8 KiB only: {first_kib:.3f} s"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What progress lines cost a training step, side by side in one process.

A small CPU training loop (a 2-layer MLP, batch 32, SGD; each step about as short as a step gets on a
CPU) runs in alternating rounds:

  plain     no hooks
  counted   the StepCounter alone (optimizer-step hook, backward/GradScaler capture)
  reported  the StepCounter and a ProgressReporter with the default 30 s period (no line is due)
  printing  a reporter with a 0 s period: a line, and so a loss read, at every step (the worst case)
  posting   `printing` with a TrainJob's Kubeflow status poster following the reporter: every line's figures
            handed to it, its thread posting to a stand-in server that takes 50 ms an answer (the worst case
            again: the figures of every step offered; on a cluster the lines come every 30 s)
  recorded  the StepCounter and the StepRecorder of a full local run (result file at most every 5 s)
  watched   what a cluster rank runs: the StepCounter, a reporter and the stall watchdog with its default
            timeouts (a thread that looks at the step count every 10 s; nothing is added to a step)
  watched+  the same with the watchdog looking every 50 ms (its shortest poll): the cost of the thread itself
  sampled   what a node's local rank 0 runs: `watched` and the GPU sampler at its default 1 Hz, reading 8 GPUs
            with GPM through the real nvidia-ml-py from a fake libnvidia-ml (tests/support/fake_nvml.c, built
            with cc): nothing is added to a step
  sampled+  the same with the sampler at 20 Hz: the cost of its thread made visible
  series    `watched` and the run's series at their default period (2 s): a step kept once a period, its
            thread writing TensorBoard's event files (tensorboardX) into a temporary directory
  series+   the same with a period of 50 ms: a step's loss, rate and learning rate kept and written by its
            thread 20 times a second (the cost of the thread and the writer made visible)

Prints the median time per step of each, and the cost per step over `plain` in microseconds and
percent; then, without the noise of a training step, what each hook costs by itself: the
optimizer-step hook with and without a reporter between lines, and keeping a backward() loss.
The goal: counting and reporting cost a few microseconds per step, far below a GPU step (>= 1 ms), and the
stall watchdog, the Kubeflow status poster, the GPU sampler and the series (TensorBoard, MLflow) nothing
measurable per step; the sampler's own
CPU use at 1 Hz is printed (CPU time of one sample of 8 GPUs, as a share of a core).

    .venv/bin/python benchmarks/progress_overhead.py [--steps 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import ctypes
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for its tests package
from tests.support import fake_nvml  # the fake libnvidia-ml the sampler's tests use

from vdk.plugin.ml_training.runtime.board_events import BoardWriter
from vdk.plugin.ml_training.runtime.bootstrap import FULL_RUN_RECORD_SECONDS
from vdk.plugin.ml_training.runtime.kubeflow_status import StatusPoster
from vdk.plugin.ml_training.runtime.kubeflow_status import StatusSettings
from vdk.plugin.ml_training.runtime.metrics import Shown
from vdk.plugin.ml_training.runtime.metrics import _PrintedLines
from vdk.plugin.ml_training.runtime.progress_lines import Figures
from vdk.plugin.ml_training.runtime.progress_lines import ProgressReporter
from vdk.plugin.ml_training.runtime.report import RankReport
from vdk.plugin.ml_training.runtime.report import StepRecorder
from vdk.plugin.ml_training.runtime.series import DEFAULT_SECONDS as SERIES_SECONDS
from vdk.plugin.ml_training.runtime.series import RunFacts
from vdk.plugin.ml_training.runtime.series import SeriesRecorder
from vdk.plugin.ml_training.runtime.steps import StepCounter
from vdk.plugin.ml_training.runtime.watchdog import DEFAULT_STALL_SECONDS
from vdk.plugin.ml_training.runtime.watchdog import DEFAULT_STARTUP_SECONDS
from vdk.plugin.ml_training.runtime.watchdog import Watchdog
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings

GPUS = 8


def load_fake_nvml() -> bool:
    """Build the fake libnvidia-ml and load it, so that nvidia-ml-py finds it by name; False without cc."""
    try:
        directory = fake_nvml.build(Path(tempfile.gettempdir()) / "vdk-ml-training-fake-nvml")
    except (RuntimeError, OSError) as e:
        print(f"no GPU sampler rounds: {e}")
        return False
    script = fake_nvml.Script()
    for _ in range(GPUS):
        gpu = script.gpu(*fake_nvml.H100, gpm=True)
        script.tick(gpu, sm=80.0, occupancy=40.0, memory=30 * fake_nvml.GIB, power_mw=600_000)
    os.environ["FAKE_NVML_SCRIPT"] = str(script.write(directory / "benchmark.tsv"))
    ctypes.CDLL(str(directory / fake_nvml.LIBRARY), mode=ctypes.RTLD_GLOBAL)  # found by its soname from now on
    return True


def sampler(period: float, counter):
    from vdk.plugin.ml_training.runtime import nvml_devices
    from vdk.plugin.ml_training.runtime.gpu_sampler import GpuSampler
    from vdk.plugin.ml_training.runtime.gpu_sampler import SamplerSettings

    settings = SamplerSettings(period=period, line_seconds=0)
    return GpuSampler(settings, nvml_devices.open_devices(), lambda: counter.steps, out=io.StringIO())


def loop(steps: int) -> float:
    """Seconds per step of a small training loop."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 1)
    for _ in range(20):  # warm-up
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    started = time.perf_counter()
    for _ in range(steps):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return (time.perf_counter() - started) / steps


def measure(variant: str, steps: int) -> float:
    if variant == "plain":
        return loop(steps)
    counter = StepCounter().install()
    sink = io.StringIO()
    if variant == "reported":
        ProgressReporter(period=30, out=sink).attach(counter)
    elif variant == "printing":
        ProgressReporter(period=0, out=sink).attach(counter)
    poster = None
    if variant == "posting":
        reporter = ProgressReporter(period=0, out=sink).attach(counter)
        poster = StatusPoster(StatusSettings("https://status.invalid/", period=0.0), send=_slow_server).follow(reporter)
    run_dir = tempfile.TemporaryDirectory()
    if variant == "recorded":
        counter.listeners.append(StepRecorder(RankReport(run_dir.name, 0, 0), period=FULL_RUN_RECORD_SECONDS))
    watch = sampled = None
    if variant.startswith("sampled"):
        sampled = sampler(1.0 if variant == "sampled" else 0.05, counter).start()
    series = None
    if variant.startswith("series"):
        writer = BoardWriter(os.path.join(run_dir.name, "board"), RunFacts())
        series = SeriesRecorder([writer], SERIES_SECONDS if variant == "series" else 0.05).attach(counter)
    if variant.startswith(("watched", "sampled", "series")):
        ProgressReporter(period=30, out=sink).attach(counter)
        settings = WatchdogSettings(DEFAULT_STALL_SECONDS, DEFAULT_STARTUP_SECONDS)
        if variant == "watched+":
            settings = WatchdogSettings(1.5, 1.5)  # a poll every 50 ms; no stall: the loop steps all the time
        watch = Watchdog(settings, "0", lambda: counter.steps, exit=_no_exit).start()
    try:
        return loop(steps)
    finally:
        if poster is not None:
            poster.close()
            assert poster.posted and not poster.failures, (poster.posted, poster.failures)
        if sampled is not None:
            sampled.finish()
            assert sampled.failed is None, sampled.failed
        if series is not None:
            series.finish("finished")
            assert series.writers, "the series' writer failed"
        if watch is not None:
            watch.stop()
            assert watch.fired is None, "a healthy loop was taken for a stalled one"
        counter.uninstall()
        run_dir.cleanup()


def _slow_server(settings, payload) -> None:
    time.sleep(0.05)


def _no_exit(code: int) -> None:
    raise AssertionError(f"the watchdog would have ended the benchmark with {code}")


def hook_costs(calls: int = 100_000, gpus: bool = False) -> dict[str, float]:
    """Microseconds per call of the hooks themselves."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    loss = (weight * 2).sum()
    counter = StepCounter()  # not installed: its hooks are called directly

    def per_call(hook, *args) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            hook(*args)
        return (time.perf_counter() - started) / calls * 1e6

    out = {"optimizer-step hook": per_call(counter._after_step, optimizer, (), {})}
    ProgressReporter(period=30, out=io.StringIO()).attach(counter)
    out["optimizer-step hook + reporter"] = per_call(counter._after_step, optimizer, (), {})
    with tempfile.TemporaryDirectory() as run_dir:
        counter.listeners.append(StepRecorder(RankReport(run_dir, 0, 0), period=3600))
        out["hook + reporter + step recorder"] = per_call(counter._after_step, optimizer, (), {})
    series = SeriesRecorder([], period=3600).attach(counter)
    series._due = time.monotonic() + 3600  # between two points
    out["hook + reporter + step recorder + series"] = per_call(counter._after_step, optimizer, (), {})
    series.finish("finished")
    out["keeping a backward() loss"] = per_call(counter._keep, loss)
    printed = _PrintedLines(io.StringIO(), Shown([SeriesRecorder([], period=3600)]))
    out["a line the script prints, read for its values"] = per_call(printed.write, "epoch 3: val_loss=0.2 acc=0.9\n")
    poster = StatusPoster(StatusSettings("https://status.invalid/", period=3600), send=lambda settings, payload: None)
    out["figures offered to the Kubeflow status poster"] = per_call(poster.offer, Figures(1, 100, 0.5))
    poster.close()
    # the watchdog adds no call to a step: its thread looks at the count, every 10 s with the default timeouts
    watch = Watchdog(WatchdogSettings(DEFAULT_STALL_SECONDS, DEFAULT_STARTUP_SECONDS), "0", lambda: counter.steps)
    out["watchdog check (its thread, every 10 s)"] = per_call(watch.check)
    if gpus:
        sample = sampler(1.0, counter)
        started = time.process_time()
        sample_calls = 2000
        for _ in range(sample_calls):
            sample.sample()
        out[f"GPU sample of {GPUS} GPUs (its thread, once a second)"] = (
            (time.process_time() - started) / sample_calls * 1e6
        )
        sample.finish()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gpus = load_fake_nvml()
    variants = ["plain", "counted", "reported", "printing", "posting", "recorded", "watched", "watched+"]
    variants += ["sampled", "sampled+"] if gpus else []
    variants += ["series", "series+"]
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for variant in variants:
            times[variant].append(measure(variant, args.steps))
    base = statistics.median(times["plain"])
    print(f"{args.rounds} rounds of {args.steps} steps, torch {torch.__version__}, 1 thread")
    print(f"{'variant':<10} {'us/step':>9} {'cost us/step':>13} {'cost %':>8}")
    for variant in variants:
        median = statistics.median(times[variant])
        cost = (median - base) * 1e6
        print(f"{variant:<10} {median * 1e6:9.1f} {cost:13.2f} {100 * cost / (base * 1e6):7.1f}%")
    posting = statistics.median(times["posting"]) - statistics.median(times["printing"])
    print(f"the Kubeflow status poster's own cost (posting - printing): {posting * 1e6:.2f} us/step")
    watched = statistics.median(times["watched"]) - statistics.median(times["reported"])
    print(f"the stall watchdog's own cost (watched - reported): {watched * 1e6:.2f} us/step")
    series = statistics.median(times["series"]) - statistics.median(times["watched"])
    print(f"the series' own cost at their default period (series - watched): {series * 1e6:.2f} us/step")
    if gpus:
        sampled = statistics.median(times["sampled"]) - statistics.median(times["watched"])
        print(f"the GPU sampler's own cost at 1 Hz (sampled - watched): {sampled * 1e6:.2f} us/step")
    print()
    costs = hook_costs(gpus=gpus)
    for name, micros in costs.items():
        print(f"{name:<50} {micros:8.2f} us/call")
    for name, micros in costs.items():
        if name.startswith("GPU sample"):
            print(
                f"the GPU sampler at 1 Hz uses {micros / 1e6:.4%} of a core ({GPUS} GPUs: the CPU time of its samples "
                "in the binding and the sampler; a real driver's own time per NVML call comes on top)"
            )


if __name__ == "__main__":
    main()

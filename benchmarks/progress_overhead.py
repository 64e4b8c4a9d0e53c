#!/usr/bin/env python3
"""What progress lines cost a training step, side by side in one process.

A small CPU training loop (a 2-layer MLP, batch 32, SGD; each step about as short as a step gets on a
CPU) runs in alternating rounds:

  plain     no hooks
  counted   the StepCounter alone (optimizer-step hook, backward/GradScaler capture)
  reported  the StepCounter and a ProgressReporter with the default 30 s period (no line is due)
  printing  a reporter with a 0 s period: a line, and so a loss read, at every step (the worst case)
  recorded  the StepCounter and the StepRecorder of a full local run (result file at most every 5 s)
  watched   what a cluster rank runs: the StepCounter, a reporter and the stall watchdog with its default
            timeouts (a thread that looks at the step count every 10 s; nothing is added to a step)
  watched+  the same with the watchdog looking every 50 ms (its shortest poll): the cost of the thread itself

Prints the median time per step of each, and the cost per step over `plain` in microseconds and
percent; then, without the noise of a training step, what each hook costs by itself: the
optimizer-step hook with and without a reporter between lines, and keeping a backward() loss.
The goal: counting and reporting cost a few microseconds per step, far below a GPU step (>= 1 ms), and the
stall watchdog nothing measurable.

    .venv/bin/python benchmarks/progress_overhead.py [--steps 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time

import torch

from vdk.plugin.ml_training.runtime.bootstrap import FULL_RUN_RECORD_SECONDS
from vdk.plugin.ml_training.runtime.progress_lines import ProgressReporter
from vdk.plugin.ml_training.runtime.report import RankReport
from vdk.plugin.ml_training.runtime.report import StepRecorder
from vdk.plugin.ml_training.runtime.steps import StepCounter
from vdk.plugin.ml_training.runtime.watchdog import DEFAULT_STALL_SECONDS
from vdk.plugin.ml_training.runtime.watchdog import DEFAULT_STARTUP_SECONDS
from vdk.plugin.ml_training.runtime.watchdog import Watchdog
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings


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
    run_dir = tempfile.TemporaryDirectory()
    if variant == "recorded":
        counter.listeners.append(StepRecorder(RankReport(run_dir.name, 0, 0), period=FULL_RUN_RECORD_SECONDS))
    watch = None
    if variant.startswith("watched"):
        ProgressReporter(period=30, out=sink).attach(counter)
        settings = WatchdogSettings(DEFAULT_STALL_SECONDS, DEFAULT_STARTUP_SECONDS)
        if variant == "watched+":
            settings = WatchdogSettings(1.5, 1.5)  # a poll every 50 ms; no stall: the loop steps all the time
        watch = Watchdog(settings, "0", lambda: counter.steps, exit=_no_exit).start()
    try:
        return loop(steps)
    finally:
        if watch is not None:
            watch.stop()
            assert watch.fired is None, "a healthy loop was taken for a stalled one"
        counter.uninstall()
        run_dir.cleanup()


def _no_exit(code: int) -> None:
    raise AssertionError(f"the watchdog would have ended the benchmark with {code}")


def hook_costs(calls: int = 100_000) -> dict[str, float]:
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
    out["keeping a backward() loss"] = per_call(counter._keep, loss)
    # the watchdog adds no call to a step: its thread looks at the count, every 10 s with the default timeouts
    watch = Watchdog(WatchdogSettings(DEFAULT_STALL_SECONDS, DEFAULT_STARTUP_SECONDS), "0", lambda: counter.steps)
    out["watchdog check (its thread, every 10 s)"] = per_call(watch.check)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = ["plain", "counted", "reported", "printing", "recorded", "watched", "watched+"]
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
    watched = statistics.median(times["watched"]) - statistics.median(times["reported"])
    print(f"the stall watchdog's own cost (watched - reported): {watched * 1e6:.2f} us/step")
    print()
    for name, micros in hook_costs().items():
        print(f"{name:<42} {micros:6.2f} us/call")


if __name__ == "__main__":
    main()

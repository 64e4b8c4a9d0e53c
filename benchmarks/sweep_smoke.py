"""Wall time of a 16-trial sweep's smoke check against one trial's smoke check, side by side: `vdk run` of
examples/lr-sweep (16 trials: every trial's arguments checked by the script's parser, the two extreme trials'
smoke steps, their metric) and `vdk run` of the same job without its sweep, its arguments one trial's values
(the largest: the heaviest of the two extremes). Both through the whole `vdk` command, as a user waits for them;
the variants alternate within each round and the medians are compared.

How the sweep stays near one trial: the arguments of all 16 trials are checked in one interpreter that runs the
script until it parses its command line (its imports done: torch) and forks a child per trial there
(runtime/argument_check.py), and the two extreme trials' smoke runs run at the same time as that check.

    .venv/bin/python benchmarks/sweep_smoke.py [--rounds 3]

Target: the sweep's smoke check <= 2 x one trial's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vdk.plugin.ml_training.job import load_job_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lr-sweep"
VDK = Path(sys.executable).parent / "vdk"
TARGET = 2.0


def one_trial_job(folder: Path) -> Path:
    """The example without its sweep: args with the largest extreme trial's values."""
    spec = load_job_spec(EXAMPLE)
    assert spec.sweep is not None and spec.sweep.trials == 16
    values = spec.sweep.extremes()[-1]
    trial = spec.trial(values)
    job = folder / "lr-one-trial"
    shutil.copytree(EXAMPLE, job)
    config = (job / "config.ini").read_text()
    config = re.sub(r"\n\[ml-training\.sweep\]\n(?:[^\[]*\n)", "\n", config)
    config = re.sub(r"(?m)^args = .*$", "args = " + " ".join(trial.args), config)
    (job / "config.ini").write_text(config)
    assert load_job_spec(job).sweep is None
    return job


def timed(job: Path) -> float:
    started = time.monotonic()
    done = subprocess.run([str(VDK), "run", str(job)], capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"vdk run {job} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="vdk-bench-sweep-"))
    try:
        single = one_trial_job(folder)
        timed(single)  # warm: caches of the import check, the page cache
        sweep_times, trial_times = [], []
        for round_number in range(args.rounds):
            trial_times.append(timed(single))
            sweep_times.append(timed(EXAMPLE))
            print(
                f"round {round_number + 1}: one trial {trial_times[-1]:.2f} s, 16-trial sweep {sweep_times[-1]:.2f} s"
            )
        one, sweep = statistics.median(trial_times), statistics.median(sweep_times)
        ratio = sweep / one
        print(f"one trial's smoke check (vdk run): {one:.2f} s (median of {args.rounds})")
        print(f"16-trial sweep's smoke check (vdk run): {sweep:.2f} s (median of {args.rounds})")
        print(f"ratio: {ratio:.2f}x (target <= {TARGET}x)")
        return 0 if ratio <= TARGET else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

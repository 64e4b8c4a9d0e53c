"""The real-GPU check, in one call on a machine with a GPU (run-on-gpu.sh runs it once the carried wheels are
installed): each part with its time budget, all of them inside the deadline, the report rewritten after each.

    python -m functional_tests.gpu.check --out DIR [--seconds 480] [--dry-run] [--cases a,b]

1. the environment: GPU, driver, CUDA, torch and the libraries, as that machine has them;
2. the real-GPU functional tests (pytest, functional_tests/test_gpu_*_real.py): the GPU sampler during a
   short real training against nvidia-smi at the same moments, the usage summary and advice from those
   samples, the idle policy stopping an idle GPU run, the device rules of the smoke check against CUDA's;
3. `vdk run --full` of the examples that fit one GPU, their step rates and losses;
4. the agreement table: every case of cases.py, the smoke check's verdict beside the real GPU's.

`--dry-run` (a machine without a GPU: the CPU-side test of this check) skips what needs a GPU and says so;
the functional tests then skip themselves, and a case's GPU side runs only when its job asks for no GPU.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from functional_tests.gpu import agreement
from functional_tests.gpu import cases as catalogue
from functional_tests.gpu import runs
from functional_tests.gpu.cases import ROOT
from functional_tests.gpu.report import PartFailed
from functional_tests.gpu.report import Report
from functional_tests.gpu.report import Skip

FIGURES_ENV = "VDK_ML_TRAINING_GPU_CHECK_FIGURES"  # where the functional tests leave their figures (JSON lines)
FUNCTIONAL_TESTS = ["functional_tests/test_gpu_sampler_real.py", "functional_tests/test_gpu_device_rules_real.py"]
FULL_RUN_EXAMPLES = ["single-gpu-loop", "ddp-nccl", "hf-trainer", "lr-sweep"]
SWEEP_TRIALS = 4  # lr-sweep's trials in its full run here (of 16), one after another, to fit the check's time
RESERVE = 15.0  # seconds kept after the last part, to write the report
BUDGETS = {"environment": 30.0, "functional tests": 170.0, "full runs": 130.0}
PACKAGES = ("torch", "transformers", "accelerate", "lightning", "nvidia-ml-py", "vdk-core", "vdk-ml-training", "uv")


class Deadline:
    def __init__(self, seconds: float):
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return self.at - time.monotonic() - RESERVE

    def budget(self, wanted: float) -> float:
        left = self.left()
        if left < 10:
            raise Skip(f"the check's time ran out before this part ({left + RESERVE:.0f} s left)")
        return min(wanted, left)


def gpu_present() -> str | None:
    """Why there is no GPU to check on, or None when torch and NVML both find one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return f"torch {torch.__version__} finds no GPU"
    except Exception as e:  # noqa: BLE001
        return f"torch cannot be imported: {e}"
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi"
    return None


def environment() -> dict:
    env: dict = {"python": platform.python_version(), "executable": sys.executable, "cpus": os.cpu_count()}
    for name in PACKAGES:
        try:
            env[f"version {name}"] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            env[f"version {name}"] = None
    import torch

    env["torch"] = torch.__version__
    env["cuda"] = torch.version.cuda  # what torch was built for (no CUDA context here: the GPU stays the tests')
    smi = shutil.which("nvidia-smi")
    if smi:
        query = "--query-gpu=name,driver_version,memory.total,mig.mode.current,compute_cap"
        done = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        fields = [f.strip() for f in done.stdout.strip().splitlines()[0].split(",")] if done.stdout.strip() else []
        if len(fields) == 5:
            env["gpu"], env["driver"], env["gpu_memory"], env["mig_mode"], env["capability"] = fields
        env["nvidia-smi"] = done.stdout.strip() or done.stderr.strip()[:300]
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=60)
    env["pip check"] = (check.stdout + check.stderr).strip()[-2000:]
    return env


def functional_tests(report: Report, entry: dict, deadline: Deadline, work: Path) -> None:
    figures = work / "figures.jsonl"
    junit = work / "functional.xml"
    env = runs.clean_env({FIGURES_ENV: str(figures)})
    command = [sys.executable, "-m", "pytest", *FUNCTIONAL_TESTS, "--noconftest", "-p", "no:cacheprovider"]
    command += ["-q", "-rA", "-s", f"--junitxml={junit}"]
    code, out = runs._run(command, deadline.budget(BUDGETS["functional tests"]), env=env, cwd=ROOT)
    results = _junit(junit)
    entry["tests"] = results
    entry["output_tail"] = runs._tail(out, 40)
    for line in figures.read_text().splitlines() if figures.exists() else []:
        record = json.loads(line)
        report.data.setdefault(record.pop("part"), {}).update(record)
    if code is None:
        raise TimeoutError("pytest ran out of its time: " + runs._tail(out, 3))
    counts = {o: sum(1 for r in results if r["outcome"] == o) for o in ("passed", "failed", "skipped", "error")}
    entry["detail"] = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    if counts["failed"] or counts["error"] or code not in (0, 5):
        raise PartFailed(entry["detail"] or f"pytest exited {code}")
    if counts["skipped"] and not counts["passed"]:
        reasons = sorted({r.get("message", "") for r in results if r["outcome"] == "skipped"})
        raise Skip(f"{entry['detail']}: {'; '.join(reasons)[:300]}")


def _junit(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "")[:500]
        out.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome, "message": message})
    return out


def full_runs(report: Report, entry: dict, deadline: Deadline, work: Path) -> None:
    results = []
    report["full_runs"] = results
    for name in FULL_RUN_EXAMPLES:
        job = work / "jobs" / name
        shutil.copytree(ROOT / "examples" / name, job)
        if name == "lr-sweep":
            config = (job / "config.ini").read_text().replace("trials = 16", f"trials = {SWEEP_TRIALS}")
            (job / "config.ini").write_text(config.replace("parallel = 4", "parallel = 1"))
        left = deadline.left()
        if left < 20:
            results.append({"example": name, "passed": None, "error": "not run: the part's time ran out"})
            continue
        run = runs.full_run(job, name, work / "runs", min(left, 120.0))
        if name == "lr-sweep":
            run.layout = f"{SWEEP_TRIALS} of its 16 trials, one after another; " + run.layout
        results.append(run.to_dict())
        report.write()
    failed = [r["example"] for r in results if r.get("passed") is False]
    entry["detail"] = f"{sum(1 for r in results if r.get('passed'))} of {len(results)} passed"
    if failed:
        raise PartFailed(f"{entry['detail']}; failed: {', '.join(failed)}")


def agreement_table(report: Report, entry: dict, deadline: Deadline, work: Path, chosen: list, has_gpu: bool) -> None:
    rows: list[dict] = []
    report["agreement"] = rows
    lock = threading.Lock()

    def one(case: catalogue.Case) -> dict:
        row = {"case": case.name, "kind": case.kind, "source": case.source, "expect": case.expect}
        place = work / "cases" / case.name
        if case.skip:
            row["agreement"] = agreement.Agreement(agreement.NOT_COMPARED, "not run", case.skip).to_dict()
            return row
        left = deadline.left()
        if left < 20:
            row["agreement"] = agreement.Agreement(
                agreement.NOT_COMPARED, "not run", "the check's time ran out before this case"
            ).to_dict()
            return row
        smoke_job = case.write(place / "smoke", port=runs.free_port())
        gpu_job = case.write(place / "gpu", port=runs.free_port())
        smoke = runs.smoke_verdict(smoke_job, place / "smoke-run", min(left, 240.0))
        needs = runs.gpu_needed(gpu_job)
        if needs and not has_gpu:
            gpu, record = agreement.Verdict(None, note="no GPU on this machine"), {}
        else:
            gpu, record = runs.gpu_verdict(case, gpu_job, place / "gpu-run", min(deadline.left(), 180.0))
        row.update(smoke=smoke.to_dict(), gpu=gpu.to_dict(), gpu_record=record)
        row["agreement"] = agreement.compare(smoke, gpu, case.known_cause).to_dict()
        if case.expect and smoke.passed is not None and smoke.passed != (case.expect == "pass"):
            row["agreement"]["note"] = f"the tests expect the smoke check to {case.expect} here"
        return row

    def record(case: catalogue.Case) -> None:
        try:
            row = one(case)
        except Exception as e:  # noqa: BLE001 - one case's crash is its row, not the end of the table
            row = {"case": case.name, "kind": case.kind, "source": case.source}
            row["agreement"] = agreement.Agreement(agreement.NOT_COMPARED, "the check failed", repr(e)).to_dict()
        with lock:
            rows.append(row)
            rows.sort(key=lambda r: order[r["case"]])
            report.write()

    order = {c.name: i for i, c in enumerate(chosen)}
    workers = max(1, min(8, (os.cpu_count() or 2) // 2))
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(record, chosen))
    outcomes = [agreement.Agreement(**{k: r["agreement"][k] for k in ("outcome", "summary", "cause")}) for r in rows]
    report["agreement_tally"] = agreement.tally(outcomes)
    report["disagreements"] = [
        {"case": r["case"], **r["agreement"]} for r in rows if r["agreement"]["outcome"] != agreement.AGREE
    ]
    tally = report["agreement_tally"]
    entry["detail"] = ", ".join(f"{k}: {v}" for k, v in tally.items() if v)
    if tally[agreement.UNEXPLAINED]:
        raise PartFailed(f"{tally[agreement.UNEXPLAINED]} difference(s) nothing explains: {entry['detail']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seconds", type=float, default=480.0, help="the whole check's time")
    parser.add_argument("--dry-run", action="store_true", help="skip what needs a GPU (a CPU-side test)")
    parser.add_argument("--cases", default="", help="only these cases of the table (comma-separated names)")
    options = parser.parse_args(argv)
    deadline = Deadline(options.seconds)
    report = Report(options.out, options.dry_run, options.seconds)
    why_not = "a dry run" if options.dry_run else gpu_present()
    chosen = catalogue.all_cases()
    if options.cases:
        names = set(options.cases.split(","))
        chosen = [c for c in chosen if c.name in names]
    work = Path(tempfile.mkdtemp(prefix="vdk-gpu-check-"))
    setup = options.out / "setup.log"
    with report.part("environment", BUDGETS["environment"]) as entry:
        report["environment"] = environment()
        if setup.exists():
            report["setup_tail"] = runs._tail(setup.read_text(errors="replace"), 30)
        entry["detail"] = f"no GPU: {why_not}" if why_not else report["environment"].get("gpu", "")
    with report.part("functional tests", BUDGETS["functional tests"]) as entry:
        functional_tests(report, entry, deadline, work)
    with report.part("full runs", BUDGETS["full runs"]) as entry:
        if why_not:
            raise Skip(f"needs a GPU ({why_not})")
        full_runs(report, entry, deadline, work)
    with report.part("agreement", None) as entry:
        deadline.budget(60)
        agreement_table(report, entry, deadline, work, chosen, has_gpu=why_not is None)
    report.write()
    shutil.rmtree(work, ignore_errors=True)
    print(Path(options.out / "gpu-report.txt").read_text())
    failed = [p["name"] for p in report["parts"] if p["status"] == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

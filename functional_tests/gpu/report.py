"""The check's one report: `gpu-report.json` (everything measured) and `gpu-report.txt` (a short text table of
it), rewritten whole after every part, so that a check stopped by its deadline still leaves what it had.

A part runs under `Report.part(name, budget)`: its status (passed, failed, skipped, out of time), its time and
its budget are recorded, and an exception inside it is recorded as its failure, never the end of the check.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from functional_tests.gpu import agreement

JSON_NAME = "gpu-report.json"
TEXT_NAME = "gpu-report.txt"
PASSED, FAILED, SKIPPED, OUT_OF_TIME = "passed", "failed", "skipped", "out of time"


class Skip(Exception):
    """Raised inside a part: it does not apply here (no GPU, the check's time ran out before it)."""


class PartFailed(Exception):
    """Raised inside a part: it ran, and what it checks did not hold (the message says what)."""


class Report:
    def __init__(self, out_dir: Path, dry_run: bool = False, budget_seconds: float | None = None):
        self.out_dir = Path(out_dir)
        self.started = time.time()
        self.data: dict[str, Any] = {
            "check": "vdk-ml-training real-GPU check (functional_tests/gpu/run-on-gpu.sh)",
            "started": _iso(self.started),
            "dry_run": dry_run,
            "budget_seconds": budget_seconds,
            "environment": {},
            "parts": [],
        }

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.write()

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @contextmanager
    def part(self, name: str, budget: float | None = None) -> Iterator[dict[str, Any]]:
        """Run one part; what the body puts in the yielded dict (`detail`, ...) is kept with its status."""
        entry: dict[str, Any] = {"name": name, "status": PASSED, "budget_seconds": budget}
        self.data["parts"].append(entry)
        started = time.monotonic()
        try:
            yield entry
        except Skip as e:
            entry["status"], entry["detail"] = SKIPPED, str(e)
        except PartFailed as e:
            entry["status"], entry["detail"] = FAILED, str(e)
        except TimeoutError as e:
            entry["status"], entry["detail"] = OUT_OF_TIME, str(e)
        except Exception as e:  # noqa: BLE001 - a part's crash is its failure, the check goes on
            entry["status"] = FAILED
            entry["detail"] = f"{type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc()[-3000:]
        finally:
            entry["seconds"] = round(time.monotonic() - started, 1)
            self.write()

    def write(self) -> None:
        self.data["finished"] = _iso(time.time())
        self.data["seconds"] = round(time.time() - self.started, 1)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        _write(self.out_dir / JSON_NAME, json.dumps(self.data, indent=2, default=str) + "\n")
        _write(self.out_dir / TEXT_NAME, text(self.data))


def _write(path: Path, content: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(content)
    os.replace(temporary, path)


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """Plain columns, left-aligned, two spaces apart."""
    cells = [[str(c) if c is not None else "-" for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def _number(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"
    return str(value)


def text(data: dict[str, Any]) -> str:
    """The short text table of a report's data."""
    env = data.get("environment", {})
    lines = [
        f"vdk-ml-training real-GPU check, {data.get('started')} ({data.get('seconds')} s"
        + (f" of {data['budget_seconds']} s" if data.get("budget_seconds") else "")
        + (", DRY RUN: the GPU parts skipped)" if data.get("dry_run") else ")"),
        "GPU {gpu}, driver {driver}, CUDA {cuda}, torch {torch}, Python {python}".format(
            **{k: env.get(k, "-") for k in ("gpu", "driver", "cuda", "torch", "python")}
        ),
        "",
        "parts:",
        *[
            "  " + line
            for line in table(
                ["PART", "STATUS", "SECONDS", "BUDGET", "DETAIL"],
                [
                    [p["name"], p["status"], p.get("seconds"), p.get("budget_seconds"), _short(p.get("detail", ""))]
                    for p in data.get("parts", [])
                ],
            )
        ],
    ]
    sampler = data.get("sampler")
    if sampler:
        lines += ["", "GPU sampler vs nvidia-smi (" + sampler.get("tolerance", "") + "):"]
        lines.append(
            "  source {source}, {pairs} paired readings; memory error max {mem} MiB; SM activity error max {act} "
            "points ({against}); busy phase: sampler {bs}%, utilization.gpu {bn}%; idle phase: sampler {is_}%, "
            "utilization.gpu {in_}%; {verdict}".format(
                source=sampler.get("source"),
                pairs=sampler.get("pairs"),
                mem=_number((sampler.get("memory_max_error") or 0) / 1048576, 0)
                if sampler.get("memory_max_error") is not None
                else "-",
                act=_number(sampler.get("activity_max_error"), 1),
                against=sampler.get("activity_against") or "-",
                bs=_number(sampler.get("busy_sampler"), 0),
                bn=_number(sampler.get("busy_smi"), 0),
                is_=_number(sampler.get("idle_sampler"), 0),
                in_=_number(sampler.get("idle_smi"), 0),
                verdict="within tolerance"
                if sampler.get("within_tolerance")
                else "NOT within tolerance: " + "; ".join(sampler.get("problems", [])),
            )
        )
    runs = data.get("full_runs")
    if runs:
        lines += ["", "vdk run --full of the examples (one GPU):"]
        rows = [
            [
                r["example"],
                "PASSED" if r.get("passed") else "FAILED",
                _number(r.get("seconds"), 1),
                r.get("steps"),
                _number(r.get("last_loss"), 4),
                _number(r.get("steps_per_s"), 1),
                _short(r.get("layout", "")),
            ]
            for r in runs
        ]
        lines += ["  " + x for x in table(["EXAMPLE", "RESULT", "SECONDS", "STEPS", "LOSS", "STEPS/S", "LAYOUT"], rows)]
    rows_of = data.get("agreement")
    if rows_of:
        counts = data.get("agreement_tally", {})
        lines += ["", "agreement: the smoke check (vdk run, CPU) beside the real GPU run (the same steps):"]
        rows = [
            [
                r["case"],
                _short(verdict_label(r.get("smoke")), 50),
                _short(verdict_label(r.get("gpu")), 50),
                r["agreement"]["outcome"],
            ]
            for r in rows_of
        ]
        lines += ["  " + x for x in table(["CASE", "SMOKE CHECK", "GPU", "AGREEMENT"], rows)]
        lines.append("  " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
        different = [r for r in rows_of if r["agreement"]["outcome"] != agreement.AGREE]
        if different:
            lines += ["", "differences and their causes:"]
            lines += [
                f"  {r['case']}: {_short(r['agreement']['summary'], 160)}: {_short(r['agreement']['cause'], 300)}"
                for r in different
            ]
    return "\n".join(lines) + "\n"


def verdict_label(data: dict[str, Any] | None) -> str:
    return agreement.Verdict.from_dict(data).label if data else "-"


def keep_figures(part: str, **figures: Any) -> None:
    """What a functional test measured, for the check's report (a JSON line in the file the check names in
    VDK_ML_TRAINING_GPU_CHECK_FIGURES; nothing when it names none: a plain pytest run)."""
    path = os.environ.get("VDK_ML_TRAINING_GPU_CHECK_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"part": part, **figures}, default=str) + "\n")


def _short(text: str, width: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"

"""How a sweep looks on the terminal: its trial table (`vdk show`), its cell of `vdk list`, its smoke check's table
(`vdk run`); the JSON is the use cases' `to_dict()`."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration
from vdk.plugin.ml_training.runtime.sweep_protocol import format_value

if TYPE_CHECKING:
    from vdk.plugin.ml_training.ops.sweeps import SweepDetail
    from vdk.plugin.ml_training.ops.sweeps import SweepTable


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def params_text(params: dict) -> str:
    return " ".join(f"{k}={format_value(v)}" for k, v in params.items())


def summary_text(summary: dict | None) -> str:
    """A sweep in one cell: `3 done, 1 running, 1 pruned, 1 failed of 6; best eval_loss 0.412 (trial 4)`."""
    if not summary:
        return ""
    if summary.get("why"):
        return f"sweep: {summary['why']}"
    counts = ", ".join(f"{summary[k]} {k}" for k in ("done", "running", "pruned", "failed"))
    best = ""
    if summary.get("best_trial") is not None:
        best = f"; best {summary['metric']} {number(summary['best_metric'])} (trial {summary['best_trial']})"
    stopped = f"; stopped: {summary['stopped']}" if summary.get("stopped") else ""
    return f"sweep {counts} of {summary['trials']}{best}{stopped}"


def trial_table_text(table: SweepTable) -> str:
    rows = []
    for row in table.rows:
        state = row.state + (f" ({row.why})" if row.why and row.state == "failed" else "")
        rows.append([
            ("* " if row.best else "  ") + str(row.number), params_text(row.params), number(row.metric), state,
            number(row.steps), approximate_duration(row.seconds) if row.seconds is not None else "-",
            f"{row.gpu_hours:.3f}" if row.gpu_hours is not None else "-",
        ])  # fmt: skip
    headers = ["TRIAL", "PARAMETERS", table.metric.upper(), "STATE", "STEPS", "DURATION", "GPU-HOURS"]
    lines = [table(headers, rows)]
    best = table.best
    goal = "lowest" if table.goal == "min" else "highest"
    if best is not None:
        lines.append(f"* best: trial {best.number}, {table.metric} {number(best.metric)} ({goal}): "
                     f"{params_text(best.params)}")  # fmt: skip
    lines.append(f"Pruning saved about {table.saved_gpu_hours:.3f} GPU-hours ({table.count('pruned')} trial(s) "
                 "stopped before the typical complete trial's time)")  # fmt: skip
    if table.stopped:
        lines.append(f"The sweep stopped: {table.stopped}")
    return "\n".join(lines)


def sweep_text(detail: SweepDetail, again: str) -> str:
    """The sweep part of `vdk show`: its trial table, and what to do next."""
    title = f"Sweep {detail.run.name}"
    if detail.table is None:
        return f"{title}: no trials known yet: {detail.why}"
    table = detail.table
    lines = [f"{title}: {summary_text(table.summary())}", trial_table_text(table)]
    lines.append(f"A trial's log: vdk execute --logs {again} --trial N      the best as a full run: "
                 f"vdk execute --start {again} --trial best [--nodes N]")  # fmt: skip
    return "\n".join(lines)

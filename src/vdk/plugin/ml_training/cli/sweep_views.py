"""How a sweep looks on the terminal: its trial table (`vdk show`), its cell of `vdk list`, its smoke check's table
(`vdk run`); the JSON is the use cases' `to_dict()`."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.cli.text_table import shown
from vdk.plugin.ml_training.cli.text_table import table
from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration
from vdk.plugin.ml_training.runtime.sweep_protocol import format_value
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.wire import with_fix

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import SweepDetail
    from vdk.plugin.ml_training.api import SweepSmoke
    from vdk.plugin.ml_training.api import SweepTable


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


@shown
def params_text(params: dict) -> str:
    return " ".join(f"{k}={number(v) if isinstance(v, float) else format_value(v)}" for k, v in params.items())


@shown
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


def list_phase(phase: str, summary: dict) -> str:
    """A sweep's phase in `vdk list`, short: `Running (3/8 done, 2 at a time, best 0.412)`; `vdk show` has the
    rest (pruned, failed, which trial, why it stopped)."""
    parts = []
    if summary.get("why"):
        parts.append("trials not known yet")
    elif summary.get("trials") is not None:
        parts.append(f"{summary.get('done', 0)}/{summary['trials']} done")
    if summary.get("parallel"):
        parts.append(f"{summary['parallel']} at a time")
    if summary.get("best_metric") is not None:
        parts.append(f"best {number(summary['best_metric'])}")
    if summary.get("stopped"):
        parts.append("stopped early")
    return f"{phase} ({', '.join(parts)})" if parts else phase


@shown
def trial_table_text(trials: SweepTable) -> str:
    rows = []
    for row in trials.rows:
        state = row.state + (f" ({row.why})" if row.why and row.state == "failed" else "")
        rows.append(
            [
                ("* " if row.best else "  ") + str(row.number),
                params_text(row.params),
                number(row.metric),
                state,
                number(row.steps),
                approximate_duration(row.seconds) if row.seconds is not None else "-",
                f"{row.gpu_hours:.3f}" if row.gpu_hours is not None else "-",
            ]
        )
    headers = ["TRIAL", "PARAMETERS", trials.metric.upper(), "STATE", "STEPS", "DURATION", "GPU-HOURS"]
    lines = [table(headers, rows)]
    best = trials.best
    goal = "lowest" if trials.goal == "min" else "highest"
    if best is not None:
        lines.append(
            f"* best: trial {best.number}, {trials.metric} {number(best.metric)} ({goal}): {params_text(best.params)}"
        )
    lines.append(
        f"Pruning saved about {trials.saved_gpu_hours:.3f} GPU-hours ({counted(trials.count('pruned'), 'trial')} "
        "stopped before the typical complete trial's time)"
    )
    if trials.stopped:
        lines.append(f"The sweep stopped: {trials.stopped}")
    return "\n".join(lines)


@shown
def sweep_text(detail: SweepDetail, again: str) -> str:
    """The sweep part of `vdk show`: its trial table, and what to do next."""
    title = f"Sweep {detail.run.name}"
    if detail.table is None:
        return f"{title}: no trials known yet: {detail.why}"
    table = detail.table
    lines = [f"{title}: {summary_text(table.summary())}", trial_table_text(table)]
    lines.append(
        f"A trial's log: vdk execute --logs {again} --trial N      the best as a full run: "
        f"vdk execute --start {again} --trial best [--nodes N]"
    )
    return "\n".join(lines)


@shown
def smoke_text(result: SweepSmoke) -> str:
    """The smoke check of a sweep: a row per checked trial (arguments; for the extremes, their smoke run and
    metric), then passed or what failed."""
    assert result.spec.sweep is not None  # the smoke check of a sweep
    metric = result.spec.sweep.metric
    rows = [
        [
            params_text(t.params),
            t.arguments + (f": {t.message}" if t.message else ""),
            t.smoke or "-",
            number(t.steps),
            number(t.metric),
        ]
        for t in result.trials
    ]
    lines = [table(["TRIAL", "ARGUMENTS", "SMOKE RUN", "STEPS", metric.upper()], rows)]
    if result.arguments.status not in ("parsed",) and result.arguments.why:
        lines.append(f"note: the arguments were not checked one by one: {result.arguments.why}")
    if result.error is None:  # passed
        lines.append(
            f"Smoke check passed: {len(result.trials)} trials' arguments accepted, the extremes ran and "
            f"reported {metric}"
        )
    else:
        lines.append(with_fix(f"Smoke check FAILED: {result.error.problem}", result.error.fix))
    return "\n".join(lines)

"""The text of `vdk list --usage`: allocated GPU-hours by team and job, by cause, with the measured utilisation,
as tables (the report is ops/usage.py's, its JSON `GpuUsage.to_dict()`); and its `--since` option."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone

import click

from vdk.plugin.ml_training.cli.cluster_views import table
from vdk.plugin.ml_training.cli.text_table import shown
from vdk.plugin.ml_training.job.teams import NO_TEAM_TEXT
from vdk.plugin.ml_training.k8s.gpu_hours import Totals
from vdk.plugin.ml_training.k8s.gpu_hours import UsageReport
from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration

MIG_RULE = (
    "a MIG slice counts as its share of a GPU by its compute slices: 1g.10gb = 1/7, 3g.40gb = 3/7 "
    "(A100, H100, H200, B200: 7 slices; A30: 4)"
)
WASTE_RULE = (
    "allocated = used + idle (SM activity under 5%) + start-up (start to first optimizer step) + after the last "
    "step + redone (steps trained again after a restart) + failed, stalled and cancelled runs; wasted: all but used"
)
UTIL_RULE = "UTIL: SM-activity-weighted GPU-hours over the allocated ones, of the runs whose GPUs were measured"


@shown
def usage_text(report: UsageReport, where: str, team: str | None = None) -> str:
    """The tables of `vdk list --usage`; `team` is the team filter ("of team vision"), if any."""
    span = approximate_duration((report.now - report.since).total_seconds())
    heading = f"GPU-hours{' ' + team if team else ''} in {where}, {_time(report.since)} to {_time(report.now)} ({span})"
    if not report.runs:
        return f"{heading}: no run held GPUs.\n" + "\n".join(f"note: {n}" for n in report.notes)
    running = report.totals().running > 0
    headers = ["RUNS", "GPU-HOURS", "UTIL", "USED", "IDLE", "START-UP", "AFTER LAST STEP", "REDONE", "FAILED"]
    headers += ["STALLED"]
    headers += ["CANCELLED", *(["RUNNING"] if running else []), "WASTED"]
    lines = [f"{heading}:", ""]
    teams = report.by_team()
    if len(teams) > 1:
        rows = [[name or NO_TEAM_TEXT, *_cells(totals, running)] for name, totals in teams]
        rows.append(["total", *_cells(report.totals(), running)])
        lines += [table(["TEAM", *headers], rows), ""]
    rows = [[name or NO_TEAM_TEXT, job, *_cells(totals, running)] for name, job, totals, _ in report.by_job()]
    if len(teams) == 1:
        rows.append(["total", "", *_cells(report.totals(), running)])
    lines += [table(["TEAM", "JOB", *headers], rows), "", f"{WASTE_RULE}.", f"{UTIL_RULE}; {MIG_RULE}."]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _cells(totals: Totals, running: bool) -> list[str]:
    share = f" ({totals.wasted_share:.0%})" if totals.wasted_share is not None else ""
    utilisation = f"{totals.utilisation:.0%}" if totals.utilisation is not None else "-"
    cells = [str(totals.runs), _hours(totals.gpu_hours), utilisation]
    cells += [_hours(getattr(totals, cause)) for cause in ("used", "idle", "startup", "after_last_step", "redone")]
    cells += [_hours(totals.failed), _hours(totals.stalled), _hours(totals.cancelled)]
    if running:
        cells.append(_hours(totals.running))
    return [*cells, _hours(totals.wasted) + share]


def _hours(value: float) -> str:
    if 0 < value < 0.05:
        return "<0.1"
    return f"{value:.1f}"


def _time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def since_seconds(text: str | None) -> int | None:
    """--since: a duration (30d, 12h, 1w)."""
    if text is None:
        return None
    from vdk.plugin.ml_training.units import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise click.BadParameter(f"{text!r} is not a duration: write it like 30d, 12h or 1w", param_hint="--since")
    return seconds

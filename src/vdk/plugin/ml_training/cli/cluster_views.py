"""How jobs, runs and their outputs look on the terminal (`-o text`); their JSON is the use cases' data
(`to_dict()`, ops/)."""

from __future__ import annotations

import math
import sys
from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.cli.sweep_views import list_phase
from vdk.plugin.ml_training.cli.text_table import shown
from vdk.plugin.ml_training.cli.text_table import table
from vdk.plugin.ml_training.job.teams import NO_TEAM_TEXT
from vdk.plugin.ml_training.k8s.runs.observe import RunDetail
from vdk.plugin.ml_training.k8s.runs.restarts import Restart
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.k8s.runs.summary import shape_text
from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import SOURCES
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.outputs_stream import display
from vdk.plugin.ml_training.runtime.progress_lines import Progress
from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

RECENT_EVENTS = 10


def age(timestamp: str | None, now: datetime | None = None) -> str:
    if not timestamp:
        return "-"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0.0, ((now or datetime.now(timezone.utc)) - then).total_seconds())
    return approximate_duration(seconds)


# --- vdk list --------------------------------------------------------------------------------------


@shown
def jobs_text(entries: list[dict], where: str, team: str | None = None, now: datetime | None = None) -> str:
    """`vdk list`'s table, one row per (team, job); `team` is the team filter ("of team vision"), if any."""
    scope = f"{team} in {where}" if team else f"in {where}"
    if not entries:
        all_teams = "; `vdk list -a` lists the runs of every team" if team else ""
        return f"No ml-training runs {scope}{all_teams}."
    rows = [
        [
            e["job_name"] or "?",
            e["job_team"] or NO_TEAM_TEXT,
            e["latest_run"],
            "sweep" if e.get("sweep") else e["backend"] or "?",  # its trials' Indexed Job: `-o json` says `job`
            list_phase(e["phase"], e["sweep"]) if e.get("sweep") else e["phase"],
            age(e["created"], now),
            _shape(e),
            str(e["runs"]),
        ]
        for e in entries
    ]
    headers = ["JOB", "TEAM", "LATEST RUN", "BACKEND", "PHASE", "AGE", "NODES x GPUS", "RUNS"]
    if any(e.get("progress") for e in entries):  # a TrainJob's Kubeflow status says how far it got
        headers.append("PROGRESS")
        for row, e in zip(rows, entries, strict=True):
            row.append(_progress_cell(e.get("progress")))
    return f"ml-training jobs {scope}:\n" + table(headers, rows)


def _progress_cell(progress: dict | None) -> str:
    if not progress:
        return "-"
    return Progress(**progress).brief()


def _shape(entry: dict) -> str:
    if entry.get("sweep"):  # its Indexed Job's pods are trials at a time (the phase says how many), not nodes
        return trial_shape(entry["gpus_per_node"], entry["gpu_resource"])
    low, high = entry["nodes_min"], entry["nodes"]
    nodes = None if high is None else (f"{low}:{high}" if low != high else str(high))
    return shape_text(nodes, entry["gpus_per_node"], entry["gpu_resource"])


def trial_shape(gpus_per_node: int, gpu_resource: str | None) -> str:
    """A sweep's shape: each trial's, one node (`1 x 1 GPU per trial`)."""
    return f"{shape_text('1', gpus_per_node, gpu_resource)} per trial"


# --- vdk show / execute --list / --show ------------------------------------------------------------


@shown
def runs_text(runs: list[RunSummary], phases: dict[str, str] | None = None, now: datetime | None = None) -> str:
    phases = phases or {}
    rows = [
        [
            r.name,
            phases.get(r.name, r.phase),
            age(r.created, now),
            "sweep" if r.sweep else r.backend or "?",
            trial_shape(r.gpus_per_node, r.gpu_resource) if r.sweep else r.shape,
            r.deployer or "-",
            (r.reason or "-")[:40],
        ]
        for r in runs
    ]
    return table(["RUN", "PHASE", "AGE", "BACKEND", "NODES x GPUS", "DEPLOYED BY", "REASON"], rows)


@shown
def detail_text(detail: RunDetail, now: datetime | None = None, title: str = "Run") -> str:
    run = detail.run
    lines = [
        f"{title} {run.name}: {detail.phase}"
        + (f" — {run.message}" if run.message and detail.phase == run.phase else "")
    ]
    lines += [f"  {k:<10} {v}" for k, v in _audit(run)]
    for pin in detail.data or ():  # what it trained on, as `vdk diff` compares it
        lines.append(f"  {'data':<10} {pin.target}: {pin.source} at {pin.describe_version()}")
    if detail.progress is not None:
        lines.append(f"  {'progress':<10} {detail.progress.describe()}")
    if len(detail.loss_curve) >= 2:
        lines.append(f"  {'loss':<10} {loss_text(detail.loss_curve)}")
    if detail.gpus is not None:
        lines.append(f"  {'GPUs':<10} {gpu_summary_text(detail.gpus.figures)}")
    if detail.outputs is not None:
        lines.append(f"  {'outputs':<10} {outputs_text(detail.outputs)}")
    if detail.ranks:
        rows = [[r.rank, r.pod, r.state, r.node or "-", str(r.restarts)] for r in detail.ranks]
        lines += ["", _indent(table(["RANK", "POD", "STATE", "NODE", "RESTARTS"], rows))]
    if detail.restarts:
        lines += ["", "Restarts:", _indent(restarts_table(detail.restarts, now))]
    if detail.gpus is not None:
        lines += ["", *gpu_panel(detail.gpus, detail.startup)]
    for kind, title in (("waiting", "Why it waits"), ("failed", "Why it failed"), ("advice", "What to change")):
        findings = [f for f in detail.findings if f.kind == kind]
        if not findings:
            continue
        lines += ["", f"{title}:"]
        for f in findings:
            lines.append(f"  {f.what}")
            lines += [f"    -> {fix}" for fix in [*f.hints, f.fix] if fix]
            stall = f.stall or (f.idle.as_stall() if f.idle is not None else None)
            if stall is not None and stall.top_frames():
                lines.append(f"  Where rank {stall.rank} was (most recent call first):")
                lines += [f"    {frame}" for frame in stall.top_frames()]
            if f.log_tail:
                lines.append(f"  Last lines of the log ({f.log_source}):")
                lines += [f"    | {line}" for line in f.log_tail]
    if detail.events:
        lines += ["", "Recent events:"]
        rows = [
            [age(e.last_seen, now), e.type, e.reason, e.object, e.message + (f" (x{e.count})" if e.count > 1 else "")]
            for e in detail.events[-RECENT_EVENTS:]
        ]
        lines.append(_indent(table(["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows)))
    lines += [f"note: {n}" for n in detail.notes]
    return "\n".join(lines)


def restarts_table(restarts: list[Restart], now: datetime | None = None) -> str:
    """Each restart: when, which rank's pod, its cause and what said so, whether max_restarts counts it, the
    steps it redid."""
    rows = []
    for r in restarts:
        counted = {True: "yes", False: "no", None: "runtime's policy"}[r.counted]
        redone = "-" if r.steps_redone is None else f"{r.steps_redone} ({r.reached} -> {r.resumed})"
        cause = r.cause + (f" x{r.times}" if r.times > 1 else "")
        rows.append([age(r.at, now), r.rank, r.pod, cause, counted, redone, r.detail[:60]])
    return table(["AGE", "RANK", "POD", "CAUSE", "COUNTED", "STEPS REDONE", "WHAT SAID SO"], rows)


# --- the loss curve ---------------------------------------------------------------------------------

SPARK_LEVELS = "▁▂▃▄▅▆▇█"
ASCII_LEVELS = "_.-:=+*#"  # for a terminal that cannot show the blocks
NOT_FINITE = ("×", "x")  # a NaN or infinite loss, drawn as such (unicode, ascii)
SPARK_WIDTH = 40


def loss_text(points: list[tuple[int, float]], unicode: bool | None = None) -> str:
    """ "▇▅▄▃▂▂▁▁  min 0.2834 at step 900, last 0.2911 at step 1000 (42 points)"."""
    unicode = can_draw() if unicode is None else unicode
    line = sparkline([loss for _, loss in points], unicode=unicode)
    finite = [(step, loss) for step, loss in points if math.isfinite(loss)]
    facts = []
    if finite:
        step, low = min(finite, key=lambda p: p[1])
        facts.append(f"min {low:.4g} at step {step}")
    last_step, last = points[-1]
    facts.append(f"last {last:.4g} at step {last_step}")
    bad = len(points) - len(finite)
    if bad:
        facts.append(f"{bad} not finite ({NOT_FINITE[0 if unicode else 1]})")
    return f"{line}  {', '.join(facts)} ({len(points)} points)"


def sparkline(values: list[float], width: int = SPARK_WIDTH, unicode: bool = True) -> str:
    """One character per value (the mean of each of `width` buckets when there are more), scaled from
    the lowest to the highest finite value; a bucket with a NaN or an infinity shows it."""
    levels = SPARK_LEVELS if unicode else ASCII_LEVELS
    mark = NOT_FINITE[0 if unicode else 1]
    buckets = [values[i * len(values) // width : (i + 1) * len(values) // width] for i in range(width)]
    buckets = [b for b in buckets if b] if len(values) > width else [[v] for v in values]
    means = [sum(b) / len(b) if all(math.isfinite(v) for v in b) else None for b in buckets]
    finite = [m for m in means if m is not None]
    if not finite:
        return mark * len(means)
    low, high = min(finite), max(finite)
    top = len(levels) - 1
    return "".join(
        mark if m is None else levels[round((m - low) / (high - low) * top) if high > low else top // 2] for m in means
    )


# --- the GPUs (vdk show) ---------------------------------------------------------------------------


def gpu_summary_text(nodes: tuple[GpuFigures, ...], unicode: bool | None = None) -> str:
    """ "▂▅▇▇▆▇▇▁  SM activity mean 71%, p95 93%; memory peak 31.2 of 79.6 GiB (39%); utilisation 68%": all
    nodes together (the sparkline is node 0's)."""
    unicode = can_draw() if unicode is None else unicode
    first = nodes[0]
    facts = []
    measured = [n for n in nodes if n.sm_mean is not None]
    if measured:
        weights = [max(n.sampled_gpu_s, 1e-9) for n in measured]
        means = [n.sm_mean for n in measured if n.sm_mean is not None]  # every one's: they are the measured ones
        mean = sum(m * w for m, w in zip(means, weights, strict=True)) / sum(weights)
        p95 = max(n.sm_p95 if n.sm_p95 is not None else m for n, m in zip(measured, means, strict=True))
        facts.append(f"{_ACTIVITY[first.source]} mean {mean:.0f}%, p95 {p95:.0f}%")
    else:
        facts.append("no activity readable (MIG slices of GPUs without GPM: memory only)")
    peak, total = max(n.mem_peak for n in nodes), max(n.mem_total for n in nodes)
    if total:
        facts.append(f"memory peak {_gib(peak)} of {_gib(total)} GiB ({peak / total:.0%})")
    busy, sampled = sum(n.busy_gpu_s for n in measured), sum(n.sampled_gpu_s for n in measured)
    if sampled:
        facts.append(f"utilisation {busy / sampled:.0%} of the time sampled")
    so_far = "" if first.final else f" (so far, node {first.node})"
    return f"{gpu_sparkline(first.spark, unicode)}  {'; '.join(facts)}{so_far}"


_ACTIVITY = {"gpm": "SM activity", "util": "GPU utilisation", "none": "activity"}


def gpu_panel(gpus, startup=None, unicode: bool | None = None) -> list[str]:
    """The table of each node's GPU figures, what the activity is, and the start-up with its parts."""
    unicode = can_draw() if unicode is None else unicode
    figures = gpus.figures
    what = {f.source for f in figures}
    meaning = "; ".join(SOURCES[s] for s in sorted(what) if s in SOURCES)
    title = "node 0's figures so far" if gpus.live else "each node's totals"
    rows = []
    for node in gpus.nodes:
        f = node.figures
        model = f"{f.gpus} x {f.profile + ' of ' if f.profile else ''}{f.model}"
        memory = (
            f"{_gib(f.mem_peak)} of {_gib(f.mem_total)} GiB ({f.mem_share:.0%})" if f.mem_share is not None else "-"
        )
        rows.append(
            [
                node.rank,
                node.pod,
                model,
                _percent(f.sm_mean),
                _percent(f.sm_p95),
                memory,
                f"{f.power_w:.0f} W" if f.power_w is not None else "-",
                _percent(100 * f.idle_share if f.idle_share is not None else None),
                gpu_sparkline(f.spark, unicode) or "-",
            ]
        )
    headers = ["NODE", "POD", "GPUS", "SM MEAN", "SM P95", "MEMORY PEAK", "POWER", "IDLE", "ACTIVITY"]
    lines = [f"GPUs ({title}; {meaning}):", _indent(table(headers, rows))]
    if startup is not None:
        parts = [
            (name, seconds)
            for name, seconds in (
                ("waiting for nodes", startup.waiting),
                ("pulling the image", startup.pulling),
                ("loading before the first step", startup.loading),
            )
            if seconds
        ]
        detail = ": " + ", ".join(f"{n} {approximate_duration(s)}" for n, s in parts) if parts else ""
        lines.append(f"  start-up {approximate_duration(startup.seconds)} to the first optimizer step{detail}")
    return lines


def gpu_sparkline(spark: str, unicode: bool = True) -> str:
    """A GPU line's activity levels (tenths, "-": not sampled) drawn as a sparkline from 0 to 100%."""
    levels = SPARK_LEVELS if unicode else ASCII_LEVELS
    top = len(levels) - 1
    return "".join(" " if c not in "0123456789" else levels[round(int(c) * top / 9)] for c in spark)


def _percent(value: float | None) -> str:
    return f"{value:.0f}%" if value is not None else "-"


def _gib(value: int) -> str:
    return f"{value / GIB:.1f}"


def can_draw() -> bool:
    """Whether stdout can show the block characters of a sparkline."""
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        (SPARK_LEVELS + NOT_FINITE[0]).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _audit(run: RunSummary) -> list[tuple[str, str]]:
    out = []
    if run.image:
        out.append(("image", run.image))
    if run.git_commit:
        out.append(("commit", run.git_commit + (" (with uncommitted changes)" if run.git_dirty else "")))
    else:
        out.append(("commit", "not in git"))
    deployed = " ".join(
        x for x in (run.deployed_at or run.created, f"by {run.deployer}" if run.deployer else None) if x
    )
    if deployed:
        out.append(("deployed", deployed))
    if run.reason:
        out.append(("reason", run.reason))
    if run.rerun_of:
        out.append(("re-run of", run.rerun_of))
    if run.continues:
        out.append(("continues", f"{run.continues} (began with its outputs and checkpoints)"))
    if run.overrides:
        out.append(("overrides", f"{run.overrides} (--set, over config.ini)"))
    if run.queue:
        out.append(("queue", run.queue))
    return out


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())


# --- a run's outputs (vdk execute --outputs, vdk show) ---------------------------------------------------


@shown
def output_files_text(files) -> str:
    """The files of `vdk execute --outputs`: path, size, when last written; then the total."""
    if not files:
        return "No outputs yet: the run has written nothing to its output directory."
    rows = [
        [
            display(f.path),  # never raw: a name may hold terminal escape sequences
            size_text(f.size),
            datetime.fromtimestamp(f.mtime, timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        ]
        for f in files
    ]
    total = sum(f.size for f in files)
    return table(["PATH", "SIZE", "WRITTEN (UTC)"], rows) + f"\n{counted(len(files), 'file')}, {size_text(total)}"


@shown
def outputs_text(outputs: dict) -> str:
    """Where a run's outputs persist, and how much rank 0 said they were when it last reported."""
    where = f"PersistentVolumeClaim {outputs['claim']}, directory {outputs['directory']}/"
    if outputs.get("files") is None:
        return f"{where} (vdk execute --outputs lists them)"
    files, size = counted(int(outputs["files"]), "file"), size_text(int(outputs["bytes"]))
    return f"{where}: {files}, {size} when rank 0's script ended"

"""The text of what changed between two runs (ops/run_changes.py): `vdk deploy`'s changes since the job's last
run, `vdk deploy --if-changed`'s answer when nothing did, and `vdk diff`'s two runs side by side."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.cli.text_table import shown

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import Changes
    from vdk.plugin.ml_training.api import DataChange
    from vdk.plugin.ml_training.api import DiffResult
    from vdk.plugin.ml_training.api import Outcome
    from vdk.plugin.ml_training.api import RunChanges
    from vdk.plugin.ml_training.api import Unchanged

SHOWN = 6  # names listed per kind of change before "and N more"
WIDTH = 14


@shown
def changes_text(changes: Changes) -> str:
    """`vdk deploy`: this deploy against the job's last run."""
    if changes.last is None or changes.since_last is None:
        return "Changes: the first run of this job here (nothing to compare with)"
    last = changes.last
    lines = [f"Changes since run {last.name} ({last.phase}, deployed {last.deployed_at or last.created or '?'}):"]
    lines += changes_lines(changes.since_last)
    if changes.last_success is not None and changes.last_success is not last and changes.since_success is not None:
        parts = changes.since_success.changed_parts
        what = ", ".join(parts) if parts else "nothing"
        lines.append(f"  (since the last successful run, {changes.last_success.name}: {what} changed)")
    return "\n".join(lines)


@shown
def unchanged_text(result: Unchanged) -> str:
    if result.active:
        return (
            f"Run {result.active} of {result.job_name} (namespace {result.namespace}) is the same and has not ended "
            f"yet ({result.active_phase}): code, requirements, configuration, base image and data are the same. "
            "Nothing was started."
        )
    return (
        f"Nothing changed since run {result.last_success} of {result.job_name} (namespace {result.namespace}), the "
        "last successful one: code, requirements, configuration, base image and data are the same. Nothing was "
        "built or started."
    )


def changes_lines(changes: RunChanges) -> list[str]:
    lines = []
    if changes.code and any(changes.code.values()):
        lines.append(
            _row("code", "; ".join(_named(kind, changes.code[kind]) for kind in changes.code if changes.code[kind]))
        )
    if changes.requirements and any(changes.requirements.values()):
        lines.append(_row("requirements", _requirements(changes.requirements)))
    if changes.config:
        items = [f"{key}: {_value(old)} -> {_value(new)}" for key, (old, new) in changes.config.items()]
        lines.append(_row("config", "; ".join(items)))
    if changes.base:
        lines.append(_row("base image", f"{changes.base[0]} -> {changes.base[1]}"))
    for change in changes.data:
        lines.append(_row("data" if change is changes.data[0] else "", _data(change)))
    for problem in changes.unknown:
        lines.append(_row("unknown", problem))
    if not changes.changed:
        lines.append("  nothing changed: code, requirements, configuration, base image and data are the same")
    return lines


@shown
def diff_text(diff: DiffResult) -> str:
    """`vdk diff`: how each run ended, then what changed from the first to the second."""
    before, after = diff.before, diff.after
    width = max(len(before.run), len(after.run), 10)
    lines = [f"{diff.job_name}: run {before.run} -> run {after.run} (namespace {diff.namespace})", ""]
    lines.append(f"  {'':<{WIDTH}}{before.run:<{width + 2}}{after.run}")
    for label, value in (
        ("outcome", lambda o: o.phase),
        ("final loss", lambda o: _number(o.loss)),
        ("step", lambda o: "-" if o.step is None else str(o.step)),
        ("duration", lambda o: _duration(o.seconds)),
        ("GPU-hours", lambda o: _number(o.gpu_hours)),
        ("continues", lambda o: o.continues or "-"),
    ):
        lines.append(f"  {label:<{WIDTH}}{value(before):<{width + 2}}{value(after)}")
    for name in sorted(set(before.metrics) | set(after.metrics)):
        lines.append(f"  {name:<{WIDTH}}{_metric(before, name):<{width + 2}}{_metric(after, name)}")
    lines += ["", f"What changed from {before.run} to {after.run}:"]
    lines += changes_lines(diff.changes)
    return "\n".join(lines)


def _row(label: str, text: str) -> str:
    return f"  {label:<{WIDTH}}{text}"


def _named(kind: str, names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    return f"{len(names)} {kind}: {shown}"


def _requirements(changes: dict[str, Any]) -> str:
    items = [f"{name} {old} -> {new}" for name, (old, new) in sorted(changes.get("changed", {}).items())]
    items += [f"added {name} {version}" for name, version in sorted(changes.get("added", {}).items())]
    items += [f"removed {name} {version}" for name, version in sorted(changes.get("removed", {}).items())]
    more = f" and {len(items) - SHOWN * 2} more" if len(items) > SHOWN * 2 else ""
    return "; ".join(items[: SHOWN * 2]) + more


def _data(change: DataChange) -> str:
    before, after = change.before, change.after
    if before is None or after is None:
        pin = after or before
        assert pin is not None
        return f"{change.target}: {'added' if after else 'removed'} ({pin.source})"
    if before.source != after.source:
        head = f"{change.target}: {before.source} -> {after.source}"
    else:
        head = f"{change.target} ({after.source})"
    if change.same is True:
        return f"{head}: unchanged, {after.describe_version()}"
    if change.same is None:
        return f"{head}: {after.describe_version()} (cannot be compared)"
    text = f"{head}: {before.describe_version()} -> {after.describe_version()}"
    files = [
        (k, v) for k, v in (("changed", change.changed), ("added", change.added), ("removed", change.removed)) if v
    ]
    if files:
        text += "; files " + "; ".join(_named(kind, names) for kind, names in files)
    return text


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _metric(outcome: Outcome, name: str) -> str:
    value = outcome.metrics.get(name)
    return "-" if value is None else str(value)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"

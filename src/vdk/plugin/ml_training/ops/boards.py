"""`vdk show --board` and `--dashboard`: a job's runs in the viewers ML engineers already open.

`--board`: the TensorBoard event files of the chosen runs (runtime/board_events.py writes them in each run's output
directory) copied into one local folder, a run per directory (a sweep's trials side by side below the sweep's), and
TensorBoard started over it (ops/viewers.py). Runs of this machine (`vdk run --full`: their directories under the
full runs' folder, a local sweep's trials linked from its folder) and of the cluster (their output claim, read by a
short-lived pod of the run's image: ops/outputs.py, only the event files).

`--dashboard`: Optuna's dashboard over a copy of a sweep's study (SQLite's own backup of it: the dashboard may
write, the sweep's study stays as it is): a local sweep's study.db, or a cluster sweep's from its output claim.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from pathlib import Path
from typing import TypedDict

from vdk.plugin.ml_training.dependencies import cache_entries
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.sweep_manifests import STUDY_FILE
from vdk.plugin.ml_training.local.launcher import WORK_DIR
from vdk.plugin.ml_training.local.launcher import full_runs_dir
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.sweep_local import TRIAL_LINK
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.ops.viewers import TENSORBOARD
from vdk.plugin.ml_training.ops.viewers import Viewer
from vdk.plugin.ml_training.ops.viewers import optuna_dashboard
from vdk.plugin.ml_training.ops.viewers import start_viewer
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.board_events import BOARD_DIR
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root
from vdk.plugin.ml_training.vocabulary.package_indexes import DEFAULT_INDEX_STRATEGY

DEFAULT_LAST = 5  # runs on a board when none is named
LOCAL = "this machine"
CLUSTER = "the cluster"
_STAMP = r"(\d{8}-\d{6})"

_BOARD_META = ".vdk-board"  # in a board's folder of the cache: held (cache_entries) while its command runs
_BOARD_DAYS = 1.0  # a board folder whose command ended is removed by the next board of the job after this


@dataclass(frozen=True)
class BoardRun:
    """One run on a board: its name, where it ran, when it started, and the directory of its event files (a
    sweep's: its trials' directories, by trial number)."""

    name: str
    where: str
    started: str  # sortable: YYYYmmdd-HHMMSS (local), RFC 3339 (cluster)
    events: Path | None = None
    trials: dict[int, Path] = field(default_factory=dict)
    study: Path | None = None  # a local sweep's study


@dataclass
class Board:
    """A folder of event files and the TensorBoard serving it (None: not started)."""

    folder: Path
    runs: list[str]
    viewer: Viewer | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "folder": str(self.folder),
            "runs": self.runs,
            "url": self.viewer.url if self.viewer else None,
            "notes": self.notes,
        }


def local_runs(job: str, runs: Path | None = None) -> list[BoardRun]:
    """The job's full runs and sweeps on this machine, newest first (a sweep's trials are part of their sweep)."""
    runs = runs or full_runs_dir()
    if not runs.is_dir():
        return []
    single = re.compile(rf"^{re.escape(job)}-{_STAMP}-[A-Za-z0-9_]{{8}}$")
    sweep = re.compile(rf"^{re.escape(job)}-sweep-{_STAMP}$")
    found, in_sweeps = [], set()
    for path in runs.iterdir():
        match = sweep.match(path.name)
        if match and path.is_dir():
            trials = {}
            for link in path.glob(f"{TRIAL_LINK}*"):
                number = link.name[len(TRIAL_LINK) :]
                if number.isdigit() and link.is_symlink():
                    target = link.resolve()
                    in_sweeps.add(target.name)
                    trials[int(number)] = target / WORK_DIR / BOARD_DIR
            found.append(BoardRun(path.name, LOCAL, match.group(1), trials=trials, study=path / STUDY_FILE))
    for path in runs.iterdir():
        match = single.match(path.name)
        if match and path.name not in in_sweeps:
            found.append(BoardRun(path.name, LOCAL, match.group(1), events=path / WORK_DIR / BOARD_DIR))
    return sorted(found, key=lambda r: r.started, reverse=True)


def _cluster_runs(scope: Scope, say: Say) -> list[BoardRun]:
    from vdk.plugin.ml_training.ops.scope import select_runs

    selection = select_runs(scope, "show --board", partial=True)
    out = []
    for run in selection.runs:
        started = run.started or run.created or ""
        stamp = started.replace("-", "").replace(":", "").replace("T", "-")[:15]
        out.append(BoardRun(run.name, CLUSTER, stamp))
    return out


def board_folder(job: str, to: str | Path | None) -> Path:
    """Where the event files go: `to`, else a new folder of vdk's cache for the job, this command's own (another
    `vdk board` of the job, in another terminal, gets another: its TensorBoard reads its folder while this one
    copies), kept until this command (its viewer) ends; those of earlier boards whose command ended are removed."""
    if to is not None:
        folder = Path(to).expanduser().resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    root = cache_root() / "boards" / job
    root.mkdir(parents=True, exist_ok=True)
    cache_entries.prune_unused(root, _BOARD_META, _BOARD_DAYS)
    folder = Path(tempfile.mkdtemp(prefix="board-", dir=root))
    (folder / _BOARD_META).write_text(job, encoding="utf-8")
    cache_entries.use(folder, _BOARD_META)  # not removed while this command's viewer reads it
    return folder


def choose(runs: list[BoardRun], names: tuple[str, ...], last: int, job: str) -> list[BoardRun]:
    """The runs named (a name or its unique suffix), else the `last` newest."""
    if not names:
        return runs[: max(1, last)]
    chosen = []
    for name in names:
        matches = [r for r in runs if r.name == name] or [r for r in runs if r.name.endswith(name)]
        if len(matches) != 1:
            known = ", ".join(r.name for r in runs[:10]) or "none"
            what = (
                f"no run of {job} is named {name!r}"
                if not matches
                else f"{len(matches)} runs of {job} end with {name!r}"
            )
            raise MLTrainingError(
                f"{what} (its runs: {known})", "name one of its runs with -i (its whole name, or an end only it has)"
            )
        chosen.append(matches[0])
    return chosen


@checked
def collect_board(
    scope: Scope,
    runs: tuple[str, ...] = (),
    last: int = DEFAULT_LAST,
    to: str | Path | None = None,
    *,
    reporter: Reporter | None = None,
    cluster: bool = True,
) -> Board:
    """The event files of the job's chosen runs (`runs`, else the `last` newest, of this machine and, with
    `cluster`, of the cluster) copied into a folder (`to`, else vdk's cache), one directory per run; what it does
    and what it leaves out are notes of `reporter`."""
    say = or_quiet(reporter).note
    job = scope.job_name or ""
    if not job:
        raise MLTrainingError("`vdk show --board` needs the job's name", "name the job with -n, or -p its directory")
    found = local_runs(job)
    notes: list[str] = []
    if cluster:
        try:
            found += _cluster_runs(scope, say)
        except MLTrainingError as e:
            if not found:
                raise
            notes.append(f"only this machine's runs: the cluster's could not be listed ({e.problem})")
    found.sort(key=lambda r: r.started, reverse=True)
    if not found:
        raise MLTrainingError(
            f"{job} has no runs with TensorBoard event files, on this machine or the cluster",
            f"run it with `vdk run --full -p JOB_DIR`, or deploy it with output_pvc set: each run writes its event "
            f"files into its output directory ({BOARD_DIR}/)",
        )
    chosen = choose(found, runs, last, job)
    folder = board_folder(job, to)
    copied = []
    for run in chosen:
        files = _copy_run(scope, run, folder / run.name, reporter)
        if files:
            copied.append(run.name)
        else:
            notes.append(f"{run.name} ({run.where}) has no event files")
    for note in notes:
        say(f"note: {note}")
    if not copied:
        raise MLTrainingError(
            f"none of the chosen runs of {job} has TensorBoard event files",
            f"a run writes them into {BOARD_DIR}/ of its output directory: cluster runs need output_pvc; "
            f"{protocol.TENSORBOARD}=0 or {protocol.SERIES_SECONDS}=0 in [ml-training.env] turns them off",
        )
    return Board(folder, copied, notes=notes)


def _copy_run(scope: Scope, run: BoardRun, into: Path, reporter: Reporter | None) -> int:
    """Copy one run's event files into `into` (a sweep's trials into `into/trial-N`); how many."""
    if run.where == CLUSTER:
        return _copy_cluster_run(scope, run, into, reporter)
    sources = {into: run.events} if run.events is not None else {}
    sources.update({into / f"{TRIAL_LINK}{n}": path for n, path in sorted(run.trials.items())})
    count = 0
    for target, source in sources.items():
        if source is None or not source.is_dir():
            continue
        for file in sorted(source.iterdir()):
            if file.is_file():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, target / file.name)
                count += 1
    return count


def _copy_cluster_run(scope: Scope, run: BoardRun, into: Path, reporter: Reporter | None) -> int:
    """Through the copy pod (ops/outputs.py), only the event files; `trial-N/vdk-tensorboard/x` lands as
    `trial-N/x`."""
    from vdk.plugin.ml_training.ops.outputs import run_outputs

    with tempfile.TemporaryDirectory(prefix="vdk-board-") as staging:
        try:
            copied = run_outputs(scope, run.name, staging, reporter=reporter, only=BOARD_DIR)
        except MLTrainingError as e:
            or_quiet(reporter).note(f"note: {run.name}: {e.problem}")
            return 0
        for path in copied.written or []:
            relative = [part for part in path.relative_to(staging).parts if part != BOARD_DIR]
            target = into.joinpath(*relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), target)
        return len(copied.written or [])


@checked
def show_board(
    scope: Scope,
    runs: tuple[str, ...] = (),
    last: int = DEFAULT_LAST,
    to: str | Path | None = None,
    *,
    reporter: Reporter | None = None,
    cluster: bool = True,
) -> Board:
    """`collect_board`, then TensorBoard started over the folder on a loopback port (`Board.viewer`: its address;
    `stop()` ends it)."""
    board = collect_board(scope, runs, last, to, reporter=reporter, cluster=cluster)
    log = board.folder.parent / f".{board.folder.name}-tensorboard.log"
    board.viewer = start_viewer(
        TENSORBOARD,
        lambda port: ["--logdir", str(board.folder), "--host", "127.0.0.1", "--port", str(port)],
        str(board.folder),
        log,
        or_quiet(reporter).note,
        **_index_rules(scope),
    )
    return board


class _IndexRules(TypedDict):
    index_strategy: str
    job_dir: Path | None


def _index_rules(scope: Scope) -> _IndexRules:
    """The index strategy and directory of the scope's job, whose index rules a viewer's install follows as the
    job's own installs do (the default strategy without a job, or with a config.ini that does not load: a viewer
    is no part of the job, and its config's error is the job's commands' to say)."""
    if scope.job_dir is None:
        return {"index_strategy": DEFAULT_INDEX_STRATEGY, "job_dir": None}
    from vdk.plugin.ml_training.job import load_job_spec

    try:
        strategy = load_job_spec(scope.job_dir).index_strategy
    except MLTrainingError:
        strategy = DEFAULT_INDEX_STRATEGY
    return {"index_strategy": strategy, "job_dir": scope.job_dir}


@dataclass
class Dashboard:
    """Optuna's dashboard serving a copy of a sweep's study (`study`) until `viewer.stop()`."""

    sweep: str
    viewer: Viewer
    study: Path

    def to_dict(self) -> dict:
        return {"sweep": self.sweep, **self.viewer.to_dict(), "study_copy": str(self.study)}


@checked
def show_dashboard(
    scope: Scope, run: str | None = None, *, reporter: Reporter | None = None, cluster: bool = True
) -> Dashboard:
    """Optuna's dashboard over a copy of the sweep's study: the sweep `run` (or its suffix; default the newest) of
    this machine or the cluster; notes of `reporter`."""
    say = or_quiet(reporter).note
    job = scope.job_name or ""
    sweeps = [r for r in local_runs(job) if r.study is not None]
    if cluster:
        try:
            sweeps += [r for r in _cluster_runs(scope, say) if _is_sweep(scope, r)]
        except MLTrainingError as e:
            if not sweeps:
                raise
            say(f"note: only this machine's sweeps: the cluster's could not be listed ({e.problem})")
    sweeps.sort(key=lambda r: r.started, reverse=True)
    if not sweeps:
        raise MLTrainingError(
            f"{job} has no sweep, on this machine or the cluster",
            "a job with [ml-training.sweep] is one: `vdk run --full` runs it here, `vdk deploy` on the cluster",
        )
    (chosen,) = choose(sweeps, (run,) if run else (), 1, job)
    folder = cache_root() / "dashboards"
    folder.mkdir(parents=True, exist_ok=True)
    # its own copy: another dashboard of the same sweep started in the same second must not write over it
    handle, name = tempfile.mkstemp(
        prefix=f"{chosen.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}-", suffix=".db", dir=folder
    )
    os.close(handle)
    copy = Path(name)
    if chosen.where == LOCAL and chosen.study is not None:
        read_only_copy(chosen.study, copy)
    else:
        _copy_cluster_study(scope, chosen, copy, reporter)
    viewer = start_viewer(
        optuna_dashboard(),
        lambda port: [f"sqlite:///{copy}", "--host", "127.0.0.1", "--port", str(port)],
        f"the study of {chosen.name} (a copy: {copy})",
        copy.with_suffix(".log"),
        say,
        **_index_rules(scope),
    )
    return Dashboard(chosen.name, viewer, copy)


def read_only_copy(study: Path, copy: Path) -> None:
    """A consistent copy of an SQLite study, made by SQLite (while a sweep may be writing it), the original opened
    read-only."""
    if not study.is_file():
        raise MLTrainingError(f"the sweep's study {study} is gone", "run the sweep again")
    source = sqlite3.connect(f"file:{study}?mode=ro", uri=True)
    try:
        target = sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()


def _is_sweep(scope: Scope, run: BoardRun) -> bool:
    from vdk.plugin.ml_training.ops.scope import select_runs

    summary = next((r for r in select_runs(scope, "show --dashboard", partial=True).runs if r.name == run.name), None)
    return summary is not None and summary.sweep is not None


def _copy_cluster_study(scope: Scope, run: BoardRun, copy: Path, reporter: Reporter | None) -> None:
    from vdk.plugin.ml_training.ops.outputs import run_outputs

    with tempfile.TemporaryDirectory(prefix="vdk-study-") as staging:
        copied = run_outputs(scope, run.name, staging, reporter=reporter, only=STUDY_FILE)
        found = [p for p in copied.written or [] if p.name == STUDY_FILE]
        if not found:
            raise MLTrainingError(
                f"the sweep {run.name} has no study in its output claim",
                "a sweep's study is kept in its output claim: deploy it with output_pvc set",
            )
        read_only_copy(found[0], copy)

"""The verbs that show a job's runs in the viewers ML engineers already open ([Seeing your runs](seeing-runs.md)):
`vdk show --board` (`collect_board`, `show_board`: TensorBoard) and `vdk show --dashboard` (`show_dashboard`:
Optuna's dashboard). Each viewer serves on a loopback port until its `stop()`; it ends with the caller's process
too. kubernetes is imported when a function runs, and only for the cluster's runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vdk.plugin.ml_training.ops.boards import Board
    from vdk.plugin.ml_training.ops.boards import Dashboard
    from vdk.plugin.ml_training.ops.reporting import Reporter
    from vdk.plugin.ml_training.ops.scope import Scope


def collect_board(
    scope: Scope,
    runs: tuple[str, ...] = (),
    last: int = 5,
    to: str | Path | None = None,
    *,
    cluster: bool = True,
    reporter: Reporter | None = None,
) -> Board:
    """The TensorBoard event files of the job's chosen runs, copied into one folder: a run per directory, a sweep's
    trials side by side below it (what `show_board` serves).

    Args:
        scope: the job (`find_scope`).
        runs: the runs (each its name, or an end of it only it has; a sweep is one); empty: the `last` newest.
        last: how many of the newest runs, when none is named.
        to: the folder to copy them into (made if missing); None: a folder of vdk's cache for the job, emptied first.
        cluster: also the cluster's runs (their output claims, read by a short-lived pod each), not only this
            machine's `vdk run --full` runs.
        reporter: told which runs are copied, and those without event files (notes).

    Returns:
        A `Board`: the folder, the runs on it (`viewer` is None: nothing serves it).

    Raises:
        MLTrainingError: the job has no runs with event files (saying how to get some), a run named that is not
            the job's, a cluster that refused a request when only its runs were asked for.
    """
    from vdk.plugin.ml_training.ops import boards

    return boards.collect_board(scope, runs, last, to, reporter=reporter, cluster=cluster)


def show_board(
    scope: Scope,
    runs: tuple[str, ...] = (),
    last: int = 5,
    to: str | Path | None = None,
    *,
    cluster: bool = True,
    reporter: Reporter | None = None,
) -> Board:
    """`vdk show --board`: `collect_board`, then TensorBoard over the folder on a loopback port (in an environment
    of its own that uv makes once, or the one installed beside vdk).

    Args:
        scope: the job (`find_scope`).
        runs: the runs (each its name, or an end of it only it has; a sweep is one); empty: the `last` newest.
        last: how many of the newest runs, when none is named.
        to: the folder to copy them into; None: a folder of vdk's cache for the job, emptied first.
        cluster: also the cluster's runs, not only this machine's.
        reporter: told what is copied and how TensorBoard starts (notes).

    Returns:
        A `Board` whose `viewer` serves it: its `url`; `viewer.stop()` ends it.

    Raises:
        MLTrainingError: as `collect_board`; TensorBoard that cannot be installed or started, saying how to get it.
    """
    from vdk.plugin.ml_training.ops import boards

    return boards.show_board(scope, runs, last, to, reporter=reporter, cluster=cluster)


def show_dashboard(
    scope: Scope, run: str | None = None, *, cluster: bool = True, reporter: Reporter | None = None
) -> Dashboard:
    """`vdk show --dashboard`: Optuna's dashboard over a copy of a sweep's study (SQLite's own backup of it: the
    sweep's study is never written to), on a loopback port.

    Args:
        scope: the job (`find_scope`).
        run: the sweep (its name, or an end of it only it has); None: the newest, of this machine or the cluster.
        cluster: also the cluster's sweeps (the study read from the output claim), not only this machine's.
        reporter: told where the study comes from and how the dashboard starts (notes).

    Returns:
        A `Dashboard`: the sweep, the copy of its study, and the `viewer` that serves it (`url`, `stop()`).

    Raises:
        MLTrainingError: the job has no sweep, a sweep named that is not the job's, a cluster sweep without its
            study on an output claim, a dashboard that cannot be installed or started.
    """
    from vdk.plugin.ml_training.ops import boards

    return boards.show_dashboard(scope, run, reporter=reporter, cluster=cluster)

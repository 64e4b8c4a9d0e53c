"""The verbs of a job's runs on the cluster: which job (`find_scope`), `vdk list` (`list_jobs`, `gpu_usage`), `vdk
show` (`show_job`, `show_provenance`), `vdk execute` (`list_runs`, `show_run`, `follow_run`, `run_logs`, `follow_logs`,
`run_outputs`, `rerun`, `cancel_run`; a sweep's `trial_log`, `start_trial`), `vdk delete` (`delete_runs`) and
`vdk diff` (`diff_runs`). Each takes a `Scope` and, where it works on one run, `run_id`: the run's name or
the part after the job's name (`-i RUN`), default the latest. kubernetes is imported when a function runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vdk.plugin.ml_training.job.config_file import JobConfig
    from vdk.plugin.ml_training.job.settings import ConfigurationLike
    from vdk.plugin.ml_training.k8s.runs.observe import RunDetail
    from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
    from vdk.plugin.ml_training.ops.diff_runs import DiffResult
    from vdk.plugin.ml_training.ops.follow import FollowedRun
    from vdk.plugin.ml_training.ops.image_audit import ProvenanceReport
    from vdk.plugin.ml_training.ops.logs import RunLogs
    from vdk.plugin.ml_training.ops.outputs import RunOutputs
    from vdk.plugin.ml_training.ops.reporting import Reporter
    from vdk.plugin.ml_training.ops.runs import CancelledRun
    from vdk.plugin.ml_training.ops.runs import DeletedRuns
    from vdk.plugin.ml_training.ops.runs import JobDetail
    from vdk.plugin.ml_training.ops.runs import JobListing
    from vdk.plugin.ml_training.ops.runs import Rerun
    from vdk.plugin.ml_training.ops.scope import Scope
    from vdk.plugin.ml_training.ops.sweeps import StartedTrial
    from vdk.plugin.ml_training.ops.sweeps import SweepDetail
    from vdk.plugin.ml_training.ops.sweeps import TrialLog
    from vdk.plugin.ml_training.ops.usage import GpuUsage


def find_scope(
    name: str | None = None,
    team: str | None = None,
    job_path: str | Path | None = None,
    *,
    default_team: str | None = None,
    configuration: ConfigurationLike | None = None,
    read: Callable[[Path], JobConfig] | None = None,
) -> Scope:
    """Which job's runs the verbs work on, and where they are. Reads config.ini files only; contacts no cluster.

    Args:
        name: the job's name (-n; default that of `job_path`, else of the job directory the call runs in).
        team: the team (-t; '' for the runs without a team; default `[owner] team` of the job, else
            `default_team`).
        job_path: the job directory (-p), whose name, team and namespace are the defaults.
        default_team: VDK's default team (`default_team()`).
        configuration: VDK's configuration (None: the environment's, then [vdk] of the job's config.ini).
        read: how a job directory's config.ini is read (None: read here, once); the command line hands the
            reading it keeps for the whole command.

    Returns:
        A `Scope`: the team chosen (and why), the job's name, the kube context and namespace.

    Raises:
        MLTrainingError: a team that cannot be a label value; JobConfigError for a wrong config.ini.
    """
    from vdk.plugin.ml_training.ops.scope import find_scope as find

    readers = {} if read is None else {"read": read}
    return find(name, team, job_path, default_team=default_team, configuration=configuration, **readers)


def list_jobs(scope: Scope, *, all_teams: bool = False, reporter: Reporter | None = None) -> JobListing:
    """`vdk list`: every job with runs in the scope's namespace, of the scope's team unless `all_teams`.

    Args:
        scope: the job (`find_scope`).
        all_teams: every team's jobs, not only the scope's team's.
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `JobListing`: each job's latest run, phase and run count (`to_dict()` is `vdk list -o json`), and
        `notes` on what could not be listed.

    Raises:
        MLTrainingError: no cluster configured or reachable, a request the cluster refused.
    """
    from vdk.plugin.ml_training.ops import runs

    return runs.list_jobs(scope, all_teams, reporter)


def show_job(scope: Scope, run_id: str | None = None, *, reporter: Reporter | None = None) -> JobDetail:
    """`vdk show`: the job's runs, and the latest's (or `run_id`'s) detail with its diagnosis.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `JobDetail`: the runs (newest first), `latest` (every rank's state, why it waits or failed with the
        fix, progress), a sweep's trial table.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
    """
    from vdk.plugin.ml_training.ops import runs

    return runs.show_job(scope, run_id, reporter)


def list_runs(scope: Scope, *, reporter: Reporter | None = None) -> list[RunSummary]:
    """`vdk execute --list`: the job's runs, newest first (what could not be listed: notes of `reporter`).

    Args:
        scope: the job (`find_scope`).
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        The job's runs (`RunSummary`), newest first.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
    """
    from vdk.plugin.ml_training.ops import runs

    return runs.list_runs(scope, reporter)


def show_provenance(
    scope: Scope,
    run_id: str | None = None,
    *,
    public_key: str | Path | None = None,
    reporter: Reporter | None = None,
) -> ProvenanceReport:
    """`vdk show --provenance`: what the run's image has attached (its provenance and SBOM), read back from its
    registry, the signature verified when a public key is given, and compared with the run record.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        public_key: cosign.pub (or a PEM public key), to verify the signature.
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `ProvenanceReport`: what is attached, signed and verified or not, how it agrees with the run record,
        and the `findings` (each a problem with its fix; none when all is as it should be).

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused, a public key that cannot be read.
    """
    from vdk.plugin.ml_training.ops import image_audit

    return image_audit.show_provenance(scope, run_id, public_key, reporter)


def show_run(scope: Scope, run_id: str | None = None, *, reporter: Reporter | None = None) -> RunDetail:
    """`vdk execute --show`: one run's ranks, why it waits or failed (with the fix), its progress.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `RunDetail` (`findings`, `ranks`, `progress`; `to_dict()` is `-o json`).

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
    """
    from vdk.plugin.ml_training.ops import runs

    return runs.show_run(scope, run_id, reporter)


def follow_run(scope: Scope, run_id: str | None = None, *, reporter: Reporter | None = None) -> FollowedRun:
    """`vdk execute --show --follow`: the run followed to its end.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        reporter: told the run once picked (`following`), rank 0's lines (`log_line`), each failed container
            (`rank_failed`), why ranks have no log yet (notes).

    Returns:
        A `FollowedRun`: the run's last state, the rank failures seen, the diagnosis of a run that failed.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        KeyboardInterrupt: stops following; the run goes on.
    """
    from vdk.plugin.ml_training.ops.follow import follow_job

    return follow_job(scope, run_id, reporter)


def run_logs(scope: Scope, run_id: str | None = None, *, reporter: Reporter | None = None) -> RunLogs:
    """`vdk execute --logs`: every rank's log as it is now (a restarted rank's previous container's too).

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `RunLogs`: each rank's log, or why it has none; `why_no_pods()` for a run without pods.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
    """
    from vdk.plugin.ml_training.ops import logs

    return logs.run_logs(scope, run_id, reporter)


def follow_logs(scope: Scope, run_id: str | None = None, *, reporter: Reporter | None = None) -> RunSummary:
    """`vdk execute --logs --follow`: every rank's log as it is written, until the run ends.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        reporter: told each line (`log_line(rank, line)`) and why a rank has no log yet (notes).

    Returns:
        The run's last `RunSummary`, once it ended and every log was read to its end.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        KeyboardInterrupt: stops following; the run goes on.
    """
    from vdk.plugin.ml_training.ops import logs

    return logs.follow_logs(scope, run_id, reporter)


def run_outputs(
    scope: Scope, run_id: str | None = None, *, to: str | Path | None = None, reporter: Reporter | None = None
) -> RunOutputs:
    """`vdk execute --outputs`: the files a run wrote to its output claim, or with `to` copied into that directory
    (each checked against its digest), through a copy pod that is deleted whatever happens.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        to: the directory to copy them into (made if missing); None: only list them.
        reporter: told which pod reads them, and each file copied (notes).

    Returns:
        A `RunOutputs`: the files, their size, where they were copied.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        MLTrainingError: a run without an output claim, saying how to give it one.
    """
    from vdk.plugin.ml_training.ops import outputs

    return outputs.run_outputs(scope, run_id, to, reporter=reporter)


def rerun(
    scope: Scope,
    run_id: str | None = None,
    *,
    reason: str | None = None,
    from_run: str | None = None,
    reporter: Reporter | None = None,
) -> Rerun:
    """`vdk execute --start`: a past run again exactly (same image digest, manifests and dataset versions), under a
    new name; with `from_run` (`--from RUN`), continuing that run: the new run's working directory begins with its
    outputs and checkpoints, on the same claim, and its frameworks resume from them.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest, or `from_run`.
        reason: why, kept in the new run's audit trail.
        from_run: the ended run to continue: its name, or the part after the job's name.
        reporter: told what an interrupted create left (notes).

    Returns:
        A `Rerun`: the new run's name, the run it repeats, the run it continues, what was created.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a run to
            continue that kept no outputs, has not ended or wrote to another claim, a request the cluster refused.
    """
    from vdk.plugin.ml_training.ops import runs

    return runs.rerun(scope, run_id, reason, reporter, from_run)


def cancel_run(scope: Scope, run_id: str | None = None, *, reporter: Reporter | None = None) -> CancelledRun:
    """`vdk execute --cancel`: a run stopped and deleted (default the latest, which must not have ended); its
    GPU-hours stay counted.

    Args:
        scope: the job (`find_scope`).
        run_id: the run: its name, or the part after the job's name (-i RUN); default the latest.
        reporter: told when the run's GPU-hours cannot be kept (a warning).

    Returns:
        A `CancelledRun`: the run as it was, and what was deleted.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        MLTrainingError: the latest run has ended already (name the run to cancel).
    """
    from vdk.plugin.ml_training.ops import runs

    return runs.cancel_run(scope, run_id, reporter)


def delete_runs(
    scope: Scope,
    *,
    confirm: Callable[[JobSelection], bool] | None = None,
    reporter: Reporter | None = None,
) -> DeletedRuns:
    """`vdk delete`: every run of the scope's (team, job), running ones stopped, and their records; their
    GPU-hours stay counted. Another team's runs only when that team was named.

    Args:
        scope: the job (`find_scope`).
        confirm: shown the runs that would go (`JobSelection.runs`); False deletes nothing (default: yes).
        reporter: told each run deleted (`run_deleted`), and when their GPU-hours cannot be kept.

    Returns:
        A `DeletedRuns`: the selection (`others`: other teams' runs, kept) and the runs deleted.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        MLTrainingError: another team's runs without that team named; a run that could not be deleted
            (the others say which were).
    """
    from vdk.plugin.ml_training.ops import runs

    return runs.delete_job(scope, confirm, reporter)


def gpu_usage(
    scope: Scope,
    *,
    all_teams: bool = False,
    since_seconds: int | None = None,
    reporter: Reporter | None = None,
) -> GpuUsage:
    """`vdk list --usage`: GPU-hours by team and job, by cause (used, idle, start-up, after the last step,
    failed, stalled, cancelled), and the measured utilisation.

    Args:
        scope: the job (`find_scope`).
        all_teams: every team's runs, not only the scope's team's.
        since_seconds: only this last period (default: since the oldest run still in the cluster).
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `GpuUsage` (`report`, `to_dict()`).

    Raises:
        MLTrainingError: no cluster configured or reachable, a request the cluster refused.
    """
    from vdk.plugin.ml_training.ops import usage

    return usage.gpu_usage(scope, all_teams, since_seconds, reporter)


def diff_runs(scope: Scope, run_a: str, run_b: str, *, reporter: Reporter | None = None) -> DiffResult:
    """`vdk diff RUN_A RUN_B`: how each run ended, and what changed from the first to the second.

    Args:
        scope: the job (`find_scope`).
        run_a: the first run (its name, or the part after the job's name).
        run_b: the second run.
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `DiffResult`: `before` and `after` (phase, loss, metrics, duration, GPU-hours) and the `RunChanges`
        (code, requirements, configuration, base image, data).

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
    """
    from vdk.plugin.ml_training.ops import diff_runs as diffs

    return diffs.diff_runs(scope, run_a, run_b, reporter)


def show_sweep(scope: Scope, run_id: str | None = None, *, reporter: Reporter | None = None) -> SweepDetail:
    """The trial table of a sweep (default the job's latest sweep), as `vdk show` shows it.

    Args:
        scope: the job (`find_scope`).
        run_id: the sweep (default the job's latest sweep).
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `SweepDetail`: `table` (trials sorted by the metric, `best`), or `why` it is not known yet.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        MLTrainingError: a run that is not a sweep, or a job without one.
    """
    from vdk.plugin.ml_training.ops import sweeps

    return sweeps.show_sweep(scope, run_id, reporter)


def trial_log(scope: Scope, trial: str, run_id: str | None = None, *, reporter: Reporter | None = None) -> TrialLog:
    """`vdk execute --logs --trial N`: the log of the pod that ran trial `trial` (a number, or "best").

    Args:
        scope: the job (`find_scope`).
        trial: the trial's number, or "best".
        run_id: the sweep (default the job's latest sweep).
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `TrialLog`: the trial, its pod and log, or why there is none.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        MLTrainingError: no such trial, or the trials are not known yet.
    """
    from vdk.plugin.ml_training.ops import sweeps

    return sweeps.trial_log(scope, trial, run_id, reporter)


def start_trial(
    scope: Scope,
    trial: str = "best",
    *,
    run_id: str | None = None,
    nodes: int | None = None,
    reason: str | None = None,
    force: bool = False,
    reporter: Reporter | None = None,
) -> StartedTrial:
    """`vdk execute --start --trial best`: a trial of a sweep (default the best of the latest sweep) started as a
    normal run of the sweep's image with the trial's values.

    Args:
        scope: the job (`find_scope`).
        trial: the trial's number, or "best".
        run_id: the sweep (default the job's latest sweep).
        nodes: the run's nodes (default the job's).
        reason: why, kept in the run's audit trail.
        force: start a trial that did not complete with a metric (failed, pruned, still running), refused
            without it.
        reporter: told the notes (a list that failed, a retried request); None: nothing is told.

    Returns:
        A `StartedTrial`: the run started, the sweep and trial it came from, what was created.

    Raises:
        MLTrainingError: no cluster configured or reachable, no such run of the job (of the team), a request
            the cluster refused.
        MLTrainingError: no such trial (or no completed one for "best"), a trial that did not complete (without
            `force`), or the trials are not known yet.
    """
    from vdk.plugin.ml_training.ops import sweeps

    return sweeps.start_trial(scope, trial, nodes, reason, run_id, reporter, force)

"""The Python API of vdk-ml-training: every verb of the command line as a typed function, and the types they
return, for notebooks, CI steps and other controllers. The command line calls these same functions and only
renders what they return; a caller of this module needs nothing of `ops` or `k8s`.

    from vdk.plugin.ml_training import api

    spec = api.job_spec("jobs/mnist")
    result = api.run_job(spec)                          # `vdk run`: the smoke run
    print("passed" if result.passed else result.error.fix)
    detail = api.show_job(api.find_scope("mnist"))     # `vdk show`: the runs, the latest's diagnosis
    board = api.show_board(api.find_scope("mnist"))    # `vdk show --board`: TensorBoard, `board.viewer.url`

Every function is quiet: what it does as it goes is told to its `reporter` (a `Reporter`; `StderrReporter`
shows notes and progress on stderr), and what it found is what it returns (`to_dict()` is what `-o json`
prints). Problems raise `MLTrainingError`, whose `problem` and `fix` are what `vdk` prints. A KeyboardInterrupt
(Ctrl-C) stops every process a call started before it reaches the caller. Heavy modules (torch's launcher, the
image builder, kubernetes) are imported when a function runs; the types below when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.api.job_verbs import build
from vdk.plugin.ml_training.api.job_verbs import default_team
from vdk.plugin.ml_training.api.job_verbs import deploy
from vdk.plugin.ml_training.api.job_verbs import deploy_spec
from vdk.plugin.ml_training.api.job_verbs import follow_deployed
from vdk.plugin.ml_training.api.job_verbs import job_spec
from vdk.plugin.ml_training.api.job_verbs import parse_overrides
from vdk.plugin.ml_training.api.job_verbs import plan_deploy
from vdk.plugin.ml_training.api.job_verbs import run_job
from vdk.plugin.ml_training.api.job_verbs import set_default_team
from vdk.plugin.ml_training.api.run_verbs import cancel_run
from vdk.plugin.ml_training.api.run_verbs import delete_runs
from vdk.plugin.ml_training.api.run_verbs import diff_runs
from vdk.plugin.ml_training.api.run_verbs import find_scope
from vdk.plugin.ml_training.api.run_verbs import follow_logs
from vdk.plugin.ml_training.api.run_verbs import follow_run
from vdk.plugin.ml_training.api.run_verbs import gpu_usage
from vdk.plugin.ml_training.api.run_verbs import list_jobs
from vdk.plugin.ml_training.api.run_verbs import list_runs
from vdk.plugin.ml_training.api.run_verbs import rerun
from vdk.plugin.ml_training.api.run_verbs import run_logs
from vdk.plugin.ml_training.api.run_verbs import run_outputs
from vdk.plugin.ml_training.api.run_verbs import show_job
from vdk.plugin.ml_training.api.run_verbs import show_provenance
from vdk.plugin.ml_training.api.run_verbs import show_run
from vdk.plugin.ml_training.api.run_verbs import show_sweep
from vdk.plugin.ml_training.api.run_verbs import start_trial
from vdk.plugin.ml_training.api.run_verbs import trial_log
from vdk.plugin.ml_training.api.service_verbs import build_as_builder
from vdk.plugin.ml_training.api.service_verbs import check_service_setup
from vdk.plugin.ml_training.api.service_verbs import deploy_through_service
from vdk.plugin.ml_training.api.service_verbs import follow_execution
from vdk.plugin.ml_training.api.service_verbs import launch_execution
from vdk.plugin.ml_training.api.service_verbs import service_route
from vdk.plugin.ml_training.api.viewer_verbs import collect_board
from vdk.plugin.ml_training.api.viewer_verbs import show_board
from vdk.plugin.ml_training.api.viewer_verbs import show_dashboard

if TYPE_CHECKING:
    from vdk.plugin.ml_training.diagnosis.finding import Finding as Finding
    from vdk.plugin.ml_training.errors import JobConfigError as JobConfigError
    from vdk.plugin.ml_training.errors import MLTrainingError as MLTrainingError
    from vdk.plugin.ml_training.image.build import PushedImage as PushedImage
    from vdk.plugin.ml_training.image.build_plan import ImagePlan as ImagePlan
    from vdk.plugin.ml_training.image.build_progress import Progress as Progress
    from vdk.plugin.ml_training.job.model import MLJobSpec as MLJobSpec
    from vdk.plugin.ml_training.k8s.gpu_hours import UsageReport as UsageReport
    from vdk.plugin.ml_training.k8s.runs.observe import RankLog as RankLog
    from vdk.plugin.ml_training.k8s.runs.observe import RunDetail as RunDetail
    from vdk.plugin.ml_training.k8s.runs.pod_states import RankFailure as RankFailure
    from vdk.plugin.ml_training.k8s.runs.restarts import Restart as Restart
    from vdk.plugin.ml_training.k8s.runs.selection import JobSelection as JobSelection
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary as RunSummary
    from vdk.plugin.ml_training.local.launch_plan import LaunchPlan as LaunchPlan
    from vdk.plugin.ml_training.ops.boards import Board as Board
    from vdk.plugin.ml_training.ops.boards import Dashboard as Dashboard
    from vdk.plugin.ml_training.ops.cs_deploy import ServiceDeployResult as ServiceDeployResult
    from vdk.plugin.ml_training.ops.cs_deploy import ServiceRoute as ServiceRoute
    from vdk.plugin.ml_training.ops.cs_launch import LaunchOutcome as LaunchOutcome
    from vdk.plugin.ml_training.ops.cs_setup import SetupCheck as SetupCheck
    from vdk.plugin.ml_training.ops.deploy_changes import Changes as Changes
    from vdk.plugin.ml_training.ops.deploy_plan import DeployPlan as DeployPlan
    from vdk.plugin.ml_training.ops.deploy_plan import DeployResult as DeployResult
    from vdk.plugin.ml_training.ops.deploy_plan import Target as Target
    from vdk.plugin.ml_training.ops.deploy_plan import Unchanged as Unchanged
    from vdk.plugin.ml_training.ops.diff_runs import DiffResult as DiffResult
    from vdk.plugin.ml_training.ops.diff_runs import Outcome as Outcome
    from vdk.plugin.ml_training.ops.follow import FollowedRun as FollowedRun
    from vdk.plugin.ml_training.ops.image_audit import ProvenanceReport as ProvenanceReport
    from vdk.plugin.ml_training.ops.local_result import LocalRunFailed as LocalRunFailed
    from vdk.plugin.ml_training.ops.local_result import LocalRunResult as LocalRunResult
    from vdk.plugin.ml_training.ops.local_run import LocalJobResult as LocalJobResult
    from vdk.plugin.ml_training.ops.logs import RunLogs as RunLogs
    from vdk.plugin.ml_training.ops.outputs import RunOutputs as RunOutputs
    from vdk.plugin.ml_training.ops.reporting import Reporter as Reporter
    from vdk.plugin.ml_training.ops.reporting import StderrReporter as StderrReporter
    from vdk.plugin.ml_training.ops.run_changes import DataChange as DataChange
    from vdk.plugin.ml_training.ops.run_changes import RunChanges as RunChanges
    from vdk.plugin.ml_training.ops.runs import CancelledRun as CancelledRun
    from vdk.plugin.ml_training.ops.runs import DeletedRuns as DeletedRuns
    from vdk.plugin.ml_training.ops.runs import JobDetail as JobDetail
    from vdk.plugin.ml_training.ops.runs import JobEntry as JobEntry
    from vdk.plugin.ml_training.ops.runs import JobListing as JobListing
    from vdk.plugin.ml_training.ops.runs import Rerun as Rerun
    from vdk.plugin.ml_training.ops.scope import Scope as Scope
    from vdk.plugin.ml_training.ops.sweep_local import LocalSweep as LocalSweep
    from vdk.plugin.ml_training.ops.sweep_smoke import CheckedTrial as CheckedTrial
    from vdk.plugin.ml_training.ops.sweep_smoke import SweepSmoke as SweepSmoke
    from vdk.plugin.ml_training.ops.sweeps import StartedTrial as StartedTrial
    from vdk.plugin.ml_training.ops.sweeps import SweepDetail as SweepDetail
    from vdk.plugin.ml_training.ops.sweeps import SweepTable as SweepTable
    from vdk.plugin.ml_training.ops.sweeps import TrialLog as TrialLog
    from vdk.plugin.ml_training.ops.sweeps import TrialRow as TrialRow
    from vdk.plugin.ml_training.ops.usage import GpuUsage as GpuUsage
    from vdk.plugin.ml_training.ops.viewers import Viewer as Viewer

# The types users meet, by the module that defines them: imported when first used (`api.RunDetail`).
_TYPES = {
    "MLTrainingError": "errors",
    "JobConfigError": "errors",
    "Finding": "diagnosis.finding",
    "MLJobSpec": "job.model",
    "LaunchPlan": "local.launch_plan",
    "PushedImage": "image.build",
    "ImagePlan": "image.build_plan",
    "Progress": "image.build_progress",
    "Reporter": "ops.reporting",
    "StderrReporter": "ops.reporting",
    "Scope": "ops.scope",
    "LocalJobResult": "ops.local_run",
    "LocalRunResult": "ops.local_result",
    "LocalRunFailed": "ops.local_result",
    "SweepSmoke": "ops.sweep_smoke",
    "CheckedTrial": "ops.sweep_smoke",
    "LocalSweep": "ops.sweep_local",
    "DeployPlan": "ops.deploy_plan",
    "DeployResult": "ops.deploy_plan",
    "Unchanged": "ops.deploy_plan",
    "Target": "ops.deploy_plan",
    "Changes": "ops.deploy_changes",
    "RunChanges": "ops.run_changes",
    "DataChange": "ops.run_changes",
    "JobListing": "ops.runs",
    "JobEntry": "ops.runs",
    "JobDetail": "ops.runs",
    "Rerun": "ops.runs",
    "CancelledRun": "ops.runs",
    "DeletedRuns": "ops.runs",
    "RunSummary": "k8s.runs.summary",
    "RunDetail": "k8s.runs.observe",
    "RankLog": "k8s.runs.observe",
    "JobSelection": "k8s.runs.selection",
    "RankFailure": "k8s.runs.pod_states",
    "Restart": "k8s.runs.restarts",
    "UsageReport": "k8s.gpu_hours",
    "FollowedRun": "ops.follow",
    "ProvenanceReport": "ops.image_audit",
    "RunLogs": "ops.logs",
    "RunOutputs": "ops.outputs",
    "GpuUsage": "ops.usage",
    "DiffResult": "ops.diff_runs",
    "Outcome": "ops.diff_runs",
    "SweepDetail": "ops.sweeps",
    "SweepTable": "ops.sweeps",
    "TrialRow": "ops.sweeps",
    "TrialLog": "ops.sweeps",
    "StartedTrial": "ops.sweeps",
    "ServiceRoute": "ops.cs_deploy",
    "ServiceDeployResult": "ops.cs_deploy",
    "SetupCheck": "ops.cs_setup",
    "LaunchOutcome": "ops.cs_launch",
    "Board": "ops.boards",
    "Dashboard": "ops.boards",
    "Viewer": "ops.viewers",
}

__all__ = [
    # the verbs
    "job_spec",
    "deploy_spec",
    "parse_overrides",
    "run_job",
    "plan_deploy",
    "build",
    "deploy",
    "follow_deployed",
    "default_team",
    "set_default_team",
    "find_scope",
    "list_jobs",
    "show_job",
    "show_provenance",
    "list_runs",
    "show_run",
    "follow_run",
    "run_logs",
    "follow_logs",
    "run_outputs",
    "rerun",
    "cancel_run",
    "delete_runs",
    "gpu_usage",
    "diff_runs",
    "show_sweep",
    "trial_log",
    "start_trial",
    "service_route",
    "deploy_through_service",
    "follow_execution",
    "check_service_setup",
    "build_as_builder",
    "launch_execution",
    "collect_board",
    "show_board",
    "show_dashboard",
    # the types they take and return
    "MLTrainingError",
    "JobConfigError",
    "Finding",
    "MLJobSpec",
    "LaunchPlan",
    "PushedImage",
    "ImagePlan",
    "Progress",
    "Reporter",
    "StderrReporter",
    "Scope",
    "LocalJobResult",
    "LocalRunResult",
    "LocalRunFailed",
    "SweepSmoke",
    "CheckedTrial",
    "LocalSweep",
    "DeployPlan",
    "DeployResult",
    "Unchanged",
    "Target",
    "Changes",
    "RunChanges",
    "DataChange",
    "JobListing",
    "JobEntry",
    "JobDetail",
    "Rerun",
    "CancelledRun",
    "DeletedRuns",
    "RunSummary",
    "RunDetail",
    "RankLog",
    "JobSelection",
    "RankFailure",
    "Restart",
    "UsageReport",
    "FollowedRun",
    "ProvenanceReport",
    "RunLogs",
    "RunOutputs",
    "GpuUsage",
    "DiffResult",
    "Outcome",
    "SweepDetail",
    "SweepTable",
    "TrialRow",
    "TrialLog",
    "StartedTrial",
    "ServiceRoute",
    "ServiceDeployResult",
    "SetupCheck",
    "LaunchOutcome",
    "Board",
    "Dashboard",
    "Viewer",
]


def __getattr__(name: str) -> Any:
    module = _TYPES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"vdk.plugin.ml_training.{module}"), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

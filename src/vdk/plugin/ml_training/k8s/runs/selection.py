"""Which runs a verb works on: those of one (team, job) in a namespace.

A job is identified by its team and its name; teams sharing a namespace may use the same job names.
`select_job` lists the runs of a job name once (one labelled list per backend, whatever the number of
runs and teams), groups them by their `vdk.io/team` label, and keeps the chosen team's — or refuses,
saying which teams have runs, when the choice is missing or ambiguous. Verbs that change runs (delete,
cancel) act on another team's runs only when that team is named with -t.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.job.teams import NO_TEAM_TEXT
from vdk.plugin.ml_training.job.teams import TeamChoice
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary


def where(client: KubeClient) -> str:
    return f"namespace {client.namespace}" + (f" (context {client.context})" if client.context else "")


@dataclass(frozen=True)
class TeamRuns:
    """The runs of one team (`label` None: runs without a team label), newest first."""

    label: str | None
    runs: list[RunSummary]

    @property
    def name(self) -> str:
        """The team as it was written (the latest run's annotation), else its label value."""
        if self.label is None:
            return NO_TEAM_TEXT
        return next((r.team for r in self.runs if r.team), self.label)

    def describe(self) -> str:
        count = f"{len(self.runs)} run{'s' if len(self.runs) != 1 else ''}"
        return f"runs without a team ({count})" if self.label is None else f"team {self.name} ({count})"

    def option(self) -> str:
        """The -t option that selects these runs."""
        return f"-t {shlex.quote(self.label or '')}"


def by_team(runs: Iterable[RunSummary]) -> list[TeamRuns]:
    """`runs` (newest first) grouped by team label: teams in label order, runs without a team last."""
    groups: dict[str | None, list[RunSummary]] = {}
    for run in runs:
        groups.setdefault(run.team_label, []).append(run)
    return [TeamRuns(label, groups[label]) for label in sorted(groups, key=lambda k: (k is None, k or ""))]


@dataclass(frozen=True)
class JobSelection:
    """The runs of one (team, job) a verb works on; `others` are the same job name's runs of other teams."""

    client: KubeClient
    job_name: str
    team: TeamRuns
    choice: TeamChoice | None
    others: list[TeamRuns] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be listed (a view shows the rest)

    @property
    def runs(self) -> list[RunSummary]:
        return self.team.runs

    @property
    def team_name(self) -> str | None:
        return None if self.team.label is None else self.team.name

    def describe(self) -> str:
        """ "mnist of team vision", "mnist (runs without a team)" """
        if self.team.label is None:
            return f"{self.job_name} (runs without a team)"
        return f"{self.job_name} of team {self.team.name}"

    def heading(self) -> str:
        """`describe()` and why this team: "mnist of team vision (your default team, `vdk set-default`)"."""
        why = self.choice is not None and not self.choice.explicit and self.team.label is not None
        return self.describe() + (f" ({self.choice.source})" if why and self.choice else "")

    def pick(self, run_id: str | None, command: str) -> RunSummary:
        """The run `-i` names (its full name or the part after `<job>-`), else (None) the latest. An empty name is
        refused: `-i ""` (a variable that was not set) is no way to ask for the latest run."""
        if run_id is None:
            return self.runs[0]
        if not run_id.strip():
            raise MLTrainingError(
                f"the run's name is empty ({run_id!r}): an empty name names no run, not the latest one",
                f"name a run of {self.describe()} ({', '.join(r.name for r in self.runs[:3])}"
                f"{', ...' if len(self.runs) > 3 else ''}; `vdk execute --list -n {self.job_name}` lists them), or "
                f"leave the option out for the latest: `{command}`",
            )
        wanted = run_id if run_id.startswith(f"{self.job_name}-") else f"{self.job_name}-{run_id}"
        for run in self.runs:
            if run.name == wanted:
                return run
        for other in self.others:
            if any(run.name == wanted for run in other.runs):
                raise MLTrainingError(
                    f"run {wanted} is not one of {self.describe()}: it belongs to "
                    + ("no team" if other.label is None else f"team {other.name}"),
                    f"name its team to work on it: `{command} {other.option()}`",
                )
        raise KubeApiError(
            f"{self.describe()} has no run {wanted} in {where(self.client)}",
            f"its runs are: {', '.join(r.name for r in self.runs)}",
            404,
            "NotFound",
        )


def select_job(
    client: KubeClient,
    job_name: str,
    choice: TeamChoice | None,
    command: str,
    changes: bool = False,
    partial: bool = False,
) -> JobSelection:
    """The runs of `job_name` of the chosen team in the client's namespace.

    Without a choice the job's only team is taken; with several, an error lists them and asks for -t.
    `changes` (delete, cancel): a team that is not the caller's own (`TeamChoice.own`), or a team taken
    for want of a choice, must be named with -t. `command` is the command line to suggest (`vdk delete -n
    mnist`). One labelled list per backend; errors are MLTrainingErrors that say what to do. `partial` (a
    view): a backend whose list fails costs only its runs, said in the selection's `notes`."""
    notes: list[str] | None = [] if partial and not changes else None
    teams = by_team(client.list_runs(job_name=job_name, notes=notes))
    if not teams:
        scope = f" {choice.phrase()}" if choice else ""
        raise KubeApiError(
            f"there are no runs of {job_name}{scope} in {where(client)}",
            f"`vdk list -a` shows the ml-training jobs there; set another namespace with {variable('namespace')} "
            f"(or each team's with {variable('team_namespaces')})",
            404,
            "NotFound",
        )
    chosen: TeamRuns | None
    if choice is None:
        if len(teams) > 1:
            raise MLTrainingError(
                f"{job_name} has runs of {len(teams)} teams in {where(client)}: "
                + ", ".join(t.describe() for t in teams),
                f"name the team with -t, e.g. `{command} {teams[0].option()}`; "
                "set your own team once with `vdk set-default -t TEAM`",
            )
        (chosen,) = teams
        if changes and chosen.label is not None:
            raise MLTrainingError(
                f"the runs of {job_name} in {where(client)} are team {chosen.name}'s, and no team of yours is known "
                "(no -t, no default team, not in a job directory)",
                f"name the team to act on them: `{command} {chosen.option()}` "
                "(or set your team once with `vdk set-default -t TEAM`)",
            )
        return JobSelection(client, job_name, chosen, None, [], notes or [])
    wanted = choice.label
    chosen = next((t for t in teams if t.label == wanted), None)
    others = [t for t in teams if t is not chosen]
    if chosen is None:
        raise MLTrainingError(
            f"there are no runs of {job_name} {choice.phrase()} in {where(client)}; {job_name} has "
            + ", ".join(t.describe() for t in teams),
            f"name the team with -t to work on those: `{command} {teams[0].option()}`",
        )
    if changes and not choice.own:
        raise MLTrainingError(
            f"team {choice.name} ({choice.source}) is not your default team, and the runs of another team are "
            "changed only when it is named with -t",
            f"name the team to act on its runs: `{command} {chosen.option()}`",
        )
    return JobSelection(client, job_name, chosen, choice, others, notes or [])


def select_jobs(client: KubeClient, choice: TeamChoice | None, notes: list[str] | None = None) -> list[JobSelection]:
    """Every (team, job) with runs in the client's namespace — only the chosen team's when there is a
    choice — ordered by job name, then team. One labelled list per backend; with `notes`, one that fails
    costs only its runs (a line in `notes` says so)."""
    if choice is None:
        runs = client.list_runs(notes=notes)
    else:
        runs = client.list_runs(team=choice.label, unteamed=choice.label is None, notes=notes)
    by_job: dict[str, list[RunSummary]] = {}
    for run in runs:  # newest first
        by_job.setdefault(run.job_name or run.name, []).append(run)
    return [
        JobSelection(client, job_name, team, choice)
        for job_name in sorted(by_job)
        for team in by_team(by_job[job_name])
    ]

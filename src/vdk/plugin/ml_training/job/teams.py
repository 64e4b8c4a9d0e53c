"""Teams: the label value a team's name becomes, which team a command is for, and a team's namespace and
Kueue queue from VDK configuration.

VDK identifies a job by its team and its name. On a cluster the team is the `vdk.io/team` label of every
object of a run, so a team's name must be a label value: it is normalised (surrounding blanks dropped,
inner blanks become `-`, as VDK's "Example Team" becomes `Example-Team`) and then validated, here only.
Knows no cluster and no screen.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.errors import SettingError
from vdk.plugin.ml_training.job import keys
from vdk.plugin.ml_training.job.names import DNS_1123_LABEL
from vdk.plugin.ml_training.job.names import DNS_1123_SUBDOMAIN
from vdk.plugin.ml_training.job.names import LABEL_VALUE
from vdk.plugin.ml_training.job.names import MAX_LABEL_LENGTH
from vdk.plugin.ml_training.job.names import MAX_SUBDOMAIN_LENGTH
from vdk.plugin.ml_training.job.names import as_label_value

NO_TEAM_TEXT = "(no team)"  # how runs without a team label are shown

# VDK configuration keys of the mapping (also VDK_ML_TRAINING_TEAM_NAMESPACES / _QUEUES)
TEAM_NAMESPACES = keys.key("team_namespaces").setting_name
TEAM_QUEUES = keys.key("team_queues").setting_name

# VDK's default team, as `vdk set-default -t TEAM` of the Control Service CLI writes it (and reads it:
# vdk.internal.control.configuration.defaults_config); the same file with or without that CLI.
DEFAULTS_FOLDER_ENV = "VDK_BASE_CONFIG_FOLDER"
DEFAULTS_FOLDER = ".vdk.internal"
DEFAULTS_FILE = "vdk-configuration.ini"
DEFAULTS_SECTION = "defaults"
DEFAULT_TEAM_OPTION = "team-name"


# --- a team's name as a label value ----------------------------------------------------------------


def normalise(team: str) -> str:
    """`team` as the label carries it: without surrounding blanks, inner blanks as `-`."""
    return re.sub(r"\s+", "-", team.strip())


def label_problem(team: str) -> str | None:
    """Why `team` cannot be a team label value (after `normalise`), or None when it can."""
    value = normalise(team)
    if not value:
        return "a team name cannot be empty"
    if len(value) > MAX_LABEL_LENGTH:
        return f"team {team!r} is longer than the {MAX_LABEL_LENGTH} characters a Kubernetes label value holds"
    if not LABEL_VALUE.match(value):
        return (
            f"team {team!r} cannot be a Kubernetes label value (letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit; blanks become '-')"
        )
    return None


def suggested_name(team: str) -> str:
    """A label-valid team name close to `team`, for the fix of an error."""
    return as_label_value(normalise(team)) or "my-team"


def team_label(team: str) -> str:
    """The `vdk.io/team` label value of `team`; MLTrainingError (with the fix) when it cannot be one."""
    problem = label_problem(team)
    if problem:
        raise MLTrainingError(problem, f"use a team name such as {suggested_name(team)!r}")
    return normalise(team)


def same_team(a: str | None, b: str | None) -> bool:
    """Whether two team names (or label values) are the same team; None is "no team"."""
    if a is None or b is None:
        return a is None and b is None
    return normalise(a) == normalise(b)


# --- VDK's default team --------------------------------------------------------------------------------


def defaults_path() -> Path:
    """The file `vdk set-default` writes: ~/.vdk.internal/vdk-configuration.ini (or under $VDK_BASE_CONFIG_FOLDER)."""
    return Path(os.environ.get(DEFAULTS_FOLDER_ENV, str(Path.home()))) / DEFAULTS_FOLDER / DEFAULTS_FILE


def default_team() -> str | None:
    """The team `vdk set-default -t TEAM` set, or None."""
    path = defaults_path()
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError) as e:
        raise MLTrainingError(
            f"your default team cannot be read from {path}: {str(e).splitlines()[0]}",
            "set it again with `vdk set-default -t TEAM` (or delete that file)",
        ) from None
    value = parser.get(DEFAULTS_SECTION, DEFAULT_TEAM_OPTION, fallback="").strip()
    return value or None


def write_default_team(team: str | None) -> Path:
    """Set (or, with None, remove) the default team in the file the Control Service CLI uses too."""
    path = defaults_path()
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    if not parser.has_section(DEFAULTS_SECTION):
        parser.add_section(DEFAULTS_SECTION)
    if team is None:
        parser.remove_option(DEFAULTS_SECTION, DEFAULT_TEAM_OPTION)
    else:
        parser.set(DEFAULTS_SECTION, DEFAULT_TEAM_OPTION, team)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        parser.write(f)
    return path


# --- which team a command is for -----------------------------------------------------------------------

FROM_OPTION = "-t"
FROM_DEFAULT = "your default team, `vdk set-default`"


def from_owner(config_path: Path | str) -> str:
    return f"[owner] team of {config_path}"


@dataclass(frozen=True)
class TeamChoice:
    """The team a command works on and why. `name` "" means the runs without a team (`-t ''`).

    `own`: the caller's own team — named with -t, the default team, or the team of the caller's job
    when no default team is set. Runs of any other team are only changed when the team is named with -t."""

    name: str
    source: str
    own: bool

    @property
    def label(self) -> str | None:
        """The label value (None: runs without a team label)."""
        return team_label(self.name) if self.name else None

    @property
    def explicit(self) -> bool:
        return self.source == FROM_OPTION

    def phrase(self) -> str:
        """ "of team vision (your default team, `vdk set-default`)", "without a team" """
        if not self.name:
            return "without a team"
        return f"of team {self.name}" + ("" if self.explicit else f" ({self.source})")


@dataclass(frozen=True)
class OwnerTeam:
    """A job directory's `[owner] team` (None when it has none) and where it was read."""

    team: str | None
    config_path: Path


def choose_team(
    option: str | None,
    job: OwnerTeam | None = None,
    default: str | None = None,
    here: OwnerTeam | None = None,
) -> TeamChoice | None:
    """The team of a command on runs: `-t` (`option`), else the `[owner] team` of the job named with -p
    (`job`), else VDK's default team, else the `[owner] team` of the job directory the command runs in
    (`here`). None when no team is known. Blank names count as none; `-t ''` is the choice of no team (its
    `name` is "")."""
    if option is not None:
        return TeamChoice(option.strip(), FROM_OPTION, own=True)
    default = (default or "").strip() or None
    if job is not None and job.team and job.team.strip():
        own = default is None or same_team(default, job.team)
        return TeamChoice(job.team.strip(), from_owner(job.config_path), own=own)
    if default:
        return TeamChoice(default, FROM_DEFAULT, own=True)
    if here is not None and here.team and here.team.strip():
        return TeamChoice(here.team.strip(), from_owner(here.config_path), own=True)
    return None


# --- a team's namespace and queue from VDK configuration ------------------------------------------------


@dataclass(frozen=True)
class TeamMapping:
    """`team:value, team:value` of a VDK configuration key; teams compared as label values."""

    key: str
    entries: tuple[tuple[str, str], ...] = ()

    def get(self, team: str | None) -> str | None:
        if not team:
            return None
        wanted = normalise(team)
        return next((value for name, value in self.entries if name == wanted), None)

    def teams(self) -> list[str]:
        return [name for name, _ in self.entries]


_MAPPED = {
    TEAM_NAMESPACES: ("namespace", DNS_1123_LABEL, MAX_LABEL_LENGTH, "vision:ml-vision, nlp:ml-nlp"),
    TEAM_QUEUES: ("Kueue queue name", DNS_1123_SUBDOMAIN, MAX_SUBDOMAIN_LENGTH, "vision:vision-gpus, nlp:nlp-gpus"),
}


def parse_mapping(key: str, text: str | None) -> TeamMapping:
    """The mapping of `key` (TEAM_NAMESPACES or TEAM_QUEUES) from its configured text; SettingError if malformed."""
    what, pattern, longest, example = _MAPPED[key]
    entries: dict[str, str] = {}
    for item in re.split(r"[,;\n]", text or ""):
        if not item.strip():
            continue
        team, sep, value = item.rpartition(":")
        team, value = team.strip(), value.strip()
        if not sep or not team or not value:
            raise SettingError(key, f"{item.strip()!r} is not `team:{what.split()[-1]}`", f"write it like `{example}`")
        problem = label_problem(team)
        if problem:
            raise SettingError(key, problem, f"write the team as `{suggested_name(team)}:{value}`")
        if not pattern.match(value) or len(value) > longest:
            raise SettingError(
                key,
                f"{value!r} (of team {team}) is not a {what}",
                f"use lower-case letters, digits and '-', like `{example}`",
            )
        name = normalise(team)
        if name in entries and entries[name] != value:
            raise SettingError(key, f"team {team} is mapped twice ({entries[name]}, {value})", "keep one of them")
        entries[name] = value
    return TeamMapping(key, tuple(entries.items()))


def mapping(settings: Mapping[str, object], key: str) -> TeamMapping:
    """The mapping of `key` from settings keyed as in [ml-training] (`settings.job_settings`)."""
    value = settings.get(key.removeprefix(keys.SETTING_PREFIX))
    return parse_mapping(key, None if value is None else str(value))


def mapped_from(key: str, team: str) -> str:
    """Where a value taken from a mapping came from, for the dry run."""
    return f"{key} for team {normalise(team)}"


# The VDK mapping of each [ml-training] key a team may have its own value of.
MAPPING_OF = {"namespace": TEAM_NAMESPACES, "queue": TEAM_QUEUES}


def team_value(settings: Mapping[str, object], key: str, team: str | None) -> tuple[str | None, str | None]:
    """`namespace` or `queue` of `team` when the job does not set it, and where it came from: the team's entry of
    its VDK mapping (ml_training_team_namespaces / _queues), else the cluster-wide VDK setting of `key`
    (`ml_training_namespace`; its origin is the setting's own: None). (None, None) when neither is set. A malformed
    mapping is a SettingError."""
    mapping_key = MAPPING_OF[key]
    mapped = mapping(settings, mapping_key).get(team)
    if mapped:
        return mapped, mapped_from(mapping_key, team or "")
    value = settings.get(key)
    return (None if value is None else str(value)), None

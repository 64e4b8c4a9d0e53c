"""Reading a job directory's config.ini: the file itself (text, sections, `key = value` lines), whether it is an
ml-training job (`is_ml_job`, `ml_config_problem`), its `[owner] team`, and the raw [ml-training] section with
each key checked against the catalogue (known, set once, not empty, no inline comment). What the values mean is
load.py's part.

A command reads the file once (`read_job_config`) and hands the `JobConfig` to every reader of it: whether the
job is an ml-training job, its [owner] team, its [vdk] section (settings.py), the spec (load.py).
"""

from __future__ import annotations

import ast
import codecs
import configparser
import difflib
import os
import re
import shlex
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.keys import KEYS
from vdk.plugin.ml_training.job.keys import key as catalogued
from vdk.plugin.ml_training.secret_patterns import token_kind
from vdk.plugin.ml_training.secret_patterns import url_credentials

JOB_TYPE = "ml-training"
SECTION = "ml-training"
ENV_SECTION = "ml-training.env"
MOUNTS_SECTION = "ml-training.mounts"
SECRETS_SECTION = "ml-training.secrets"
SWEEP_SECTION = "ml-training.sweep"  # a hyperparameter sweep (job/sweep.py)
DATA_SECTION = "ml-training.data"
CONFIG_FILE = "config.ini"
# An inline comment as users write it in other ini dialects: `;` or `#` at the start or after whitespace.
_INLINE_COMMENT = re.compile(r"(?:^|(?<=\s))[;#]")


@dataclass(frozen=True)
class JobConfig:
    """A job directory's config.ini as read once (`read_job_config`): what a command hands to whoever reads it."""

    job_dir: Path
    parser: configparser.ConfigParser = field(compare=False, repr=False)

    @property
    def path(self) -> Path:
        return self.job_dir / CONFIG_FILE

    @property
    def is_ml(self) -> bool:
        """Whether it says `[job] type = ml-training`."""
        return (_job_type(self.parser) or "").lower() == JOB_TYPE

    @property
    def team(self) -> str | None:
        """Its `[owner] team` (None when it has none)."""
        return team_of(self.parser)


def read_job_config(job_dir: Path | str) -> JobConfig:
    """config.ini of `job_dir`, read and parsed (JobConfigError, as `read_config`, when it cannot be)."""
    return JobConfig(Path(job_dir), read_config(Path(job_dir)))


def job_config(job: Path | str | JobConfig) -> JobConfig:
    """`job` when it is a read config.ini already, else the config.ini of the job directory `job`, read now."""
    return job if isinstance(job, JobConfig) else read_job_config(job)


def read_config(job_dir: Path) -> configparser.ConfigParser:
    """config.ini of a job dir, keys case-preserved (environment names are case-sensitive). Every way it can be
    unreadable is a JobConfigError that says which and how to fix it."""
    path = Path(job_dir) / CONFIG_FILE
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # configparser's documented way
    try:
        data = _config_bytes(path)
        if data.startswith(codecs.BOM_UTF8):
            raise JobConfigError(
                path,
                "starts with a byte-order mark (BOM), which VDK's reader takes as part of the first line",
                "save config.ini as UTF-8 without a byte-order mark (the encoding 'UTF-8', not 'UTF-8 with BOM', in "
                "your editor's save dialog)",
            )
        if b"\0" in data:
            raise JobConfigError(
                path,
                "is not a text file (it holds binary data, such as NUL bytes)",
                "write config.ini as UTF-8 text: `key = value` lines under [section] headers (see the job format: "
                "docs/job-format.md)",
            )
        parser.read_string(data.decode("utf-8"), str(path))
    except (configparser.Error, UnicodeDecodeError) as e:
        link = f"is a symbolic link to {os.readlink(path)}, which " if path.is_symlink() else ""
        raise JobConfigError(path, f"{link}cannot be read: {_syntax_problem(e)}", _syntax_fix(e)) from None
    _refuse_credentials(data.decode("utf-8"), path)
    return parser


# Sections whose values are checked for credentials where they are read, each error naming its key (load.py).
_CHECKED_SECTIONS = (SECTION, ENV_SECTION, SWEEP_SECTION, SECRETS_SECTION)


def _refuse_credentials(text: str, path: Path) -> None:
    """A token or a URL with a password anywhere in config.ini — a comment, a section no check reads — refused:
    the file goes into git and, whole, into the job's image."""
    section = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        comment = stripped.startswith(("#", ";"))
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1].strip()
            continue
        if not comment and section in _CHECKED_SECTIONS:
            continue
        kind = token_kind(line) or url_credentials(line)
        if kind:
            raise JobConfigError(
                path,
                f"line {number} holds {kind}{' in a comment' if comment else ''}: config.ini goes into git and, "
                "whole, into the job's image, so a credential must not be in it, not even in a comment",
                f"remove it (and revoke it if it was committed); keep it in a Kubernetes Secret and map it in "
                f"[{SECRETS_SECTION}] (`HF_TOKEN = hf-credentials/token`); local runs read it from your shell",
                line=number,
            )


def _config_bytes(path: Path) -> bytes:
    """The bytes of config.ini, which must be a readable regular file (a link to one is fine)."""
    try:
        if path.is_symlink() and not path.exists():
            raise JobConfigError(
                path,
                f"is a symbolic link to {os.readlink(path)}, which does not exist",
                "point it at the job's config.ini",
            )
        if path.exists() and not path.is_file():
            kind = "a directory" if path.is_dir() else "not a regular file"
            raise JobConfigError(
                path, f"is {kind}", "make config.ini a text file of `key = value` lines (docs/job-format.md)"
            )
        return path.read_bytes()
    except FileNotFoundError:
        raise JobConfigError(
            path, "no config.ini in the job directory", "pass the job's directory, which holds config.ini"
        ) from None
    except OSError as e:
        raise JobConfigError(
            path, f"cannot be read: {e.strerror or e}", "check that config.ini is a file you may read"
        ) from None


def _syntax_problem(error: Exception) -> str:
    """What is wrong with the text, in one line (configparser's first bad line)."""
    if isinstance(error, configparser.MissingSectionHeaderError):
        line = _unrepr(error.line).strip() if isinstance(error.line, str) else ""
        return f"line {error.lineno}: {line!r} comes before any [section] header"
    if isinstance(error, configparser.ParsingError) and getattr(error, "errors", None):
        line_number, line = error.errors[0]
        return f"line {line_number}: {_unrepr(line).strip()!r} is not `key = value`"
    text = str(error)
    return text.splitlines()[0] if text else type(error).__name__


def _unrepr(text: str) -> str:
    """configparser keeps a bad line as its repr()."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def _syntax_fix(error: Exception) -> str:
    if isinstance(error, configparser.DuplicateOptionError):
        return f"keep one `{error.option} = ...` line in [{error.section}]"
    if isinstance(error, configparser.DuplicateSectionError):
        return f"merge the two [{error.section}] sections into one"
    if isinstance(error, configparser.MissingSectionHeaderError):
        return "start config.ini with a section header such as [job]"
    if isinstance(error, UnicodeDecodeError):
        return "save config.ini as UTF-8"
    return "write every line as `key = value` under a [section] header (see the job format: docs/job-format.md)"


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _starts_with_a_section(data: bytes) -> bool:
    """Whether the first line that is not blank or a comment is a [section] header (else nothing can read it)."""
    for line in data.decode("utf-8", errors="replace").splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", ";")):
            return stripped.startswith("[")
    return True


def _job_type(parser: configparser.ConfigParser) -> str | None:
    for section in parser.sections():
        if section.lower() == "job":
            for key, value in parser.items(section):
                if key.lower() == "type":
                    return value.strip()
    return None


def is_ml_job(job: Path | str | JobConfig) -> bool:
    """True if config.ini says `[job] type = ml-training`. Unreadable configs count as not ML."""
    try:
        return job_config(job).is_ml
    except JobConfigError:
        return False


def ml_config_problem(job_dir: Path | str) -> JobConfigError | None:
    """Why a job dir that looks meant as an ml-training job is not one: a config.ini that cannot be
    read but mentions ml-training, a misspelt `type`, or an [ml-training] section without the type.
    None for ml-training jobs and for anything that does not look like one (data jobs)."""
    path = Path(job_dir) / CONFIG_FILE
    try:
        parser = read_config(Path(job_dir))
    except JobConfigError as e:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return e if path.is_symlink() else training_without_a_job(Path(job_dir))
        except OSError:
            return e  # a directory, unreadable: no job of any kind, vdk-core fails on it with a traceback
        if not _is_text(data) or data.startswith(codecs.BOM_UTF8) or not _starts_with_a_section(data):
            return e  # no job of any kind either
        text = data.decode("utf-8", errors="replace").lower()
        return e if "ml-training" in text or "ml_training" in text else None
    job_type = _job_type(parser)
    if (job_type or "").lower() == JOB_TYPE:
        return None
    if job_type and difflib.get_close_matches(job_type.lower().replace("_", "-"), [JOB_TYPE], n=1, cutoff=0.75):
        return JobConfigError(
            path, f"type {job_type!r} is not a job type", f"did you mean `type = {JOB_TYPE}`?", "job", "type"
        )
    misplaced = _misplaced_type(parser)
    if misplaced is not None:
        section, key, value = misplaced
        return JobConfigError(
            path,
            f"`{key} = {value}` does not make it an ml-training job: VDK reads a job's type from `type` under [job], "
            "so it would run this directory as a data job",
            f"write `type = {JOB_TYPE}` under [job]",
            section,
            key,
        )
    if not parser.sections() and not _has_data_job_steps(Path(job_dir)):
        return JobConfigError(
            path,
            "is empty, so VDK would run the directory as a data job, whose steps are its .sql files and the .py files "
            "that define run(job_input); it has none, so nothing would run",
            f"for an ml-training job, write `[job]` and `type = {JOB_TYPE}` in config.ini, and its keys under "
            f"[{SECTION}] (docs/job-format.md); for a data job, add its steps",
        )
    if any(s.lower().replace("_", "-") in (SECTION, ENV_SECTION) for s in parser.sections()):
        found = f"type = {job_type}" if job_type else "no type"
        return JobConfigError(
            path,
            f"it has an [{SECTION}] section but [job] says {found}, so VDK would run it as a data job",
            f"add `type = {JOB_TYPE}` under [job]",
            "job",
            "type",
        )
    return None


def _misplaced_type(parser: configparser.ConfigParser) -> tuple[str, str, str] | None:
    """(section, key, value) of a value `ml-training` under another key than [job] `type` (`typ = ml-training`)."""
    for section in parser.sections():
        for key, value in parser.items(section):
            meant = value.strip().lower().replace("_", "-") == JOB_TYPE
            if meant and not (section.lower() == "job" and key.lower() == "type"):
                return section, key, value.strip()
    return None


def _has_data_job_steps(job_dir: Path) -> bool:
    """Whether VDK would find a step to run in a data job's directory (a .sql file, a .py file with run())."""
    try:
        entries = list(job_dir.iterdir())
    except OSError:
        return True  # cannot tell: leave it to VDK
    for entry in entries:
        if entry.suffix in (".sql", ".ipynb"):
            return True
        if entry.suffix == ".py":
            try:
                if _DATA_JOB_STEP.search(entry.read_text(encoding="utf-8", errors="replace")):
                    return True
            except OSError:
                return True
    return False


# What VDK runs of a data job: SQL steps, and Python steps with a `run(job_input)` function.
_DATA_JOB_STEP = re.compile(r"^def run\s*\(", re.M)
# Training code: a top-level import of a training framework.
_TRAINING_IMPORT = re.compile(
    r"^\s*(?:import|from)\s+(torch|transformers|lightning|pytorch_lightning|accelerate|deepspeed|tensorflow|keras|jax)"
    r"\b",
    re.M,
)


def training_without_a_job(job_dir: Path) -> JobConfigError | None:
    """A directory without config.ini that VDK would run as a data job although it has no step VDK runs (no .sql
    file or notebook, no .py with `def run(job_input)`) and holds training code: it would "succeed" having run
    nothing. None for anything else."""
    try:
        sources = sorted(p for p in job_dir.iterdir() if p.suffix in (".py", ".sql", ".ipynb") and p.is_file())
    except OSError:
        return None
    training = None
    for source in sources:
        if source.suffix != ".py":
            return None
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if _DATA_JOB_STEP.search(text):
            return None
        found = _TRAINING_IMPORT.search(text)
        if found and training is None:
            training = (source.name, found.group(1))
    if training is None:
        return None
    path = job_dir / CONFIG_FILE
    return JobConfigError(
        job_dir,
        "it has no config.ini, so VDK would run it as a data job, and it has no data job step (no .sql file, no .py "
        f"with `def run(job_input)`): nothing would run. It holds training code ({training[0]} imports "
        f"{training[1]})",
        f"make it an ml-training job: create {path} with the lines `[job]` and `type = {JOB_TYPE}` (the job format: "
        "docs/job-format.md)",
    )


def owner_team(job: Path | str | JobConfig) -> str | None:
    """The `[owner] team` of a job directory's config.ini (None when it has none)."""
    return job_config(job).team


def team_of(parser: configparser.ConfigParser) -> str | None:
    """The `[owner] team` of a read config.ini (section and key in any case), None when blank or missing."""
    for section in parser.sections():
        if section.lower() == "owner":
            for key, value in parser.items(section):
                if key.lower() == "team" and value.strip():
                    return value.strip()
    return None


def check_sections(parser: configparser.ConfigParser, path: Path) -> None:
    """A section that looks meant as one of the plugin's, misspelt, is an error that names the one meant."""
    known = (SECTION, ENV_SECTION, MOUNTS_SECTION, SECRETS_SECTION, SWEEP_SECTION, DATA_SECTION)
    for section in parser.sections():
        if section in known:
            continue
        lowered = section.lower().replace("_", "-")
        if lowered in known or (lowered.startswith("ml") and difflib.get_close_matches(lowered, known, n=1)):
            close = difflib.get_close_matches(lowered, known, n=1, cutoff=0.0)[0]
            raise JobConfigError(path, f"unknown section [{section}]", f"rename it to [{close}]", section=section)


def section_values(
    parser: configparser.ConfigParser, path: Path, only: tuple[str, ...] | None = None
) -> dict[str, str]:
    """The [ml-training] section, keys as the catalogue names them (lower case, `_`): each a key of the catalogue,
    set once, not empty (unless it may be), with no inline comment. `only`: the keys of these names, checked so;
    the others are left out unread (what a verb that uses no other key may ignore)."""
    raw = dict(parser.items(SECTION)) if parser.has_section(SECTION) else {}
    values: dict[str, str] = {}
    for key, value in raw.items():
        name = key.strip().lower().replace("-", "_")
        if only is not None and name not in only:
            continue
        if name not in KEYS:
            close = closest(name, list(KEYS))
            fix = f"did you mean `{close}`?" if close else f"valid keys are: {', '.join(KEYS)}"
            raise JobConfigError(path, f"unknown key {key!r}", fix, SECTION, key)
        if name in values:
            raise JobConfigError(path, "the key is set twice", "keep one of them", SECTION, key)
        if not value.strip() and not catalogued(name).may_be_empty:
            raise JobConfigError(
                path,
                "the value is empty",
                f"remove the `{key} =` line to use the default (or the VDK setting), or give it a value",
                SECTION,
                key,
            )
        _refuse_inline_comment(name, key, value, path)
        values[name] = value
    return values


def inline_comment(text: str) -> int | None:
    """Where an unquoted `;` or `#` that starts a word begins in `text` (None: nowhere). configparser keeps
    such a "comment" as part of the value."""
    for match in _INLINE_COMMENT.finditer(text):
        if _open_quote(text[: match.start()]) is None:
            return match.start()
    return None


def _open_quote(text: str) -> str | None:
    """The quote character left open at the end of `text`, split as a POSIX shell would."""
    quote = None
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
    return quote


def _refuse_inline_comment(name: str, key: str, value: str, path: Path) -> None:
    start = inline_comment(value)
    if start is None:
        return
    meant = value[:start].rstrip()
    comment = value[start:].strip()
    if catalogued(name).may_be_empty:
        try:
            received = shlex.split(value)
        except ValueError:
            received = value.split()
        what = f"the script would receive the arguments {received}"
        fix = f"write `{key} = {meant}` and put the comment on a line of its own; an argument that starts with "
        fix += f"{comment[0]} goes in quotes ('{comment[0]}...')"
    else:
        what = f"the value would be {value.strip()!r}"
        fix = f"write `{key} = {meant}` and put the comment on a line of its own"
    raise JobConfigError(
        path,
        f"{comment!r} looks like a comment, but config.ini has no inline comments: {what}",
        fix,
        SECTION,
        key,
    )


def line_of(path: Path, section: str, key: str) -> int | None:
    """The line of config.ini that sets `key` in [section] (for messages that name it), None if not found."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    current = None
    for number, text in enumerate(lines, start=1):
        stripped = text.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1].strip()
        elif current == section and re.split(r"\s*[=:]", stripped, maxsplit=1)[0].strip() == key.strip():
            return number
    return None


def closest(word: str, options: list[str]) -> str | None:
    """The option a user most likely meant: a near spelling, else one that starts with the word."""
    near = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if near:
        return near[0]
    starts = [o for o in options if word and o.startswith(word)]
    return starts[0] if len(starts) == 1 else None

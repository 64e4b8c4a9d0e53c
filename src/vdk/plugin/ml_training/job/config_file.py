"""Reading a job directory's config.ini: the file itself (text, sections, `key = value` lines), whether it is an
ml-training job (`is_ml_job`, `ml_config_problem`), its `[owner] team`, and the raw [ml-training] section with
each key checked against the catalogue (known, set once, not empty, no inline comment). What the values mean is
load.py's part.
"""

from __future__ import annotations

import ast
import configparser
import difflib
import re
import shlex
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.keys import KEYS
from vdk.plugin.ml_training.job.keys import key as catalogued

JOB_TYPE = "ml-training"
SECTION = "ml-training"
ENV_SECTION = "ml-training.env"
MOUNTS_SECTION = "ml-training.mounts"
SECRETS_SECTION = "ml-training.secrets"
CONFIG_FILE = "config.ini"
# An inline comment as users write it in other ini dialects: `;` or `#` at the start or after whitespace.
_INLINE_COMMENT = re.compile(r"(?:^|(?<=\s))[;#]")


def read_config(job_dir: Path) -> configparser.ConfigParser:
    """config.ini of a job dir, keys case-preserved (environment names are case-sensitive)."""
    path = Path(job_dir) / CONFIG_FILE
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        if b"\0" in path.read_bytes():
            raise JobConfigError(
                path,
                "is not a text file (it holds binary data, such as NUL bytes)",
                "write config.ini as UTF-8 text: `key = value` lines under [section] headers (see the job format: "
                "docs/job-format.md)",
            )
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        raise JobConfigError(
            path, "no config.ini in the job directory", "pass the job's directory, which holds config.ini"
        ) from None
    except (configparser.Error, UnicodeDecodeError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, configparser.ParsingError) and e.errors:
            line_number, line = e.errors[0]
            detail = f"line {line_number}: {_unrepr(line).strip()!r} is not `key = value`"
        raise JobConfigError(path, f"cannot be read: {detail}", _syntax_fix(e)) from None
    return parser


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


def _job_type(parser: configparser.ConfigParser) -> str | None:
    for section in parser.sections():
        if section.lower() == "job":
            for key, value in parser.items(section):
                if key.lower() == "type":
                    return value.strip()
    return None


def is_ml_job(job_dir: Path | str) -> bool:
    """True if config.ini says `[job] type = ml-training`. Unreadable configs count as not ML."""
    try:
        parser = read_config(Path(job_dir))
    except JobConfigError:
        return False
    return (_job_type(parser) or "").lower() == JOB_TYPE


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
        except OSError:
            return training_without_a_job(Path(job_dir))
        if not _is_text(data):
            return e  # no job of any kind: vdk-core fails on it with a traceback
        text = data.decode("utf-8", errors="replace").lower()
        return e if "ml-training" in text or "ml_training" in text else None
    job_type = _job_type(parser)
    if (job_type or "").lower() == JOB_TYPE:
        return None
    if job_type and difflib.get_close_matches(job_type.lower().replace("_", "-"), [JOB_TYPE], n=1, cutoff=0.75):
        return JobConfigError(
            path, f"type {job_type!r} is not a job type", f"did you mean `type = {JOB_TYPE}`?", "job", "type"
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


def owner_team(job_dir: Path | str) -> str | None:
    """The `[owner] team` of a job directory's config.ini (None when it has none)."""
    return team_of(read_config(Path(job_dir)))


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
    known = (SECTION, ENV_SECTION, MOUNTS_SECTION, SECRETS_SECTION)
    for section in parser.sections():
        if section in known:
            continue
        lowered = section.lower().replace("_", "-")
        if lowered in known or (lowered.startswith("ml") and difflib.get_close_matches(lowered, known, n=1)):
            close = difflib.get_close_matches(lowered, known, n=1, cutoff=0.0)[0]
            raise JobConfigError(path, f"unknown section [{section}]", f"rename it to [{close}]", section=section)


def section_values(parser: configparser.ConfigParser, path: Path) -> dict[str, str]:
    """The [ml-training] section, keys as the catalogue names them (lower case, `_`): each a key of the catalogue,
    set once, not empty (unless it may be), with no inline comment."""
    raw = dict(parser.items(SECTION)) if parser.has_section(SECTION) else {}
    values: dict[str, str] = {}
    for key, value in raw.items():
        name = key.strip().lower().replace("-", "_")
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


def closest(word: str, options: list[str]) -> str | None:
    """The option a user most likely meant: a near spelling, else one that starts with the word."""
    near = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if near:
        return near[0]
    starts = [o for o in options if word and o.startswith(word)]
    return starts[0] if len(starts) == 1 else None

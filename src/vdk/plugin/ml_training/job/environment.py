"""The training processes' environment as config.ini declares it: [ml-training.env] (names checked: the rank
layout and the plugin's own VDK_ML_TRAINING_* names are refused, but for the runtime settings a job may set, whose
values are checked here), and [ml-training.secrets] (variables whose values are keys of Kubernetes Secrets). A
credential written into config.ini as a literal value is refused (job/literal_secrets.py), with the way to keep
it in a Secret.
"""

from __future__ import annotations

import configparser
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.config_file import ENV_SECTION
from vdk.plugin.ml_training.job.config_file import SECRETS_SECTION
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.literal_secrets import create_hint
from vdk.plugin.ml_training.job.literal_secrets import literal_secret
from vdk.plugin.ml_training.job.literal_secrets import literal_secret_error
from vdk.plugin.ml_training.job.literal_secrets import looks_like_a_secret
from vdk.plugin.ml_training.job.model import SecretEnv
from vdk.plugin.ml_training.job.names import DNS_1123_SUBDOMAIN
from vdk.plugin.ml_training.job.names import ENV_NAME
from vdk.plugin.ml_training.job.names import MAX_SUBDOMAIN_LENGTH
from vdk.plugin.ml_training.job.names import SECRET_KEY
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.progress_lines import ProgressSettings
from vdk.plugin.ml_training.vocabulary.wire import ENV_PREFIX

# Launchers and operators set these; a job that sets them too breaks distributed start-up.
RESERVED_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "JOB_COMPLETION_INDEX",
    }
)
RESERVED_ENV_PREFIXES = ("PET_", "TORCHELASTIC_", ENV_PREFIX)


def _check_runtime_setting(name: str, value: str, path: Path) -> None:
    """Runtime settings are checked here, where a mistake is cheap, by the rule the runtime applies."""
    if name in protocol.SWITCHES:
        if value.strip().lower() not in protocol.SWITCH_VALUES:
            problem = f"{name} is {value!r}, which is neither on nor off"
            raise JobConfigError(path, problem, "set it to 1 (on) or 0 (off)", ENV_SECTION, name)
        return
    if name == protocol.SERIES_SECONDS:
        from vdk.plugin.ml_training.runtime.series import SeriesSettings

        problems = list(SeriesSettings.from_env({name: value}).problems)
        if problems:
            fix = "set it to a number of seconds such as 5, or 0 for no series (no event files, no MLflow run)"
            raise JobConfigError(path, problems[0], fix, ENV_SECTION, name)
        return
    problems = ProgressSettings({name: value}).problems
    if problems:
        example = "10 (seconds), or 0 for no progress lines" if name == protocol.PROGRESS_SECONDS else "5000"
        raise JobConfigError(path, problems[0], f"set it to a number such as {example}", ENV_SECTION, name)


def read_env(parser: configparser.ConfigParser, path: Path) -> tuple[tuple[str, str], ...]:
    """[ml-training.env] as (name, value) pairs, each name one a job may set and no value a credential."""
    if not parser.has_section(ENV_SECTION):
        return ()
    out = []
    for name, value in parser.items(ENV_SECTION):
        _check_env_name(name, path, ENV_SECTION)
        if name in protocol.USER_SETTINGS:
            _check_runtime_setting(name, value, path)
        credential = literal_secret(name, value)
        if credential:
            raise literal_secret_error(name, credential, path, ENV_SECTION)
        out.append((name, value))
    return tuple(out)


def read_secrets(parser: configparser.ConfigParser, path: Path) -> tuple[SecretEnv, ...]:
    """[ml-training.secrets], its names checked as those of [ml-training.env], none set in both."""
    secrets = parse_secrets(parser, path)
    env = dict(parser.items(ENV_SECTION)) if parser.has_section(ENV_SECTION) else {}
    for secret in secrets:
        _check_env_name(secret.name, path, SECRETS_SECTION)
        if secret.name in protocol.USER_SETTINGS:
            raise JobConfigError(
                path,
                f"{secret.name} is a setting of the plugin, not a secret",
                f"set it in [{ENV_SECTION}]",
                SECRETS_SECTION,
                secret.name,
            )
        if secret.name in env:
            raise JobConfigError(
                path,
                f"{secret.name} is also set in [{ENV_SECTION}]",
                f"keep one: the Secret reference here, or a value that is no secret in [{ENV_SECTION}]",
                SECRETS_SECTION,
                secret.name,
            )
    return secrets


def _check_env_name(name: str, path: Path, section: str) -> None:
    """A variable the job may set for its training processes (rank layout and plugin names refused)."""
    if not ENV_NAME.match(name):
        raise JobConfigError(
            path, f"{name!r} is not an environment variable name", "use letters, digits and _", section, name
        )
    if name in protocol.USER_SETTINGS:
        return
    if name.startswith(ENV_PREFIX):
        raise JobConfigError(
            path,
            f"{name} is not a setting the training processes read; {ENV_PREFIX}* names are the plugin's own",
            f"remove {name}; of these names only {', '.join(protocol.USER_SETTINGS)} may be set here "
            "(VDK settings such as the registry go in [ml-training] or the environment of `vdk`)",
            section,
            name,
        )
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        raise JobConfigError(
            path,
            f"{name} is set by the launcher for every process (rank layout); setting it breaks start-up",
            f"remove {name}; set nodes / procs_per_node in [{SECTION}] instead",
            section,
            name,
        )


def parse_secrets(parser: configparser.ConfigParser, path: Path) -> tuple[SecretEnv, ...]:
    """[ml-training.secrets]: `HF_TOKEN = hf-credentials/token` (variable = Secret/key). The names are
    checked by the caller, with the rules of [ml-training.env]."""
    if not parser.has_section(SECRETS_SECTION):
        return ()
    out = []
    for name, value in parser.items(SECRETS_SECTION):
        secret, slash, key = value.strip().partition("/")
        example = f"write `{name} = SECRET/KEY`, e.g. `{name} = hf-credentials/token`"
        if not slash or not secret or not key:
            problem = f"{value.strip()!r} is not SECRET/KEY"
            if looks_like_a_secret(name, value.strip()):
                problem = "this looks like the secret itself; config.ini names the Kubernetes Secret that holds it"
            raise JobConfigError(path, problem, example + create_hint(name), SECRETS_SECTION, name)
        if not DNS_1123_SUBDOMAIN.match(secret) or len(secret) > MAX_SUBDOMAIN_LENGTH:
            raise JobConfigError(
                path, f"{secret!r} is not a Secret name (lower-case letters, digits, '-' and '.')", example,
                SECRETS_SECTION, name,
            )  # fmt: skip
        if not SECRET_KEY.match(key) or len(key) > MAX_SUBDOMAIN_LENGTH:
            raise JobConfigError(
                path, f"{key!r} is not a key of a Secret (letters, digits, '-', '_' and '.')", example,
                SECRETS_SECTION, name,
            )  # fmt: skip
        out.append(SecretEnv(name, secret, key))
    return tuple(out)

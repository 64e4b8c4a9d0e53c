"""Credentials written into a job as literal values, refused: in [ml-training.env], and in the training arguments
(`args`, `smoke_args`), which go into the image's command, the run's manifests and its record. One check, used by
every path: load.py reads each value through it (for a message that says where the value came from), and
`MLJobSpec` checks itself with it whatever built it (a notebook, an override for one run). The formats are
secret_patterns.py's; no message shows the credential.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.config_file import ENV_SECTION
from vdk.plugin.ml_training.job.config_file import SECRETS_SECTION
from vdk.plugin.ml_training.job.config_file import SWEEP_SECTION
from vdk.plugin.ml_training.runtime.sweep_protocol import substitute
from vdk.plugin.ml_training.secret_patterns import is_secret_option
from vdk.plugin.ml_training.secret_patterns import names_a_secret
from vdk.plugin.ml_training.secret_patterns import token_kind
from vdk.plugin.ml_training.secret_patterns import url_credentials

# The value of a variable or option named like a credential (secret_patterns.py's names) is refused when it looks
# like one: long, no spaces, not a path.
_SECRET_LOOKING = re.compile(r"^(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9_+=.-]{16,}$")
# Names that say "password": whatever their value is (hunter2!), written into a job it is a password.
_PASSWORD_NAME = re.compile(r"(?:^|[-_])(?:[a-z0-9]*PASSWORD|PASSWD|PASSPHRASE)$", re.I)
# Names that end in "key" (WANDB_KEY, --wandb-key): a key when the value has a key's shape (_high_entropy).
_KEY_NAME = re.compile(r"(?:^|[-_])KEY$", re.I)
# Base64 with a `/` (an AWS secret access key): upper- and lower-case letters and digits, nothing else; a path
# (`runs/exp12345678`) or a model's name (`meta-llama/Llama-2-7b-hf`) is none.
_BASE64_LOOKING = re.compile(r"^(?=.*[A-Z])(?=.*[a-z])(?=.*[0-9])[A-Za-z0-9+/]{20,}={0,2}$")
_HEX_KEY = re.compile(r"^[0-9a-fA-F]{32,}$")
# Names of where a secret is, not of the secret (HF_TOKEN_FILE, SECRET_NAME): their values are judged by their shape
# as any other's (a token of a documented format is refused whatever its name).
_WHERE_NAME = re.compile(r"[-_](PATH|FILE|DIR|NAME)$", re.I)


def literal_secret(name: str, value: str) -> str | None:
    """What kind of credential `value` of the variable `name` looks like, or None: a token of a documented
    format or a URL with a password whatever the name, else by the name and the value's shape."""
    kind = token_kind(value) or url_credentials(value)
    if kind:
        return kind
    return named_secret(name, value)


def named_secret(name: str, value: str) -> str | None:
    """What credential `value` is, judged by the name it is given (a variable `DB_PASSWORD`, an option
    `--wandb-key`) and its shape; None when it is none, a reference (`${x}`, `$(X)`) or a path."""
    value = value.strip()
    bare = name.lstrip("-")
    if not value or value.startswith(("$", "/", "./", "../", "~")) or _WHERE_NAME.search(bare):
        return None
    if names_a_secret(bare) and _looks_secret(value):
        return "a secret (its name says so, and its value looks like one)"
    if _PASSWORD_NAME.search(bare) and not any(c.isspace() for c in value):
        return f"a password (the value of {name})"
    if _KEY_NAME.search(bare) and _high_entropy(value):
        return f"a key (the value of {name}, which has a key's shape)"
    return None


def looks_like_a_secret(name: str, value: str) -> bool:
    return names_a_secret(name) and _looks_secret(value)


def _looks_secret(value: str) -> bool:
    return bool(_SECRET_LOOKING.match(value) or _BASE64_LOOKING.match(value))


def _high_entropy(value: str) -> bool:
    """The shape of a generated key: 32 or more hex digits (W&B's API keys), or base64 of 20 or more characters
    that mix upper- and lower-case letters and digits."""
    return bool(_HEX_KEY.match(value) or _BASE64_LOOKING.match(value))


def secret_argument(args: Sequence[str]) -> tuple[int, str] | None:
    """(position, kind) of the first argument that is a credential: a token of a documented format, a URL with
    a password, or the value of an option named like one (`--hf-token VALUE`, `--api-key=VALUE`, `--password
    hunter2!`, `--wandb-key HEX`) that has its shape. None when there is none."""
    for position, arg in enumerate(args):
        kind = token_kind(arg) or url_credentials(arg)
        if kind:
            return position, kind
        if not arg.startswith("-"):
            continue
        option, equals, value = arg.partition("=")
        where = position
        if not equals:
            if position + 1 >= len(args) or args[position + 1].startswith("-"):
                continue
            value, where = args[position + 1], position + 1
        if is_secret_option(option) and _looks_secret(value):
            return where, token_kind(value) or f"a secret (the value of {option}, which looks like one)"
        named = named_secret(option, value)
        if named:
            return where, named
    return None


def literal_secret_error(name: str, kind: str, path: Path, section: str) -> JobConfigError:
    """The refusal of a credential written into config.ini, with the way to do it."""
    secret = _secret_name(name)
    return JobConfigError(
        path,
        f"the value is {kind}: config.ini goes into git and into the job's image, so a credential must not be in it",
        f"remove it (and revoke it if it was committed), keep it in a Kubernetes Secret and map it in "
        f"[{SECRETS_SECTION}]: `{name} = {secret}/value`{create_hint(name)}. Local runs read {name} from your shell",
        section,
        name,
    )


def secret_argument_error(key: str, position: int, kind: str, path: Path, section: str) -> JobConfigError:
    """The refusal of a credential among the training arguments (`key` is args or smoke_args)."""
    return JobConfigError(
        path,
        f"argument {position + 1} is {kind}: the arguments go into git, the job's image, the run's manifests and "
        "its record, so a credential must not be in them",
        f"remove it (and revoke it if it was committed); keep it in a Kubernetes Secret, map it to a variable in "
        f"[{SECRETS_SECTION}] (`API_TOKEN = api-token/value`{create_hint('API_TOKEN')}) and read it from the "
        "environment in the script (`os.environ['API_TOKEN']`). Local runs read API_TOKEN from your shell",
        section,
        key,
    )


def refuse_secret_arguments(key: str, args: Sequence[str] | None, path: Path, section: str) -> None:
    found = secret_argument(args or ())
    if found is not None:
        raise secret_argument_error(key, found[0], found[1], path, section)


def refuse_secret_env(env: Sequence[tuple[str, str]], path: Path, section: str) -> None:
    for name, value in env:
        kind = literal_secret(name, value)
        if kind:
            raise literal_secret_error(name, kind, path, section)


def refuse_secret_parameters(
    parameters: Iterable[tuple[str, Sequence[Any]]],
    arguments: Iterable[tuple[str, Sequence[str]]],
    env: Sequence[tuple[str, str]],
    path: Path,
) -> None:
    """A sweep's values where they go: each value of each parameter (`parameters`: name, its values) in the
    arguments (`arguments`: key, its list) and [ml-training.env] values that reference it, refused as the same
    literal there would be. What the trials' pods, the study and the run record receive is the sweep's values."""
    lists = [(key, tuple(args)) for key, args in arguments]
    for name, values in parameters:
        reference = f"${{{name}}}"
        for number, value in enumerate(values, 1):
            params = {name: value}
            for key, args in lists:
                if any(reference in a for a in args):
                    found = secret_argument([substitute(a, params) for a in args])
                    if found is not None:
                        raise _parameter_error(name, number, found[1], f"argument {found[0] + 1} of {key}", path)
            for variable, text in env:
                if reference in text:
                    kind = literal_secret(variable, substitute(text, params))
                    if kind:
                        raise _parameter_error(name, number, kind, f"[{ENV_SECTION}] {variable}", path)


def _parameter_error(name: str, number: int, kind: str, where: str, path: Path) -> JobConfigError:
    return JobConfigError(
        path,
        f"value {number} of the parameter {name} is {kind} once it is in {where}: a sweep's values go into the "
        "trials' pods, the study and the run record, so a credential must not be one",
        f"remove it (and revoke it if it was committed); a credential is no parameter: keep it in a Kubernetes "
        f"Secret, map it in [{SECRETS_SECTION}] (`API_TOKEN = api-token/value`{create_hint('API_TOKEN')}) and read "
        "it from the environment",
        SWEEP_SECTION,
        name,
    )


def create_hint(name: str) -> str:
    return f" (create it with `kubectl create secret generic {_secret_name(name)} --from-literal=value=...`)"


def _secret_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "credentials"

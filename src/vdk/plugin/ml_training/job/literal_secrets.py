"""Credentials written into a job as literal values, refused: in [ml-training.env], and in the training arguments
(`args`, `smoke_args`), which go into the image's command, the run's manifests and its record. One check, used by
every path: load.py reads each value through it (for a message that says where the value came from), and
`MLJobSpec` checks itself with it whatever built it (a notebook, an override for one run). The formats are
secret_patterns.py's; no message shows the credential.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.config_file import SECRETS_SECTION
from vdk.plugin.ml_training.secret_patterns import is_secret_option
from vdk.plugin.ml_training.secret_patterns import names_a_secret
from vdk.plugin.ml_training.secret_patterns import token_kind
from vdk.plugin.ml_training.secret_patterns import url_credentials

# The value of a variable or option named like a credential is refused when it looks like one (long, no spaces, not a
# path); the names are secret_patterns.py's.
_SECRET_LOOKING = re.compile(r"^(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9_+=.-]{16,}$")


def literal_secret(name: str, value: str) -> str | None:
    """What kind of credential `value` of the variable `name` looks like, or None."""
    kind = token_kind(value) or url_credentials(value)
    if kind:
        return kind
    if looks_like_a_secret(name, value):
        return "a secret (its name says so, and its value looks like one)"
    return None


def looks_like_a_secret(name: str, value: str) -> bool:
    return names_a_secret(name) and bool(_SECRET_LOOKING.match(value))


def secret_argument(args: Sequence[str]) -> tuple[int, str] | None:
    """(position, kind) of the first argument that is a credential: a token of a documented format, a URL with
    a password, or the value of an option named like one (`--hf-token VALUE`, `--api-key=VALUE`) that looks
    like one. None when there is none."""
    for position, arg in enumerate(args):
        kind = token_kind(arg) or url_credentials(arg)
        if kind:
            return position, kind
        option, equals, value = arg.partition("=")
        where = position
        if not equals and position + 1 < len(args):
            value, where = args[position + 1], position + 1
        if is_secret_option(option) and _SECRET_LOOKING.match(value):
            return where, token_kind(value) or f"a secret (the value of {option}, which looks like one)"
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


def create_hint(name: str) -> str:
    return f" (create it with `kubectl create secret generic {_secret_name(name)} --from-literal=value=...`)"


def _secret_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "credentials"

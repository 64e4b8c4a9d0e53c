"""What the registry client says when it gives up: each failure of a registry (no answer, a name that does not
resolve, an untrusted certificate, an error that kept coming) as an error that says what happened and what
to do. No message shows a credential: a registry address is shown as the user wrote it, which the key
reader has already refused when it held `user:password@`."""

from __future__ import annotations

import requests

from vdk.plugin.ml_training.image.build_errors import RegistryError
from vdk.plugin.ml_training.image.build_errors import RegistryNameError
from vdk.plugin.ml_training.image.build_errors import RegistryUnreachableError
from vdk.plugin.ml_training.image.registry_timing import RetryPolicy
from vdk.plugin.ml_training.image.registry_timing import seconds
from vdk.plugin.ml_training.job.keys import variable

INSECURE_REGISTRIES_ENV = "VDK_ML_TRAINING_INSECURE_REGISTRIES"
# What a registry is to the command that talks to it: says what to change when its name does not resolve.
BASE = "base"
TARGET = "target"
OFFLINE_PAGE = "docs/offline-registries.md"


def error_detail(response: requests.Response | None) -> str:
    """The registry's own words for an error answer (its JSON errors, else the start of the body)."""
    if response is None:
        return ""
    try:
        errors = response.json().get("errors") or []
        parts = [f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors if isinstance(e, dict)]
        if parts:
            return "; ".join(parts)
    except ValueError:
        pass
    return (response.text or "").strip()[:200] or (response.reason or "")


def gave_up(
    registry: str,
    host: str,
    policy: RetryPolicy,
    what: str,
    last: Exception | None,
    attempts: int,
    no_answer: int,
    took: float,
) -> RegistryError:
    """The end of a request that kept failing: how often it was tried, for how long, and why it failed."""
    tries = f"{attempts} attempt{'s' * (attempts != 1)} in {seconds(took)}"
    if isinstance(last, requests.HTTPError):
        status = last.response.status_code if last.response is not None else "?"
        return RegistryError(
            f"{registry} kept failing to {what} ({tries}): HTTP {status} {error_detail(last.response)}",
            "the registry has a problem; try again later or ask its operators",
        )
    if no_answer:
        return RegistryUnreachableError(
            f"{registry} accepts connections but did not answer ({what}) within "
            f"{seconds(policy.answer_timeout())} ({tries})",
            f"the registry, or a proxy in front of it, is stuck or overloaded: check it (`curl -v "
            f"https://{host}/v2/`) and your proxy settings (HTTPS_PROXY, NO_PROXY), then try again",
        )
    return RegistryUnreachableError(
        f"cannot reach {registry} to {what} ({tries}): {short(last)}",
        f"check the address {registry}, your network/VPN/proxy, and that the registry is up",
    )


def name_error(registry: str, host: str, role: str, what: str) -> RegistryNameError:
    """A registry whose name does not resolve: said at once (no retries), with what to set instead."""
    hub = " (Docker Hub)" if host.endswith("docker.io") else ""
    name = host.rpartition(":")[0] if host.rpartition(":")[2].isdigit() else host
    problem = f"the name {name} of registry {registry}{hub} does not resolve: this machine cannot reach it "
    problem += f"({what}; not retried: a name that does not resolve now will not in seconds)"
    base = (
        f"set `base_image` in [ml-training] of config.ini (or {variable('base_image')}) to a copy of the base "
        "in a registry this machine and the cluster can reach, such as your company's mirror of Docker Hub "
        "(`base_image = mirror.example.com/pytorch/pytorch:TAG`)"
    )
    target = f"check `registry` in [ml-training] of config.ini (or {variable('registry')}) and your DNS or VPN"
    fix = {BASE: base, TARGET: target}.get(role, f"{target}; for the base image: {base}")
    return RegistryNameError(problem, f"{fix}; see {OFFLINE_PAGE}")


def tls_error(registry: str, host: str, error: Exception) -> RegistryError:
    return RegistryError(
        f"cannot open a trusted TLS connection to {registry}: {short(error)}",
        f"if the registry has a private CA, put it in ~/.config/containers/certs.d/{host}/ca.crt "
        f"(or /etc/containers/certs.d/{host}/ca.crt, or set REQUESTS_CA_BUNDLE); if it speaks "
        f"plain HTTP only, add {host} to ${INSECURE_REGISTRIES_ENV}",
    )


def short(error: Exception | None) -> str:
    """The gist of a requests/urllib3 error, without its nested reprs."""
    text = str(error) if error else "no answer"
    for gist in (
        "Connection refused",
        "CERTIFICATE_VERIFY_FAILED",
        "WRONG_VERSION_NUMBER",
        "Read timed out",
        "Connection aborted",
        "Connection reset",
        "Name or service not known",
        "timed out",
    ):
        if gist in text:
            return gist.lower() if gist[0].isupper() and "_" not in gist else gist
    return text[:300]

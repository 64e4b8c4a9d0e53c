"""Where the VDK Control Service is and who is asking: the same settings the Control Service CLI reads, so that a
user who set it up for data jobs needs nothing more. Its URL: `-u/--rest-api-url`, else
$VDK_CONTROL_SERVICE_REST_API_URL, else what `vdk set-default -u` wrote. The user's access token: the Control
Service CLI's own (`vdk login`, its credentials cache) when it is installed, else an API token
($VDK_API_TOKEN, a refresh token exchanged at $VDK_API_TOKEN_AUTHORIZATION_URL), else none (a service without
authentication)."""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import teams

# The Control Service CLI's variables (vdk.internal.control.configuration.vdk_config), read as it reads them.
URL_VARIABLE = "VDK_CONTROL_SERVICE_REST_API_URL"
TOKEN_VARIABLE = "VDK_API_TOKEN"
TOKEN_URL_VARIABLE = "VDK_API_TOKEN_AUTHORIZATION_URL"
VERIFY_SSL_VARIABLE = "VDK_CONTROL_HTTP_VERIFY_SSL"
# The option of `vdk set-default -u URL` in the defaults file (vdk.internal.control.configuration.defaults_config).
DEFAULT_URL_OPTION = "rest-api-url"
LOGIN_FIX = (
    f"log in with `vdk login` (the Control Service CLI), or set {TOKEN_VARIABLE} to your API token and "
    f"{TOKEN_URL_VARIABLE} to its authorization URL"
)
_TOKEN_TIMEOUT = 30


@dataclass(frozen=True)
class Endpoint:
    """The Control Service to talk to: its REST API's base URL and where that was set."""

    url: str
    origin: str  # "-u", "VDK_CONTROL_SERVICE_REST_API_URL", "vdk set-default -u (FILE)"

    @property
    def verify_ssl(self) -> bool:
        return os.environ.get(VERIFY_SSL_VARIABLE, "true").strip().lower() not in ("false", "0", "no", "off")


def find_endpoint(given: str | None = None) -> Endpoint | None:
    """The Control Service the user's VDK configuration points at; None when none is set."""
    if given and given.strip():
        return Endpoint(given.strip().rstrip("/"), "-u/--rest-api-url")
    if os.environ.get(URL_VARIABLE, "").strip():
        return Endpoint(os.environ[URL_VARIABLE].strip().rstrip("/"), URL_VARIABLE)
    path = teams.defaults_path()
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    url = parser.get(teams.DEFAULTS_SECTION, DEFAULT_URL_OPTION, fallback="").strip()
    return Endpoint(url.rstrip("/"), f"`vdk set-default -u` ({path})") if url else None


def access_token() -> str | None:
    """The bearer token of the user's requests, or None (no credentials: requests go without one, as the Control
    Service CLI's do). Raises MLTrainingError when credentials are set but cannot be turned into a token."""
    token = _control_cli_token()
    if token:
        return token
    refresh = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not refresh:
        return None
    url = os.environ.get(TOKEN_URL_VARIABLE, "").strip()
    if not url:
        raise MLTrainingError(
            f"{TOKEN_VARIABLE} is set but {TOKEN_URL_VARIABLE} is not: an API token is exchanged for an access "
            "token at its authorization URL",
            f"set {TOKEN_URL_VARIABLE} to the URL your Control Service's operator gave with the token",
        )
    return _exchange(refresh, url)


def _control_cli_token() -> str | None:
    """The Control Service CLI's token (`vdk login`), when that CLI is installed and has one."""
    try:
        from vdk.plugin.control_api_auth.authentication import Authentication
    except ImportError:
        return None
    try:
        return Authentication().read_access_token() or None
    except Exception:  # noqa: BLE001 - no cached login (or a broken one): the API token below, else none
        return None


def _exchange(refresh_token: str, url: str) -> str:
    """OAuth2's refresh-token grant, as the Control Service CLI makes it."""
    import requests

    try:
        answer = requests.post(
            url,
            data={"grant_type": "refresh_token", "refresh_token": refresh_token},
            headers={"Accept": "application/json"},
            timeout=_TOKEN_TIMEOUT,
        )
    except requests.RequestException as e:
        raise MLTrainingError(
            f"cannot reach the authorization URL {url} ({TOKEN_URL_VARIABLE}): {type(e).__name__}",
            f"check {TOKEN_URL_VARIABLE} and that this machine reaches it",
        ) from None
    token = None
    if answer.ok:
        try:
            token = answer.json().get("access_token")
        except ValueError:
            token = None
    if not token:
        raise MLTrainingError(
            f"the authorization URL {url} did not exchange {TOKEN_VARIABLE} for an access token "
            f"(HTTP {answer.status_code})",
            f"check that {TOKEN_VARIABLE} is a valid, unexpired API token for it, or log in with `vdk login`",
        )
    return str(token)

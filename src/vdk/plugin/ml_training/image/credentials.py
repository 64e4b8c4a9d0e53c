"""Registry credentials from where `docker login` and `podman login` put them.

Searched in podman's order, then Docker's: $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
~/.config/containers/auth.json, $DOCKER_CONFIG/config.json (else ~/.docker/config.json). In each
file, as Docker does: `credHelpers[host]`, else `credsStore`, else the inline `auths[host]`.
Credential helpers are the standard `docker-credential-<name> get` programs.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from vdk.plugin.ml_training.job.image_reference import DOCKER_HUB

_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
_HUB_SERVER_URL = "https://index.docker.io/v1/"
_HELPER_TIMEOUT = 30


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str  # where they came from, for messages


@dataclass
class Lookup:
    """The result of a search: credentials (or None) and what was looked at, for error messages."""

    credentials: Credentials | None
    searched: list[str]
    notes: list[str]


def auth_files() -> list[Path]:
    files = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        files.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    if os.environ.get("XDG_RUNTIME_DIR"):
        files.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    files.append(config_home / "containers" / "auth.json")
    docker_config = os.environ.get("DOCKER_CONFIG")
    files.append(Path(docker_config) / "config.json" if docker_config else Path.home() / ".docker" / "config.json")
    return files


def _host_of(key: str) -> tuple[str, str]:
    """An auths key ("https://host/v1/", "host", "host/ns/repo") -> (host, path)."""
    for scheme in ("https://", "http://"):
        if key.startswith(scheme):
            key = key[len(scheme) :]
            host, _, _ = key.partition("/")  # a URL's path (/v1/) is not a repository
            return host, ""
    host, _, path = key.partition("/")
    return host, path.strip("/")


def _same_host(a: str, b: str) -> bool:
    return a == b or (a in _HUB_ALIASES and b in _HUB_ALIASES)


def _matching_key(mapping: dict, registry: str, repository: str) -> str | None:
    """The most specific key of `mapping` for the registry (a key may name a repository prefix)."""
    best, best_len = None, -1
    for key in mapping:
        host, path = _host_of(key)
        if not _same_host(host, registry):
            continue
        if path and not (repository == path or repository.startswith(path + "/")):
            continue
        if len(path) > best_len:
            best, best_len = key, len(path)
    return best


def _decode_auth(entry: dict) -> tuple[str, str] | None:
    if entry.get("auth"):
        try:
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return (user, password) if user else None
    if entry.get("username") and entry.get("password"):
        return entry["username"], entry["password"]
    return None


def _helper(name: str, registry: str, notes: list[str]) -> tuple[str, str] | None:
    program = f"docker-credential-{name}"
    server = _HUB_SERVER_URL if registry in _HUB_ALIASES else registry
    try:
        done = subprocess.run([program, "get"], input=server, capture_output=True, text=True, timeout=_HELPER_TIMEOUT)
    except FileNotFoundError:
        notes.append(f"credential helper {program} is configured but not installed")
        return None
    except subprocess.TimeoutExpired:
        notes.append(f"credential helper {program} did not answer within {_HELPER_TIMEOUT}s")
        return None
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip()
        if "not found" not in message.lower():
            notes.append(f"credential helper {program} failed: {message[:200]}")
        return None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        notes.append(f"credential helper {program} printed something that is not JSON")
        return None
    user, secret = answer.get("Username", ""), answer.get("Secret", "")
    if user == "<token>":
        notes.append(f"credential helper {program} returned an identity token, which is not supported")
        return None
    return (user, secret) if user and secret else None


def find_credentials(registry: str, repository: str = "") -> Lookup:
    """Credentials for pushing to / pulling from `registry` (host[:port])."""
    registry = DOCKER_HUB if registry in _HUB_ALIASES else registry
    searched: list[str] = []
    notes: list[str] = []
    for path in auth_files():
        try:
            config = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            notes.append(f"{path} could not be read ({e})")
            continue
        searched.append(str(path))
        helpers = config.get("credHelpers") or {}
        key = _matching_key(helpers, registry, repository)
        if key is not None:
            found = _helper(helpers[key], registry, notes)
            if found:
                return Lookup(Credentials(*found, f"{path} (credHelpers: {helpers[key]})"), searched, notes)
            continue
        if config.get("credsStore"):
            found = _helper(config["credsStore"], registry, notes)
            if found:
                return Lookup(Credentials(*found, f"{path} (credsStore: {config['credsStore']})"), searched, notes)
        auths = config.get("auths") or {}
        key = _matching_key(auths, registry, repository)
        if key is not None:
            found = _decode_auth(auths[key])
            if found:
                return Lookup(Credentials(*found, f"{path} (auths: {key})"), searched, notes)
            if auths[key].get("identitytoken"):
                notes.append(f"{path} holds an identity token for {key}, which is not supported")
    return Lookup(None, searched, notes)

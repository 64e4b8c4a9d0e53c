"""Credentials as `docker login` / `podman login` write them: a base64 `auth` entry, and a config file."""

from __future__ import annotations

import base64
import json
from pathlib import Path


def auth(user: str, password: str) -> str:
    """The `auth` value of a config.json entry: base64 of "user:password"."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))

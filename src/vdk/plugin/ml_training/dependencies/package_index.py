"""Where the dependency layer's packages come from: uv's own settings (`UV_*`, uv.toml) when there
are any, else pip's, as pip itself would read them, so that a machine set up for pip (a company
mirror, a directory of wheels) needs nothing more.

pip reads `index-url`, `extra-index-url` and `find-links` from its configuration files
(`/etc/xdg/pip/pip.conf`, `/etc/pip.conf`, `~/.pip/pip.conf`, `~/.config/pip/pip.conf`, then
`$PIP_CONFIG_FILE`; later files win, and `[install]` wins over `[global]`), and `PIP_INDEX_URL`,
`PIP_EXTRA_INDEX_URL`, `PIP_FIND_LINKS` from the environment, which wins over the files. uv reads
none of them; this module hands them over as `UV_DEFAULT_INDEX`, `UV_INDEX` and `UV_FIND_LINKS`.

What reaches uv is part of what the caches of installs remember (`fingerprint`: a local run's overlay, the image's
dependency layer): uv's index variables (pip's handed over included) and the configuration files uv reads itself
(docs.astral.sh/uv/concepts/configuration-files), so that pointing at another index installs again.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

# uv's variables that say where packages come from (pip's settings arrive as the first, second and fifth), and which
# configuration files it reads
UV_INDEX_VARIABLES = (
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
    "UV_CONFIG_FILE",
    "UV_NO_CONFIG",
)
UV_CONFIG = "uv.toml"
_FALSE = {"", "0", "false", "no", "off"}

# pip's setting -> (pip's environment variable, uv's variable, uv variables that already say it)
_SETTINGS = {
    "index-url": ("PIP_INDEX_URL", "UV_DEFAULT_INDEX", ("UV_DEFAULT_INDEX", "UV_INDEX_URL")),
    "extra-index-url": ("PIP_EXTRA_INDEX_URL", "UV_INDEX", ("UV_INDEX", "UV_EXTRA_INDEX_URL")),
    "find-links": ("PIP_FIND_LINKS", "UV_FIND_LINKS", ("UV_FIND_LINKS",)),
}


def pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's configuration files in the order pip reads them (later ones win)."""
    home = Path(env.get("HOME") or Path.home())
    config_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    files = [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"), home / ".pip" / "pip.conf"]
    files.append(config_home / "pip" / "pip.conf")
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def pip_settings(env: Mapping[str, str]) -> dict[str, list[str]]:
    """pip's index settings: setting -> values (whitespace-separated lists split)."""
    found: dict[str, str] = {}
    if env.get("PIP_CONFIG_FILE") != os.devnull:  # pip's way of saying: no configuration files
        for path in pip_config_files(env):
            parser = configparser.RawConfigParser()
            try:
                parser.read(path, encoding="utf-8")
            except (configparser.Error, UnicodeDecodeError):
                continue  # pip would refuse the file too; uv then uses its defaults
            for section in ("global", "install"):
                for key in _SETTINGS:
                    if parser.has_option(section, key):
                        found[key] = parser.get(section, key)
    for key, (pip_env, _, _) in _SETTINGS.items():
        if env.get(pip_env):
            found[key] = env[pip_env]
    return {key: value.split() for key, value in found.items() if value.split()}


def uv_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to uv's environment so that it finds what pip would."""
    out = {}
    for key, values in pip_settings(env).items():
        _, uv_name, uv_own = _SETTINGS[key]
        if any(name in env for name in uv_own):
            continue  # uv has its own setting: it wins
        if key == "index-url":
            out[uv_name] = values[0]
        elif key == "find-links":
            out[uv_name] = ",".join(values)  # uv: comma-separated; pip: whitespace-separated
        else:
            out[uv_name] = " ".join(values)
    return out


def uv_config_files(env: Mapping[str, str], cwd: Path) -> list[Path]:
    """The configuration files uv reads when it runs in `cwd` with `env`, lowest precedence first: none with
    UV_NO_CONFIG; only UV_CONFIG_FILE's when it names one; else the system's (the first of $XDG_CONFIG_DIRS/uv/uv.toml,
    /etc/uv/uv.toml), the user's ($XDG_CONFIG_HOME/uv/uv.toml) and the project's: the nearest uv.toml, or
    pyproject.toml with a [tool.uv] table, in `cwd` or a directory above it."""
    if env.get("UV_NO_CONFIG", "").strip().lower() not in _FALSE:
        return []
    if env.get("UV_CONFIG_FILE"):
        return [cwd / env["UV_CONFIG_FILE"]]  # uv runs in `cwd`: a relative path is from there
    files = []
    system_dirs = [d for d in env.get("XDG_CONFIG_DIRS", "").split(os.pathsep) if d] + ["/etc"]
    system = next((p for d in system_dirs if (p := Path(d) / "uv" / UV_CONFIG).is_file()), None)
    if system is not None:
        files.append(system)
    home = Path(env.get("HOME") or Path.home())
    user = Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "uv" / UV_CONFIG
    if user.is_file():
        files.append(user)
    for directory in [cwd.resolve(), *cwd.resolve().parents]:
        if (directory / UV_CONFIG).is_file():
            files.append(directory / UV_CONFIG)
            break
        if _uv_tables(directory / "pyproject.toml"):
            files.append(directory / "pyproject.toml")
            break
    return files


def fingerprint(env: Mapping[str, str], cwd: Path) -> str:
    """A hash of the index settings that reach uv run in `cwd` with `env` (uv's environment, pip's settings handed
    over): its index variables and what its configuration files say (a pyproject.toml's [tool.uv] tables only). A
    cache key's input: the credentials an index URL may carry are in it only hashed."""
    variables = {name: env[name] for name in UV_INDEX_VARIABLES if name in env}
    files = []
    for path in uv_config_files(env, cwd):
        text = _uv_tables(path) if path.name == "pyproject.toml" else _read(path)
        files.append(hashlib.sha256(text.encode()).hexdigest())
    settings = json.dumps({"variables": variables, "files": files}, sort_keys=True)
    return hashlib.sha256(settings.encode()).hexdigest()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""  # uv refuses a named file it cannot read; a discovered one is not there


def _uv_tables(pyproject: Path) -> str:
    """The [tool.uv] table of a pyproject.toml, as canonical JSON ("" when it has none, or the file is no TOML:
    uv then looks further up)."""
    text = _read(pyproject) if pyproject.is_file() else ""
    try:
        table = tomllib.loads(text).get("tool", {}).get("uv")
    except (tomllib.TOMLDecodeError, AttributeError):
        return ""
    return "" if table is None else json.dumps(table, sort_keys=True, default=str)  # an empty [tool.uv] counts

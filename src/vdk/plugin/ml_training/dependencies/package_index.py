"""Where the dependency layer's packages come from: uv's own settings (`UV_*`, uv.toml) when there
are any, else pip's, as pip itself would read them, so that a machine set up for pip (a company
mirror, a directory of wheels) needs nothing more.

pip reads `index-url`, `extra-index-url` and `find-links` from its configuration files
(`/etc/xdg/pip/pip.conf`, `/etc/pip.conf`, `~/.pip/pip.conf`, `~/.config/pip/pip.conf`, then
`$PIP_CONFIG_FILE`; later files win, and `[install]` wins over `[global]`), and `PIP_INDEX_URL`,
`PIP_EXTRA_INDEX_URL`, `PIP_FIND_LINKS` from the environment, which wins over the files. uv reads
none of them; this module hands them over as `UV_DEFAULT_INDEX`, `UV_INDEX` and `UV_FIND_LINKS`.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from pathlib import Path

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

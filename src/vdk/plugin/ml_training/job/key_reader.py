"""The typed reader of [ml-training] values: a key's value from the job, else from its VDK setting, read as an
integer, boolean, duration, quantity, choice or pattern, with the catalogue's default when it is not set. Every
failure is a JobConfigError that names the file, the key and the fix (and, for a value from VDK configuration,
where it was set).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.keys import SETTING_PREFIX
from vdk.plugin.ml_training.job.keys import default_of
from vdk.plugin.ml_training.job.keys import key as catalogued
from vdk.plugin.ml_training.secret_patterns import public_url
from vdk.plugin.ml_training.secret_patterns import redact
from vdk.plugin.ml_training.secret_patterns import url_credentials
from vdk.plugin.ml_training.units import format_duration
from vdk.plugin.ml_training.units import parse_duration
from vdk.plugin.ml_training.units import parse_quantity
from vdk.plugin.ml_training.vocabulary.wire import setting_variable

_MEMORY_KEYS = ("memory", "shm_size")
_MIN_MEMORY = 1 << 20  # less is a unit mistake (`100m` is a tenth of a byte), not a memory size
_BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
_UNSET: Any = object()  # a reader's `default` when the catalogue's applies


class KeyReader:
    """Reads one [ml-training] section (`values`, keys as the catalogue names them) over the VDK settings
    (`settings`, keyed the same way); every failure names the file, key and fix. `asked`: the keys read so far."""

    def __init__(
        self,
        path: Path,
        values: Mapping[str, str],
        settings: Mapping[str, Any],
        overridden: Mapping[str, str] | None = None,
    ):
        self.path = path
        self.values = values
        self.settings = settings
        self.overridden = dict(overridden or {})  # keys of `values` given for this run (`--set`), not config.ini's
        self.asked: set[str] = set()

    def error(self, key: str, problem: str, fix: str) -> JobConfigError:
        if key in self.overridden:
            return JobConfigError(
                self.path,
                f"--set {key}={self.overridden[key]} (for this run, over config.ini): {problem}",
                fix.replace(f"`{key} = ", f"`--set {key}="),
                SECTION,
                key,
            )
        if not self.values.get(key, "").strip() and key in self.settings:
            variable = setting_variable(SETTING_PREFIX + key)
            origin = self.setting_origin(key)
            if origin.startswith("[vdk]"):
                vdk_key = SETTING_PREFIX + key
                problem = f"the value of {origin}: {problem}"
                fix = fix.replace(f"`{key} = ", f"`{vdk_key} = ") + f" (in [vdk], or `{key} = ...` in [{SECTION}])"
            else:
                problem = f"the value from VDK configuration ({variable}): {problem}"
                fix = fix.replace(f"`{key} = ", f"`{variable}=") + f" (in {variable}, or `{key} = ...` in [{SECTION}])"
        return JobConfigError(self.path, problem, fix, SECTION, key)

    def setting_origin(self, key: str) -> str:
        """Where the VDK setting of `key` came from: its environment variable, or a [vdk] line of config.ini."""
        origins = getattr(self.settings, "origins", None) or {}
        return origins.get(key) or setting_variable(SETTING_PREFIX + key)

    def own(self, key: str) -> str | None:
        """The job's own text of `key` as config.ini holds it (None: not in [ml-training])."""
        self._ask(key)
        return self.values.get(key)

    def raw(self, key: str) -> str | None:
        """The stripped text of `key`: the job's, else its VDK setting's (None: neither, or empty)."""
        self._ask(key)
        value = self.values.get(key)
        if value is None or value.strip() == "":
            value = self.settings.get(key)
            value = None if value is None or str(value).strip() == "" else str(value)
        return None if value is None else value.strip()

    def integer(self, key: str, minimum: int, maximum: int = 1_000_000, default: int = _UNSET) -> int:
        default = self._default(key, default)
        text = self.raw(key)
        if text is None:
            return default
        if not re.fullmatch(r"[0-9]+", text) or not minimum <= int(text) <= maximum:
            raise self.error(
                key,
                f"{text!r} is not a whole number from {minimum} to {maximum}",
                f"set `{key} = {max(default, minimum)}` or another whole number in that range",
            )
        return int(text)

    def boolean(self, key: str) -> bool:
        default = bool(self._default(key, _UNSET))
        text = self.raw(key)
        if text is None:
            return default
        value = _BOOLEANS.get(text.lower())
        if value is None:
            raise self.error(key, f"{text!r} is not true or false", f"write `{key} = {str(not default).lower()}`")
        return value

    def duration(self, key: str, minimum: int) -> int | None:
        """Seconds; the catalogue's default (None: no default) when not set."""
        default = self._default(key, _UNSET)
        text = self.raw(key)
        if text is None:
            return default
        try:
            seconds = parse_duration(text)
        except ValueError:
            seconds = -1
        if seconds < minimum:
            raise self.error(
                key,
                f"{text!r} is not a duration" + (" above zero" if minimum else ""),
                f"write it like `{key} = 12h` (units s, m, h, d, w; `1h30m` works too)",
            )
        maximum = catalogued(key).maximum
        if isinstance(maximum, int) and seconds > maximum:
            most = format_duration(maximum)
            raise self.error(
                key, f"{text!r} is longer than {most}, the most it may be", f"write it like `{key} = {most}` or less"
            )
        return seconds

    def quantity(self, key: str, default: str = _UNSET) -> str:
        text = self.raw(key) or self._default(key, default)
        try:
            value = parse_quantity(text)
        except ValueError:
            value = None
        if value is None or value <= 0:
            example = "16Gi" if key in _MEMORY_KEYS else "4"
            raise self.error(
                key,
                f"{text!r} is not a positive Kubernetes quantity",
                f"write it like `{key} = {example}` (suffixes Ki Mi Gi Ti, k M G T, or m for milli)",
            )
        maximum = catalogued(key).maximum
        if maximum is not None and value > parse_quantity(str(maximum)):
            raise self.error(
                key,
                f"{text!r} is more than {maximum}, more than any machine has (per node)",
                f"write it like `{key} = {'32Gi' if key in _MEMORY_KEYS else '8'}`: what one node of the run needs",
            )
        if key in _MEMORY_KEYS and value < _MIN_MEMORY:
            milli = re.fullmatch(r"([0-9.]+)m", text)
            size = format(value.normalize(), "f")
            what = f" (`m` means a thousandth: {text} is {size} bytes)" if milli else f" ({size} bytes)"
            example = f"{milli.group(1)}Mi" if milli else "16Gi"
            raise self.error(
                key,
                f"{text!r} is less than a mebibyte{what}",
                f"write it like `{key} = {example}` (Mi for mebibytes, Gi for gibibytes)",
            )
        return text

    def choice(self, key: str) -> str:
        """One of the catalogue's choices of `key` (asked when read: a backend's are registered)."""
        entry = catalogued(key)
        options = entry.choices() if entry.choices else ()
        text = (self.raw(key) or str(entry.default)).lower()
        if text not in options:
            close = difflib.get_close_matches(text, options, n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise self.error(
                key, f"{text!r} is not one of {', '.join(options)}", f"{hint}use one of {', '.join(options)}"
            )
        return text

    def matching(self, key: str, pattern: re.Pattern, what: str) -> str | None:
        """The text of `key` when `pattern` matches it (None: not set); the error shows the catalogue's example."""
        text = self.raw(key)
        if text is not None and url_credentials(text):
            host = text.split("://", 1)[-1].rpartition("@")[2].split("/", 1)[0]
            raise self.error(
                key,
                f"{redact(text)!r} holds credentials (user:password@), which would be shown and recorded wherever "
                "the address is",
                f"write `{key} = {public_url(text).split('://', 1)[-1]}` and log in with `podman login {host}` (or "
                "`docker login`): the credentials are read from there",
            )
        if text is not None and (not pattern.match(text) or len(text) > 253):
            scheme = " without a scheme such as https://" if "://" in text else ""
            example = catalogued(key).example
            raise self.error(key, f"{text!r} is not {what}", f"write it like `{key} = {example}`{scheme}")
        return text

    @staticmethod
    def key_default(key: str) -> Any:
        """The catalogue's default of `key`."""
        return default_of(key)

    @staticmethod
    def key_example(key: str) -> str:
        """The catalogue's example of `key`, as fixes show it."""
        return catalogued(key).example

    def _ask(self, key: str) -> None:
        catalogued(key)  # a key the catalogue lacks is a mistake of the reading code: KeyError
        self.asked.add(key)

    @staticmethod
    def _default(key: str, default: Any) -> Any:
        return catalogued(key).default if default is _UNSET else default

"""The catalogue of keys (keys.py) as Markdown tables, for the documentation: the keys of [ml-training]
(`job_keys_table`) and the VDK settings of the plugin (`settings_table`). The docs include them (or a test checks
them against the pages), so that the documented keys are the ones the plugin reads.

`python -m vdk.plugin.ml_training.job.key_table` prints both.
"""

from __future__ import annotations

from collections.abc import Sequence

from vdk.plugin.ml_training.job.keys import BOOLEAN
from vdk.plugin.ml_training.job.keys import DURATION
from vdk.plugin.ml_training.job.keys import JOB
from vdk.plugin.ml_training.job.keys import Key
from vdk.plugin.ml_training.job.keys import job_keys
from vdk.plugin.ml_training.job.keys import settings
from vdk.plugin.ml_training.units import format_duration


def job_keys_table() -> str:
    """| key | meaning | default | used by |: every key of [ml-training], in catalogue order."""
    rows = [(f"`{key.name}`", _meaning(key), _default(key), _verbs(key)) for key in job_keys()]
    return _table(("key", "meaning", "default", "used by"), rows)


def settings_table() -> str:
    """| VDK key | environment variable | meaning | default | used by |: every VDK setting of the plugin (a job's own
    key of the same name wins over it)."""
    rows = [
        (f"`{key.setting_name}`", f"`{key.variable}`", _meaning(key, key.setting_description),
         f"the default of `{key.name}`" if key.scope == JOB else _own_default(key), _verbs(key))
        for key in settings()
    ]  # fmt: skip
    return _table(("VDK key", "environment variable", "meaning", "default", "used by"), rows)


def _meaning(key: Key, text: str | None = None) -> str:
    text = text or key.meaning
    if key.choices is not None:
        text += ": one of " + ", ".join(f"`{choice}`" for choice in key.choices())
    return text


def _default(key: Key) -> str:
    """The default of a job's key as the docs state it; for a key that is also a VDK setting, the setting comes
    first (unless the default's text places it itself)."""
    own = _own_default(key)
    if key.scope == JOB and key.setting and key.variable not in own:
        return f"`{key.variable}`, else {own}"
    return own


def _own_default(key: Key) -> str:
    return key.default_text or _value(key)


def _value(key: Key) -> str:
    if key.default is None:
        return "none"
    if key.kind == BOOLEAN:
        return f"`{str(key.default).lower()}`"
    if key.kind == DURATION:
        return f"`{format_duration(int(key.default))}`"
    return f"`{key.default}`"


def _verbs(key: Key) -> str:
    return ", ".join(f"`vdk {verb}`" for verb in key.verbs)


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(job_keys_table())
    print(settings_table(), end="")

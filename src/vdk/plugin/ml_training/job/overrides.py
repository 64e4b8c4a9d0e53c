"""Per-run overrides of [ml-training] keys, without editing config.ini: `vdk run JOB --set smoke_steps=3 --args
"--lr 1e-3"`, the same for `vdk deploy`. Each `--set KEY=VALUE` names a key of the catalogue (an unknown one is
refused with the key meant) and is read exactly as config.ini's line would be (load.py: the same reader, the same
errors, which name `--set`); `--args TEXT` is `--set args=TEXT`. A deployed run keeps what was overridden
(k8s/runs/record.py), and `vdk show` says it.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.config_file import closest
from vdk.plugin.ml_training.job.config_file import inline_comment
from vdk.plugin.ml_training.job.keys import KEYS
from vdk.plugin.ml_training.job.keys import key as catalogued

SET_OPTION = "--set"
ARGS_OPTION = "--args"


def parse_overrides(sets: Iterable[str] = (), args: str | None = None) -> dict[str, str]:
    """{key: value} of `--set KEY=VALUE` options (in order; a key once) and `--args TEXT`."""
    out: dict[str, str] = {}
    for item in sets:
        key, equals, value = item.partition("=")
        name = key.strip().lower().replace("-", "_")
        if not equals or not name:
            raise MLTrainingError(
                f"{SET_OPTION} {item!r} is not KEY=VALUE",
                f"write it like `{SET_OPTION} smoke_steps=3` (a key of [ml-training] and its value)",
            )
        _check_key(name, item)
        if name in out and out[name] != value.strip():
            raise MLTrainingError(f"{SET_OPTION} sets {name} twice", f"keep one `{SET_OPTION} {name}=...`")
        out[name] = _checked_value(name, value.strip())
    if args is not None:
        if "args" in out and out["args"] != args.strip():
            raise MLTrainingError(f"{ARGS_OPTION} and `{SET_OPTION} args=...` both set args", "keep one of them")
        out["args"] = args.strip()
    return out


def describe(overrides: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """`smoke_steps=3, args='--lr 1e-3'`: what was overridden, as `vdk show` and the run's annotation say it."""
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    return ", ".join(f"{key}={value!r}" if " " in value or not value else f"{key}={value}" for key, value in items)


def _check_key(name: str, item: str) -> None:
    if name in KEYS:
        return
    close = closest(name, list(KEYS))
    raise MLTrainingError(
        f"{SET_OPTION} {item!r}: {name!r} is not a key of [ml-training]",
        f"did you mean `{SET_OPTION} {close}=...`?" if close else f"the keys are: {', '.join(KEYS)}",
    )


def _checked_value(name: str, value: str) -> str:
    if not value and not catalogued(name).may_be_empty:
        raise MLTrainingError(
            f"{SET_OPTION} {name}= has no value",
            f"give it one (`{SET_OPTION} {name}={catalogued(name).example}`), or leave {SET_OPTION} out for "
            "config.ini's value",
        )
    start = inline_comment(value) if not catalogued(name).may_be_empty else None
    if start is not None:
        raise MLTrainingError(
            f"{SET_OPTION} {name}={value!r}: {value[start:]!r} is not part of a value",
            f"write `{SET_OPTION} {name}={value[:start].rstrip()}`",
        )
    return value

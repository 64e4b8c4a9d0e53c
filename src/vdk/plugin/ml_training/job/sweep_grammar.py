"""The values of `[ml-training.sweep]`: one parameter's search space as config.ini writes it, read into a
`Parameter`. Plain INI a reader understands without the docs:

    batch_size = 16, 32, 64              a list: every value is tried (a grid), or sampled from
    optimizer = choice(adamw, sgd)       one of these
    dropout = uniform(0.0, 0.5)          a number between the two
    lr = loguniform(1e-5, 1e-2)          the same on a log scale (both bounds above zero)
    layers = int(2, 8)                   a whole number from the first to the second

Values are numbers (`32`, `3e-4`) or words (`adamw`; quote one that holds a comma: `'a,b'`). Every mistake is a
`GrammarError` with the fix; sweep.py names the file and key.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from vdk.plugin.ml_training.runtime.sweep_protocol import CHOICE
from vdk.plugin.ml_training.runtime.sweep_protocol import DISTRIBUTIONS
from vdk.plugin.ml_training.runtime.sweep_protocol import INT
from vdk.plugin.ml_training.runtime.sweep_protocol import LIST
from vdk.plugin.ml_training.runtime.sweep_protocol import LOGUNIFORM
from vdk.plugin.ml_training.runtime.sweep_protocol import UNIFORM
from vdk.plugin.ml_training.runtime.sweep_protocol import format_value
from vdk.plugin.ml_training.runtime.sweep_protocol import parameter_values
from vdk.plugin.ml_training.vocabulary.human_units import counted

_CALL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.S)
_ITEM = re.compile(r"""\s*('[^']*'|"[^"]*"|[^,]*?)\s*(?:,|$)""")
_INTEGER = re.compile(r"[-+]?[0-9]+")
_NUMBER = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")
_WORD = re.compile(r"[^\s'\"()\[\]{}$]+")
EXAMPLES = "`16, 32, 64`, `choice(adamw, sgd)`, `uniform(0.0, 0.5)`, `loguniform(1e-5, 1e-2)` or `int(2, 8)`"


class GrammarError(ValueError):
    def __init__(self, problem: str, fix: str):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


@dataclass(frozen=True)
class Parameter:
    """One parameter's search space: `values` for a list or choice, `low`/`high` for a range."""

    name: str
    kind: str  # runtime.sweep_protocol: LIST, CHOICE, UNIFORM, LOGUNIFORM, INT
    values: tuple = ()
    low: float | int | None = None
    high: float | int | None = None

    @property
    def continuous(self) -> bool:
        return self.kind in (UNIFORM, LOGUNIFORM)

    def grid_values(self) -> list | None:
        """Its finite values (a list, a choice, an integer range), None for a continuous range."""
        return parameter_values(self.to_wire())

    def extremes(self) -> tuple[Any, Any]:
        """(smallest, largest): the bounds of a range; of a list or choice of numbers the least and the most,
        else its first and last value."""
        if self.kind in (LIST, CHOICE):
            if all(isinstance(v, (int, float)) for v in self.values):
                return min(self.values), max(self.values)
            return self.values[0], self.values[-1]
        return self.low, self.high

    def describe(self) -> str:
        """As config.ini writes it: it reads back as the same parameter (a run record keeps it so)."""
        if self.kind == LIST:
            return ", ".join(_written(v) for v in self.values)
        if self.kind == CHOICE:
            return f"choice({', '.join(_written(v) for v in self.values)})"
        return f"{self.kind}({format_value(self.low)}, {format_value(self.high)})"

    def to_wire(self) -> dict:
        if self.kind in (LIST, CHOICE):
            return {"name": self.name, "kind": self.kind, "values": list(self.values)}
        return {"name": self.name, "kind": self.kind, "low": self.low, "high": self.high}


def parse_parameter(name: str, text: str) -> Parameter:
    """One `name = value` line of [ml-training.sweep] that is not a setting of the sweep."""
    call = _CALL.match(text)
    if call is not None:
        function, inside = call.group(1), call.group(2)
        if function.lower() not in DISTRIBUTIONS:
            close = difflib.get_close_matches(function.lower(), DISTRIBUTIONS, n=1)
            hint = f"did you mean `{close[0]}(...)`? " if close else ""
            raise GrammarError(
                f"{function}(...) is not a distribution",
                f"{hint}write a list or one of {', '.join(d + '(...)' for d in DISTRIBUTIONS)}, e.g. {EXAMPLES}",
            )
        return _distribution(name, function.lower(), _items(inside, f"{function}(...)"))
    if "(" in text or ")" in text:
        raise GrammarError(f"{text.strip()!r} is neither a list nor a distribution", f"write it like {EXAMPLES}")
    stripped = text.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        stripped = stripped[1:-1]
    values = _items(stripped, "the list")
    _no_duplicates(values)
    return Parameter(name, LIST, tuple(values))


def _distribution(name: str, kind: str, items: list) -> Parameter:
    if kind == CHOICE:
        _no_duplicates(items)
        return Parameter(name, CHOICE, tuple(items))
    if len(items) != 2:
        raise GrammarError(
            f"{kind}(...) takes two bounds, not {counted(len(items), 'value')}",
            f"write `{kind}(LOW, HIGH)`, e.g. {_example(kind)}",
        )
    low, high = items
    if kind == INT:
        if not all(isinstance(v, int) for v in items):
            raise GrammarError(
                f"int({format_value(low)}, {format_value(high)}) needs whole numbers", "write e.g. `int(2, 8)`"
            )
    elif not all(isinstance(v, (int, float)) for v in items):
        raise GrammarError(f"{kind}(...) needs two numbers", f"write e.g. {_example(kind)}")
    if not low < high:
        raise GrammarError(
            f"{kind}({format_value(low)}, {format_value(high)}): the first bound must be below the second",
            f"write `{kind}({format_value(min(low, high))}, {format_value(max(low, high))})`"
            if low != high
            else f"a single value is a list of one: `{format_value(low)}`",
        )
    if kind == LOGUNIFORM and low <= 0:
        raise GrammarError(
            f"loguniform({format_value(low)}, {format_value(high)}): a log scale needs bounds above zero",
            "use a positive lower bound such as 1e-6, or uniform(...) for a range that includes zero",
        )
    if kind == INT:
        return Parameter(name, INT, low=int(low), high=int(high))
    return Parameter(name, kind, low=float(low), high=float(high))


def _example(kind: str) -> str:
    return {UNIFORM: "`uniform(0.0, 0.5)`", LOGUNIFORM: "`loguniform(1e-5, 1e-2)`", INT: "`int(2, 8)`"}.get(kind, "")


def _items(text: str, what: str) -> list:
    """The comma-separated values of `text`, each a number or a word (quoted when it holds a comma)."""
    if not text.strip():
        raise GrammarError(f"{what} is empty", f"give it at least one value, e.g. {EXAMPLES}")
    out: list = []
    position = 0
    while position < len(text):
        match = _ITEM.match(text, position)
        assert match is not None  # the pattern matches the empty string at worst
        token = match.group(1)
        position = match.end() if match.end() > position else len(text)
        if token == "":
            raise GrammarError(
                f"{what} has an empty value (two commas in a row, or one at an end)", "remove the extra comma"
            )
        out.append(_value(token))
        if match.group(0).rstrip().endswith(",") and position >= len(text):
            raise GrammarError(f"{what} ends with a comma", "remove the comma at the end")
    return out


def _value(token: str) -> Any:
    if token[0] in "'\"":
        return token[1:-1]
    if _INTEGER.fullmatch(token):
        return int(token)
    if _NUMBER.fullmatch(token):
        value = float(token)
        if not math.isfinite(value):
            raise GrammarError(f"{token} is not a finite number", "use a number such as 1e-3")
        return value
    if not _WORD.fullmatch(token):
        raise GrammarError(
            f"{token!r} is not a value (a number, or a word without spaces, quotes or brackets)",
            "quote a value that holds spaces or commas: 'like this'",
        )
    return token


def _written(value: Any) -> str:
    """A value as config.ini writes it: quoted when it is text that would not read back as itself (a comma, a
    space, a control character, or the look of a number: `'32'`)."""
    text = format_value(value)
    if not isinstance(value, str) or (_WORD.fullmatch(text) and "," not in text and not _NUMBER.fullmatch(text)):
        return text
    return f"'{text}'" if "'" not in text else f'"{text}"'


def _no_duplicates(values: list) -> None:
    seen = []
    for value in values:
        if value in seen:
            raise GrammarError(f"{format_value(value)} is listed twice", f"list {format_value(value)} once")
        seen.append(value)


def misplaced_key(name: str, value: str, settings: list[str], job_keys: Collection[str]) -> GrammarError | None:
    """A key of [ml-training.sweep] that no value references is a mistake, not a parameter, when it is spelt like
    one of the sweep's `settings` (`metrc = val_loss`) or is a key of [ml-training] (`job_keys`): said so, with the
    setting meant or where the key goes, before it is read as a parameter (whose fix would spread the typo:
    `--metrc ${metrc}`). None: a parameter (that no value uses, which the sweep says next)."""
    if name.lower() in job_keys:
        return GrammarError(
            f"{name} is a key of [ml-training], not a setting of the sweep, and no value references it as a "
            f"parameter (`${{{name}}}`)",
            f"move `{name} = {value.strip()}` to [ml-training]; to search over it, write `${{{name}}}` where its "
            "value goes (in args, or an [ml-training.env] value)",
        )
    meant = difflib.get_close_matches(name.lower(), settings, n=1, cutoff=0.75)
    if not meant:
        return None
    return GrammarError(
        f"{name!r} is not a setting of [ml-training.sweep], and no value references it as a parameter (`${{{name}}}`)",
        f"did you mean `{meant[0]} = {value.strip()}`? The settings are: {', '.join(settings)}; every other key is "
        "a parameter, written `${name}` where its value goes",
    )

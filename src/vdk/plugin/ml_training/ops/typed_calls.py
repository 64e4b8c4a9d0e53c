"""The Python API checks what it is given before it does anything: `@checked` on a use case compares each argument
with its annotation and refuses one of another type with an MLTrainingError that names the function, the
parameter, what it takes and what it was given — `deploy(spec, skip_smoke="false")` is refused (the text "false"
is true, and would have skipped the smoke check), `run_job("jobs/mnist")` is told to load the spec first — instead
of an AttributeError from deep inside, or a wrong thing done.

What is checked: bool (True or False: not 1, not "false"), int (not a bool), float (an int too), str, Path (a str
too), None, unions of them (`X | None`), Literal values, callables, the classes of the plugin (MLJobSpec, Scope,
...) and the containers' kinds (list, tuple, dict, Sequence, Mapping: not their items). An annotation that cannot
be resolved at the time of the call (a name imported for type checkers only) is not checked.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import ParamSpec
from typing import TypeVar

from vdk.plugin.ml_training.errors import MLTrainingError

P = ParamSpec("P")
R = TypeVar("R")
_TRUE = ("true", "1", "yes", "on")
# How a use case's spec and scope are made (the front door's functions), for the fix of a call that gave something
# else.
_MAKERS = {
    "MLJobSpec": "load one with `api.deploy_spec(PATH)` (or `api.job_spec(PATH)`, as `vdk run` reads it)",
    "Scope": "make one with `api.find_scope(name=JOB)`",
}


def checked(function: Callable[P, R]) -> Callable[P, R]:
    """`function` refusing arguments that are not of its parameters' annotated types (see the module)."""
    signature = inspect.signature(function)
    hints: dict[str, Any] | None = None

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        nonlocal hints
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            names = ", ".join(signature.parameters)
            raise MLTrainingError(
                f"{function.__name__}(): {e}", f"call it with its parameters: {function.__name__}({names})"
            ) from None
        if hints is None:
            hints = _hints(function)
        for name, value in bound.arguments.items():
            expected = hints.get(name)
            if expected is not None and not _fits(value, expected):
                raise _refusal(function.__name__, name, value, expected)
        return function(*args, **kwargs)

    return call


def _hints(function: Callable) -> dict[str, Any]:
    """The parameters' annotations as types; those that do not resolve are left out (not checked)."""
    try:
        return typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - a name imported for type checkers only: resolve one by one
        pass
    namespace = dict(vars(sys.modules[function.__module__]))
    out = {}
    for name, annotation in getattr(function, "__annotations__", {}).items():
        try:
            # an annotation is a name of the module, written by the plugin: what get_type_hints evaluates too
            out[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation
        except Exception:  # noqa: BLE001 - not resolvable now: not checked
            continue
    return out


def _fits(value: Any, expected: Any) -> bool:
    if expected is Any or isinstance(expected, TypeVar):
        return True
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(expected))
    if origin is typing.Literal:
        return value in typing.get_args(expected)
    if expected is None or expected is type(None):
        return value is None
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is Path:
        return isinstance(value, (str, os.PathLike))
    if origin is collections.abc.Callable or expected is collections.abc.Callable:
        return callable(value)
    kind = origin if origin is not None else expected
    if isinstance(kind, type):
        try:
            return isinstance(value, kind)
        except TypeError:  # a Protocol that cannot be checked at run time
            return True
    return True


def _refusal(function: str, name: str, value: Any, expected: Any) -> MLTrainingError:
    given = f"the {type(value).__name__} {_shown(value)}"
    wanted = _described(expected)
    if (
        _fits(True, expected)
        and isinstance(value, str)
        and value.strip().lower() in (*_TRUE, "false", "0", "no", "off")
    ):
        fix = f"pass {name}={value.strip().lower() in _TRUE} (a bool: the text {value!r} would count as true)"
    elif isinstance(value, (str, os.PathLike)) and any(maker in wanted for maker in _MAKERS):
        fix = "; ".join(f"{maker}: {how}" for maker, how in _MAKERS.items() if maker in wanted)
    else:
        fix = f"pass {name} as {wanted}"
    return MLTrainingError(f"{function}({name}=...) takes {wanted}, not {given}", fix)


def _described(expected: Any) -> str:
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_described(option) for option in typing.get_args(expected)))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(expected))
    words = {bool: "True or False", int: "a whole number", float: "a number", str: "text (a str)",
             Path: "a path", type(None): "None"}  # fmt: skip
    if expected in words:
        return words[expected]
    if expected is None:
        return "None"
    kind = origin if origin is not None else expected
    if kind is collections.abc.Callable:
        return "a function"
    name = getattr(kind, "__name__", str(kind))
    return f"{'an' if name[:1] in 'AEIOUM' else 'a'} {name}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

"""The user's verbs (deploy, list, show, execute, delete) work for ML jobs whether or not the
Control Service CLI (vdk-plugin-control-cli) is installed.

With it, its click command is wrapped: ML invocations go to the plugin, everything else reaches the
original callback unchanged. Without it, the plugin registers the verb itself, with the same option
names, and tells users of data jobs what to install. The root click group is a module-level global
that outlives one invocation (tests run many), so installing twice must change nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from typing import Callable

import click

_MARK = "_vdk_ml_training_verb"

CONTROL_SERVICE_HINT = (
    "Data jobs are deployed through the VDK Control Service CLI, which is not installed here. Install it with "
    "`pip install 'vdk-ml-training[control-service]'` (in an environment without transformers 5: "
    "it needs pydantic<2)."
)


@dataclass
class Verb:
    """An ML-aware verb.

    `params` are the options the verb needs for ML jobs (reusing the Control Service names where they
    exist); `ml_only` are those that make no sense for data jobs. `is_ml(kwargs)` decides per invocation;
    `run_ml(**kwargs)` does the ML work. `help` is used when the plugin registers the verb itself.
    """

    name: str
    help: str
    params: list[click.Parameter]
    ml_only: tuple[str, ...]
    is_ml: Callable[[dict[str, Any]], bool]
    run_ml: Callable[..., Any]
    ml_help: str = ""
    # Without the Control Service CLI: why an invocation that is not ML cannot be served.
    not_ml_reason: Callable[[dict[str, Any]], str] = lambda kwargs: "this is not an ml-training job."


def install(root: click.Group, verb: Verb) -> click.Command:
    """Wrap the existing command named `verb.name`, or add one; idempotent."""
    existing = root.commands.get(verb.name)
    if existing is not None and getattr(existing, _MARK, False):
        return existing
    command = _wrap(existing, verb) if existing is not None else _standalone(verb)
    setattr(command, _MARK, True)
    root.add_command(command, verb.name)
    return command


def _standalone(verb: Verb) -> click.Command:
    def callback(**kwargs):
        if not verb.is_ml(kwargs):
            raise click.UsageError(f"{verb.not_ml_reason(kwargs)} {CONTROL_SERVICE_HINT}")
        return verb.run_ml(**kwargs)

    return click.Command(verb.name, params=list(verb.params), callback=callback, help=verb.help)


def _wrap(original: click.Command, verb: Verb) -> click.Command:
    known = {p.name for p in original.params}
    added = [p for p in verb.params if p.name not in known]
    added_names = {p.name for p in added}

    def callback(**kwargs):
        if verb.is_ml(kwargs):
            return verb.run_ml(**{k: v for k, v in kwargs.items() if k in {p.name for p in verb.params}})
        ctx = click.get_current_context()
        misplaced = [
            p.opts[0] for p in added if p.name in verb.ml_only and ctx.get_parameter_source(p.name).name != "DEFAULT"
        ]
        if misplaced:
            raise click.UsageError(f"{', '.join(misplaced)} applies to ml-training jobs only")
        passthrough = {k: v for k, v in kwargs.items() if k not in added_names}
        return ctx.invoke(original.callback, **passthrough)

    help_text = (original.help or "") + ("\n\n" + verb.ml_help if verb.ml_help else "")
    command = click.Command(
        original.name,
        params=list(original.params) + added,
        callback=callback,
        help=help_text,
        short_help=original.short_help,
        epilog=original.epilog,
        context_settings=dict(original.context_settings),
        hidden=original.hidden,
        deprecated=original.deprecated,
    )
    command.wrapped_command = original  # type: ignore[attr-defined]
    return command

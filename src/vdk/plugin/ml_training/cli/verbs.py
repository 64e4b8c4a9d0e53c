"""The user's verbs (deploy, list, show, execute, delete) work for ML jobs whether or not the
Control Service CLI (vdk-plugin-control-cli) is installed.

With it, its click command is wrapped: ML invocations go to the plugin, everything else reaches the
original callback unchanged (an ML invocation's unexpected error is reported by cli/unexpected.py, never
dropped). Without it, the plugin registers the verb itself, with the same option
names, and tells users of data jobs what to install. The root click group is a module-level global
that outlives one invocation (tests run many), so installing twice must change nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from vdk.plugin.ml_training.cli import unexpected

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
        with unexpected.reported():
            return verb.run_ml(**kwargs)

    return click.Command(verb.name, params=list(verb.params), callback=callback, help=verb.help)


def _wrap(original: click.Command, verb: Verb) -> click.Command:
    known = {p.name for p in original.params}
    added = [p for p in verb.params if p.name not in known]
    added_names = {p.name for p in added}
    # Options of the original that prompt or are required (`-t` "Job Team", delete's confirmation)
    # and that the verb also takes: parsed without prompting, so an ML invocation is never asked
    # for a data job's team; a data job gets the prompts after the decision (`_interact`).
    ours = {p.name for p in verb.params}
    deferred = [
        p for p in original.params if p.name in ours and isinstance(p, click.Option) and (p.prompt or p.required)
    ]
    lenient = {p.name: _lenient(p) for p in deferred}

    def callback(**kwargs):
        if verb.is_ml(kwargs):
            with unexpected.reported():
                return verb.run_ml(**{k: v for k, v in kwargs.items() if k in ours})
        ctx = click.get_current_context()
        misplaced = [
            p
            for p in added
            if p.name in verb.ml_only and ctx.get_parameter_source(p.name) is not click.core.ParameterSource.DEFAULT
        ]
        if misplaced:
            names = ", ".join(
                p.opts[0] if isinstance(p, click.Option) else str(p.human_readable_name) for p in misplaced
            )
            positional = any(isinstance(p, click.Argument) for p in misplaced)
            hint = " (a data job's directory is given with -p)" if positional else ""
            raise click.UsageError(f"{names} applies to ml-training jobs only{hint}")
        passthrough = {k: v for k, v in kwargs.items() if k not in added_names}
        passthrough = _interact(ctx, deferred, passthrough)
        assert original.callback is not None  # a command of the Control Service CLI: it has one
        return ctx.invoke(original.callback, **passthrough)

    help_text = (original.help or "") + ("\n\n" + verb.ml_help if verb.ml_help else "")
    command = click.Command(
        original.name,
        params=[lenient.get(p.name, p) for p in original.params] + added,
        callback=callback,
        help=help_text,
        short_help=original.short_help,
        epilog=original.epilog,
        context_settings=dict(original.context_settings),
        hidden=original.hidden,
        deprecated=original.deprecated,
    )
    # found by cluster_scope and list_command (the data jobs' own command): an attribute click.Command lacks
    command.wrapped_command = original  # type: ignore[attr-defined]
    return command


def _lenient(option: click.Option) -> click.Option:
    """`option` without its prompt, requiredness and callback, its value always passed on."""
    copy_ = copy.copy(option)
    copy_.prompt = None
    copy_.required = False
    copy_.callback = None
    copy_.expose_value = True
    if hasattr(copy_, "_flag_needs_value"):  # click derives it from the prompt
        copy_._flag_needs_value = False
    return copy_


def _interact(ctx: click.Context, deferred: list[click.Option], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What click would have done at parse time for the deferred options: prompt for (or
    reject) the missing ones, run their callbacks (a declined confirmation aborts here)."""
    out = dict(kwargs)
    given = [p for p in deferred if ctx.get_parameter_source(p.name) not in _NOT_GIVEN]
    missing = [p for p in deferred if p not in given]
    if missing:
        # A command made of the missing options only, parsed with no arguments: click prompts,
        # applies the default map and raises MissingParameter exactly as for the original.
        asked = click.Command(ctx.command.name, params=list(missing), add_help_option=False)
        with asked.make_context(ctx.info_name, [], parent=ctx.parent) as sub:
            out.update({p.name: sub.params.get(p.name) for p in missing if p.expose_value})
    for p in given:
        if p.callback is not None:
            out[p.name] = p.callback(ctx, p, out.get(p.name))
    for p in deferred:
        if not p.expose_value:
            out.pop(p.name, None)
    return out


_NOT_GIVEN = (None, click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)

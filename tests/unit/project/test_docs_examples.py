"""The documentation's own examples work: every config.ini block of README.md, docs/ and examples/ is loaded by
the real loader, every `vdk` command shown exists with the options it is shown with, and every file path it names
is in the repository."""

from __future__ import annotations

import ast
import copy
import re
import shlex
from pathlib import Path

import click
import pytest
from vdk.internal import cli_entry
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin as ml_plugin
from vdk.plugin.ml_training.job import load_job_spec

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src" / "vdk" / "plugin" / "ml_training"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.md"))]
_FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _where(page: Path, text: str, offset: int) -> str:
    return f"{page.relative_to(ROOT)}:{text[:offset].count(chr(10)) + 1}"


def config_blocks() -> list[tuple[str, str]]:
    """(page:line, text) of every fenced block that is config.ini (or a part of one: [section] lines)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in _FENCED.finditer(text):
            lang, body = match.groups()
            if lang == "ini" or re.search(r"^\[(job|owner|vdk|ml-training[.a-z]*)\]$", body, re.M):
                found.append((_where(page, text, match.start()), body))
    return found


# Pages about the VDK Control Service show its CLI's own verbs (`vdk login`, `vdk execute --start --arguments`):
# their commands are checked where that CLI is installed (tests/integration/project/test_control_service_docs.py).
CONTROL_SERVICE_PAGES = ("control-service.md", "control-service-operator.md")


def of_control_service(where: str) -> bool:
    return where.split(":", 1)[0].removeprefix("docs/") in CONTROL_SERVICE_PAGES


def commands() -> list[tuple[str, str]]:
    """(page:line, command) of every `vdk ...` a page shows: in code blocks and inline code."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in _FENCED.finditer(text):
            for i, line in enumerate(match.group(2).splitlines()):
                line = line.strip().removeprefix("$ ")
                if line.startswith("vdk "):
                    found.append((_where(page, text, match.start()) + f"+{i + 1}", line))
        for match in re.finditer(r"^    (?:\$ )?(vdk [^\n]+)$|`(vdk [^`]+)`", text, re.M):
            found.append((_where(page, text, match.start()), match.group(1) or match.group(2)))
    return found


def test_there_are_examples_to_check():
    assert len(config_blocks()) >= 4 and len(commands()) >= 50


@pytest.mark.parametrize(("where", "block"), config_blocks(), ids=[w for w, _ in config_blocks()])
def test_every_config_block_of_the_docs_is_loaded_by_the_real_loader(tmp_path, where, block):
    config = block if re.search(r"^\[job\]$", block, re.M) else f"[job]\ntype = ml-training\n\n{block}"
    job = write_job(tmp_path, "doc-example", config=config)
    load_job_spec(job)  # raises JobConfigError for anything the loader refuses, as for a user who copies it


def root_with(*plugins) -> click.Group:
    """vdk's command line as a user has it, with this plugin's verbs and options (and `plugins`')."""
    root = copy.copy(cli_entry.cli)
    root.commands = {}
    result = CliEntryBasedTestRunner(*plugins, ml_plugin).invoke(["--help"], cli=root)
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="module")
def root_command() -> click.Group:
    return root_with()


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}


PLUGIN_COMMANDS = [(w, c) for w, c in commands() if not of_control_service(w)]


@pytest.mark.parametrize(("where", "command"), PLUGIN_COMMANDS, ids=[w for w, _ in PLUGIN_COMMANDS])
def test_every_command_of_the_docs_exists_with_its_options(root_command, where, command):
    check_command(root_command, where, command)


def check_command(root_command: click.Group, where: str, command: str) -> None:
    """`command` exists in `root_command` with every option it is shown with."""
    text = command.split("#", 1)[0].replace("…", "").replace("...", "")
    try:
        words = shlex.split(text)[1:]
    except ValueError:
        words = text.split()[1:]
    global_options = _options(root_command)
    while words and words[0].startswith("-"):  # `vdk -v DEBUG run`
        option = words.pop(0).split("=", 1)[0]
        assert option in global_options, f"{where}: `{command}`: vdk has no option {option}"
        if words and not words[0].startswith("-"):
            words.pop(0)
    if not words or "/" in words[0]:
        return  # `vdk` alone, or several verbs at once (`vdk list/show/execute/delete`)
    verb = words[0]
    assert verb in root_command.commands, f"{where}: `{command}`: vdk has no command {verb!r}"
    params = {opt: p for p in root_command.commands[verb].params for opt in [*p.opts, *p.secondary_opts]}
    rest = iter(words[1:])
    for word in rest:
        if word.startswith("-") and len(word) > 1:
            option, has_value = word.split("=", 1)[0], "=" in word
            assert option in params, f"{where}: `{command}`: `vdk {verb}` has no option {option}"
            param = params[option]
            takes_value = isinstance(param, click.Option) and not param.is_flag and not param.count
            if takes_value and not has_value:
                next(rest, None)  # its value, which may start with `-` (`--args "--lr 1e-3"`)


def test_every_file_the_docs_name_is_in_the_repository():
    missing = []
    for page in PAGES:
        text = page.read_text()
        for token in re.findall(r"`([^`\s]+)`", text):
            path = token.rstrip(".,:;")
            if "<" in path or "/" not in path or path.startswith(("http", "/", "~", "$", ".venv")):
                continue
            if not re.search(r"\.(py|md|toml|cfg|ya?ml|txt|ini)$", path):
                continue
            candidates = [ROOT / path, PACKAGE / path, page.parent / path]
            if not any(c.exists() for c in candidates) and not list(PACKAGE.rglob(path)):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, f"the documentation names files that are not there: {missing}"


def python_blocks() -> list[tuple[str, str]]:
    """(page:line, code) of every python block that uses the plugin (README's training script does not)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in _FENCED.finditer(text):
            lang, body = match.groups()
            if lang == "python" and ("vdk.plugin.ml_training" in body or "api." in body):
                found.append((_where(page, text, match.start()), body))
    return found


@pytest.mark.parametrize(("where", "code"), python_blocks(), ids=[w for w, _ in python_blocks()])
def test_every_python_block_of_the_docs_names_what_the_plugin_has(where, code):
    # docs/python-api.md's blocks also run, in tests/integration/ops/test_python_api.py; here every page's block
    # is read: each import resolves and each `api.NAME` is a name of the front door
    import importlib

    from vdk.plugin.ml_training import api

    tree = ast.parse(code, where)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vdk.plugin.ml_training"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), (
                    f"{where}: {node.module} has no {alias.name}"
                )
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api":
            assert node.attr in api.__all__, f"{where}: the API has no {node.attr}"

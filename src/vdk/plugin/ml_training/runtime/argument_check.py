"""Whether a script accepts each of many argument lists, in one interpreter: `python -m
vdk.plugin.ml_training.runtime.argument_check RESULT.json -- ENTRYPOINT` with the lists as JSON in
VDK_ML_TRAINING_ARGUMENT_SETS (a sweep's trials: ops/sweep_smoke.py).

The script runs with the first list until it parses its arguments (argparse, or HfArgumentParser, which is
argparse): by then it has imported what it imports (torch, transformers). There, one child is forked per list,
and each parses its list with the script's own parser: accepted, or refused with argparse's message. Then the
script stops, before any training. A script that reaches an optimizer, or its end, without parsing arguments
is reported as such (it reads no command line to check). Standard library only; writer and reader of the result
here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

ARGUMENT_SETS = "VDK_ML_TRAINING_ARGUMENT_SETS"
PARSED = "parsed"  # the script parsed its command line: every list was checked
NO_PARSER = "no-parser"  # it trained (made an optimizer) or ended without parsing a command line
OWN_LIST = "own-list"  # it parsed a list of its own (parse_args([...])), not the command line
ERROR = "error"  # it failed before it parsed anything (its error is the smoke run's to report)


class _Done(SystemExit):
    def __init__(self, outcome: dict):
        super().__init__(0)
        self.outcome = outcome


def _check_all(parser: argparse.ArgumentParser, original, sets: list[list[str]], namespace, strict: bool) -> list[dict]:
    """Fork a child per argument list; each parses it with `parser` and exits 0 (accepted) or 2 (refused).
    `strict`: the script called parse_args (or HfArgumentParser's), which refuse arguments left over."""
    results: list[dict] = []
    children = []
    folder = tempfile.mkdtemp(prefix="vdk-argcheck-")
    sys.stdout.flush()
    sys.stderr.flush()
    for index, argv in enumerate(sets):
        path = os.path.join(folder, f"{index}.err")
        pid = os.fork()
        if pid == 0:  # the child: argparse's message goes to its file
            code = 0
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd, 2)
                os.dup2(fd, 1)
                _, extras = original(parser, argv, namespace)
                if strict and extras:
                    parser.error(f"unrecognized arguments: {' '.join(extras)}")
            except SystemExit as e:
                code = 0 if e.code in (None, 0) else 2
            except BaseException as e:  # noqa: BLE001 - a type= function that raised: refused
                sys.stderr.write(f"{type(e).__name__}: {e}\n")
                code = 2
            sys.stderr.flush()
            os._exit(code)
        children.append((index, pid, path))
    for index, pid, path in children:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                message = f.read().strip()
        except OSError:
            message = ""
        lines = [line for line in message.splitlines() if line.strip()]
        results.append({"index": index, "accepted": code == 0, "message": lines[-1] if lines else ""})
    return results


def run(entry: list[str], sets: list[list[str]]) -> dict:
    """Run the script (its first argument list) until it parses, check every list there; the outcome."""
    original = argparse.ArgumentParser.parse_known_args

    def check(parser, args, namespace, strict: bool):
        if args is not None:
            raise _Done({"status": OWN_LIST})
        strict = strict or type(parser).__name__ == "HfArgumentParser"  # it refuses what is left over too
        raise _Done({"status": PARSED, "results": _check_all(parser, original, sets, namespace, strict)})

    def parse_known_args(self, args=None, namespace=None):
        check(self, args, namespace, strict=False)

    def parse_args(self, args=None, namespace=None):
        check(self, args, namespace, strict=True)

    # Patched on the class for the rest of the process (the check is the process's only purpose).
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]
    from vdk.plugin.ml_training.runtime import post_import

    def no_training(torch: Any) -> None:
        def __init__(*args, **kwargs):
            raise _Done({"status": NO_PARSER, "why": "it made an optimizer without parsing a command line"})

        torch.optim.Optimizer.__init__ = __init__

    post_import.when_imported("torch", no_training)
    from vdk.plugin.ml_training.runtime.bootstrap import run_entrypoint

    try:
        run_entrypoint([*entry, *(sets[0] if sets else [])])
    except _Done as done:
        return done.outcome
    except SystemExit as e:
        if e.code in (None, 0):
            return {"status": NO_PARSER, "why": "it ended without parsing a command line"}
        return {"status": ERROR, "why": f"it exited with {e.code} before parsing its arguments"}
    except BaseException as e:  # noqa: BLE001 - whatever the script raised is the check's answer
        return {"status": ERROR, "why": f"{type(e).__name__}: {e}"}
    return {"status": NO_PARSER, "why": "it ended without parsing a command line"}


def read_result(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    result_path, entry = argv[0], argv[2:] if argv[1:2] == ["--"] else argv[1:]
    sets = json.loads(os.environ.get(ARGUMENT_SETS) or "[]")
    outcome = run(entry, sets)
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(outcome, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no teardown of what the script imported


if __name__ == "__main__":
    sys.exit(main())

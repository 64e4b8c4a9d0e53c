"""Whether a script accepts each of many argument lists, in one interpreter: `python -m
vdk.plugin.ml_training.runtime.argument_check RESULT.json LISTS.json -- ENTRYPOINT` with the lists as a JSON
array in the file LISTS.json (a sweep's trials: ops/sweep_smoke.py; a file, as any number of trials fits in one,
where an environment variable or the command line would hit the kernel's limits at a few hundred kilobytes).

The script runs with the first list until it parses its arguments (argparse, or HfArgumentParser, which is
argparse): by then it has imported what it imports (torch, transformers). There, one child is forked per list,
at most CHILDREN at a time (a sweep of thousands of trials never meets the limit of processes of the user), and
each parses its list with the script's own parser: accepted, or refused with argparse's message. Then the
script stops, before any training. A script that reaches an optimizer, or its end, without parsing arguments
is reported as such (it reads no command line to check). Standard library only; writer and reader of the result
here.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import tempfile
import time
from typing import Any

CHILDREN = 16  # children parsing at once: forks are quick, and the parse takes milliseconds
PARSED = "parsed"  # the script parsed its command line: every list was checked
NO_PARSER = "no-parser"  # it trained (made an optimizer) or ended without parsing a command line
OWN_LIST = "own-list"  # it parsed a list of its own (parse_args([...])), not the command line
ERROR = "error"  # it failed before it parsed anything (its error is the smoke run's to report)


class _Done(SystemExit):
    def __init__(self, outcome: dict):
        super().__init__(0)
        self.outcome = outcome


def _check_all(parser: argparse.ArgumentParser, original, sets: list[list[str]], namespace, strict: bool) -> list[dict]:
    """Fork a child per argument list, at most CHILDREN at a time; each parses its list with `parser` and exits 0
    (accepted) or 2 (refused). `strict`: the script called parse_args (or HfArgumentParser's), which refuse
    arguments left over."""
    results: list[dict] = []
    running: dict[int, tuple[int, str]] = {}  # pid -> (index, its message file)
    folder = tempfile.mkdtemp(prefix="vdk-argcheck-")
    sys.stdout.flush()
    sys.stderr.flush()

    def reap_one() -> None:
        pid, status = os.wait()
        if pid in running:
            index, path = running.pop(pid)
            results.append(_result(index, os.waitstatus_to_exitcode(status), path))

    for index, argv in enumerate(sets):
        while len(running) >= CHILDREN:
            reap_one()
        path = os.path.join(folder, f"{index}.err")
        pid = _fork(running, reap_one)
        if pid is None:  # not even one child could be made: the machine is out of processes
            results.append({"index": index, "accepted": None, "message": "no process could be started to check it"})
            continue
        if pid == 0:
            _child(parser, original, argv, namespace, strict, path)
        running[pid] = (index, path)
    while running:
        reap_one()
    results.sort(key=lambda r: r["index"])
    return results


def _fork(running: dict, reap_one) -> int | None:
    """os.fork(), waiting for a running child to end while the system has no process to spare (EAGAIN)."""
    for attempt in range(50):
        try:
            return os.fork()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ENOMEM):
                raise
            if running:
                reap_one()
            else:
                time.sleep(0.01 * (attempt + 1))
    return None


def _child(parser, original, argv: list[str], namespace, strict: bool, path: str) -> None:
    """In the child: argparse's message goes to its file; the exit status says accepted (0) or refused (2)."""
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
    try:
        sys.stderr.flush()
    finally:
        os._exit(code)


def _result(index: int, code: int, path: str) -> dict:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            message = f.read().strip()
        os.unlink(path)
    except OSError:
        message = ""
    lines = [line for line in message.splitlines() if line.strip()]
    return {"index": index, "accepted": code == 0, "message": lines[-1] if lines else ""}


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


def write_lists(path: str, lists: list[list[str]]) -> None:
    """The argument lists to check, as `main` reads them."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(lists, f)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    result_path, lists_path = argv[0], argv[1]
    entry = argv[3:] if argv[2:3] == ["--"] else argv[2:]
    with open(lists_path, encoding="utf-8") as f:
        sets = json.load(f)
    outcome = run(entry, sets)
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(outcome, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no teardown of what the script imported


if __name__ == "__main__":
    sys.exit(main())

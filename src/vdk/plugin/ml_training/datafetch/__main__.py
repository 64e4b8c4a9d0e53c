"""The data command: `python -m vdk.plugin.ml_training.datafetch MODE ...`.

In a pod (the init container, or for a TrainJob the step before torch's launcher):

    fetch --cache DIR --pins JSON [--claim NAME] [--manifest TARGET=DIR ...] [-- COMMAND ...]

fetches every pinned version into the cache DIR (the claim NAME), links each PATH to its version's directory
(where the pod cannot mount it there), prints the manifest of every mounted claim, then runs COMMAND in its
place, if given. Its output is the pod's log; a failure says what to do and exits 1.

On the deploying machine (local/data_tools.py runs these with the data tools), JSON in, JSON out:

    resolve --refs JSON                                   -> [pin, ...]
    sample --refs JSON --dest DIR --max-files N --max-bytes B -> [{"target", "path", "files", "bytes", ...}]
    full --refs JSON --cache DIR                          -> [{"target", "path", "pin"}]; progress on stderr

A problem of a source is `{"error": {"problem", "fix", "kind", "target"}}` on stdout, exit status 3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from vdk.plugin.ml_training.datafetch import fetch_step
from vdk.plugin.ml_training.datafetch.data_pins import decode_pins
from vdk.plugin.ml_training.datafetch.source_errors import SourceError


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, command = args[:at], args[at + 1 :]
    options = _parser().parse_args(args)
    if options.mode == "fetch":
        return _fetch(options, command)
    try:
        refs = json.loads(options.refs)
        if options.mode == "resolve":
            result: object = [pin.to_dict() for pin in fetch_step.resolve_all(refs)]
        elif options.mode == "sample":
            result = fetch_step.sample_all(refs, Path(options.dest), options.max_files, options.max_bytes)
        else:
            result = fetch_step.full_all(refs, Path(options.cache), _stderr, _progress)
    except SourceError as e:
        print(fetch_step.error_answer(e), flush=True)
        return fetch_step.SOURCE_PROBLEM
    print(json.dumps(result), flush=True)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vdk.plugin.ml_training.datafetch")
    modes = parser.add_subparsers(dest="mode", required=True)
    fetch = modes.add_parser("fetch", help="in a pod: fetch the pinned versions into the cache")
    fetch.add_argument("--cache", required=True)
    fetch.add_argument("--pins", default="[]")
    fetch.add_argument("--claim", default=None)
    fetch.add_argument("--manifest", action="append", default=[], metavar="TARGET=DIR")
    fetch.add_argument("--link", action="append", default=[], metavar="PATH=DIR")
    resolve = modes.add_parser("resolve", help="pin references to their versions (JSON)")
    resolve.add_argument("--refs", required=True)
    sample = modes.add_parser("sample", help="a bounded sample of each reference (JSON)")
    sample.add_argument("--refs", required=True)
    sample.add_argument("--dest", required=True)
    sample.add_argument("--max-files", type=int, required=True)
    sample.add_argument("--max-bytes", type=int, required=True)
    full = modes.add_parser("full", help="every reference resolved and fetched into a local cache (JSON)")
    full.add_argument("--refs", required=True)
    full.add_argument("--cache", required=True)
    return parser


def _fetch(options: argparse.Namespace, command: list[str]) -> int:
    said: list[str] = []

    def say(text: str) -> None:
        said.append(text)
        print(text, flush=True)

    try:
        pins = decode_pins(options.pins)
    except ValueError as e:
        print(f"{fetch_step.PREFIX}: --pins is not what `vdk deploy` renders ({e})", file=sys.stderr, flush=True)
        return 1
    claims = [tuple(m.split("=", 1)) for m in options.manifest]
    try:
        fetch_step.fetch_all(Path(options.cache), pins, options.claim, say)
        fetch_step.link_targets([tuple(m.split("=", 1)) for m in options.link])
        fetch_step.report_claims(claims, say)
    except SourceError as e:
        text = fetch_step.failure_line(e)
        print(text, file=sys.stderr, flush=True)
        fetch_step.termination_message([text])
        return 1
    if not command:
        fetch_step.termination_message([line for line in said if "manifest" in line] or said[-3:])
        return 0
    sys.stdout.flush()
    os.execvp(command[0], command)  # the training command, in this process: its signals, its exit status


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _progress(target: str, files: int, size: int, pin) -> None:
    print(fetch_step.progress_line(target, files, size, pin), file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())

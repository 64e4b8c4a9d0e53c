"""The guard of a container run: `python -m vdk.plugin.ml_training.local.container_guard STOP_JSON -- ENGINE run ...`.

It starts the engine's `run` (in its own process group: the guard's) and waits for it, with its exit code.
It holds the run's end of `vdk`'s lifeline (local/lifeline.py): when `vdk` is gone without stopping the
run (killed with SIGKILL), the engine's client would stay attached and the container would go on
training; the guard then runs the stop commands of STOP_JSON (`podman stop -t 5 NAME`, `podman rm -f
NAME`) and ends the client. Standard library only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from vdk.plugin.ml_training.local import lifeline

# How long each stop command may take (the engine's stop waits for its own grace period first).
STOP_COMMAND_SECONDS = 60


def main(argv: list[str]) -> int:
    split = argv.index("--")
    stop_commands: list[list[str]] = json.loads(argv[0])
    command = argv[split + 1 :]
    client = subprocess.Popen(command)  # stdio inherited: rank 0's output goes where vdk sent it

    def stop_commands_once() -> None:
        for stop_command in stop_commands:
            try:
                subprocess.run(
                    stop_command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=STOP_COMMAND_SECONDS,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired):
                pass

    def stop() -> None:
        stop_commands_once()
        if client.poll() is None:  # a client killed while it was creating the container may leave it behind
            client.kill()
            client.wait()
            stop_commands_once()

    lifeline.watch(stop)
    code = client.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))

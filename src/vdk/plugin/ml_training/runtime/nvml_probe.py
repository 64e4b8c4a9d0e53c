"""NVML out of the training process's way: the GPU sampler's calls into the driver run in a small process of their
own, `python -m vdk.plugin.ml_training.runtime.nvml_probe`, which the local rank 0 starts and talks to through
two pipes. A driver in trouble can hang an NVML call (nvmlInit on a wedged GPU) or crash inside it (a segfault in
libnvidia-ml): in that process, neither holds up nor ends the training. Rank 0 never waits on it longer than a
bound (OPEN_SECONDS for it to find the GPUs, CALL_SECONDS a reading), then stops it and says so once.

The lines, one JSON object each: the probe's first answers what it found — `{"devices": N, "model": ...}`, or
`{"none": why}` (no binding, no driver, no GPU: the sampler stays silent) —; then to each `read` line of rank 0
it answers the readings of every device (`{"readings": [[sm, occupancy, memory, power], ...]}`) or the NVML
error (`{"error": ...}`); `close` (or the end of its input: rank 0 is gone) ends it. Standard library only,
and nvidia-ml-py in the probe (runtime/nvml_devices.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from vdk.plugin.ml_training.runtime.nvml_devices import NoDevices
from vdk.plugin.ml_training.runtime.nvml_devices import Reading

OPEN_SECONDS = 60.0  # for the probe to start and find the GPUs (nvmlInit takes seconds on a big machine)
CALL_SECONDS = 10.0  # for one reading of every device (milliseconds when the driver is well)
MODULE = "vdk.plugin.ml_training.runtime.nvml_probe"


class ProbeFailed(Exception):
    """The probe did not answer in time, or ended: NVML hangs, or crashed in it. Its message says which;
    `nvml_error` is NVML's own error, when the probe relayed one (`NVMLError_GpuIsLost: GPU is lost`)."""

    def __init__(self, message: str, nvml_error: str | None = None):
        super().__init__(message)
        self.nvml_error = nvml_error


class ProbeDevices:
    """The node's GPUs read through the probe: what `nvml_devices.DeviceSet` offers the sampler (`read()`,
    `close()`, `model`, `profile`, `profiles`, `source`, `memory_total`, `devices`), each call bounded."""

    def __init__(self, process: subprocess.Popen, hello: dict, call_seconds: float | None = None):
        self._process = process
        self._call_seconds = CALL_SECONDS if call_seconds is None else call_seconds
        self.devices = [None] * int(hello["devices"])
        self.model = str(hello.get("model") or "")
        self.profile = hello.get("profile")
        self.profiles = tuple(tuple(p) for p in hello.get("profiles") or ())
        self.source = str(hello.get("source") or "none")
        self.memory_total = int(hello.get("memory_total") or 0)

    def read(self) -> list[Reading]:
        answer = _ask(self._process, "read", self._call_seconds, "a reading of the GPUs")
        if "error" in answer:
            raise ProbeFailed(f"NVML failed: {answer['error']}", nvml_error=str(answer["error"]))
        return [Reading(*values) for values in answer["readings"]]

    def close(self) -> None:
        stop(self._process)


def open_devices(limit: int | None = None, open_seconds: float = OPEN_SECONDS) -> ProbeDevices:
    """Start the probe and wait (at most `open_seconds`) for what it found: NoDevices when there is nothing to
    sample, ProbeFailed when it did not answer in time or ended (then it is stopped)."""
    argv = [sys.executable, "-m", MODULE] + ([str(limit)] if limit else [])
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True
    )
    try:
        hello = _answer(process, open_seconds, "finding the GPUs (nvmlInit and the devices' list)")
    except ProbeFailed:
        stop(process)
        raise
    if "none" in hello:
        stop(process)
        raise NoDevices(str(hello["none"]))
    return ProbeDevices(process, hello)


def _ask(process: subprocess.Popen, request: str, seconds: float, what: str) -> dict:
    try:
        assert process.stdin is not None
        process.stdin.write(request.encode() + b"\n")
        process.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        raise ProbeFailed(_ended(process, what)) from None
    return _answer(process, seconds, what)


def _answer(process: subprocess.Popen, seconds: float, what: str) -> dict:
    """The probe's next line, waited for at most `seconds`; ProbeFailed (the probe stopped) otherwise."""
    out = process.stdout
    assert out is not None
    deadline = time.monotonic() + seconds
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready = select.select([out], [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            stop(process)
            raise ProbeFailed(f"NVML did not answer within {seconds:.0f} s ({what}): a driver in trouble")
        byte = os.read(out.fileno(), 1)
        if not byte:
            raise ProbeFailed(_ended(process, what))
        line += byte
    try:
        return json.loads(line)
    except ValueError:
        stop(process)
        raise ProbeFailed(f"the NVML probe answered {line[:80]!r} ({what})") from None


def _ended(process: subprocess.Popen, what: str) -> str:
    try:
        code = process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        stop(process)
        return f"the NVML probe stopped answering ({what})"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"NVML crashed ({name}) in the probe process ({what})"
    return f"the NVML probe ended with exit code {code} ({what})"


def stop(process: subprocess.Popen) -> None:
    """End the probe: `close`, then SIGKILL if it does not end at once (an NVML call that hangs). A process stuck
    in the driver may outlive that; nothing waits for it."""
    if process.poll() is None:
        try:
            assert process.stdin is not None
            process.stdin.write(b"close\n")
            process.stdin.flush()
            process.wait(timeout=1)
        except (BrokenPipeError, OSError, ValueError, subprocess.TimeoutExpired):
            try:
                process.kill()
                process.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                pass
    for stream in (process.stdin, process.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


# --- the probe process ---------------------------------------------------------------------------------------


def _die_with_parent(period: float = 1.0) -> None:
    """The probe ends when rank 0 is gone, however it went, also while an NVML call hangs in the main thread
    (ctypes lets other threads run during a foreign call). Not PR_SET_PDEATHSIG: it fires when the thread that
    started the probe ends, and rank 0's sampler thread may end before rank 0 does."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(0)

    threading.Thread(target=watch, name="vdk-nvml-probe-parent", daemon=True).start()


def _say(data: dict) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _die_with_parent()
    from vdk.plugin.ml_training.runtime import nvml_devices

    try:
        devices: Any = nvml_devices.open_devices(int(argv[0]) if argv else None)
    except NoDevices as e:
        _say({"none": str(e)})
        return 0
    _say(
        {
            "devices": len(devices.devices),
            "model": devices.model,
            "profile": devices.profile,
            "profiles": [list(p) for p in devices.profiles],
            "source": devices.source,
            "memory_total": devices.memory_total,
        }
    )
    try:
        for line in sys.stdin:
            if line.strip() != "read":
                break
            try:
                readings = devices.read()
            except Exception as e:  # noqa: BLE001 - an NVML error: said to rank 0, which stops sampling
                _say({"error": f"{type(e).__name__}: {e}"})
                continue
            _say({"readings": [[r.sm, r.occupancy, r.memory, r.power] for r in readings]})
    finally:
        devices.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

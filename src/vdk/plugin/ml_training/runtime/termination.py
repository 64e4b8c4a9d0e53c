"""What a training process leaves in its Kubernetes container's termination message: the kubelet copies
the file /dev/termination-log (at most 4 KiB) into the pod's status when the container ends, where `vdk
show` and `vdk list --usage` read it without a log request.

A stalled rank leaves its stall line and its training thread's top frames (runtime/watchdog.py); rank 0
leaves its last progress line, which says how long the script ran after its last optimizer step
(runtime/progress_lines.py). Those modules read what they write; this one only writes. The first process of a
container to leave a message keeps it: a node's other ranks would only repeat or garble it.

Postscripts (`add`) describe the container rather than say how it ended — the GPU sampler's totals of the
node (runtime/gpu_lines.py) — and go after the message: a file that holds only postscripts has no message yet.
"""

from __future__ import annotations

import os

from vdk.plugin.ml_training.vocabulary import wire

PATH = wire.TERMINATION_LOG
# Another file instead (the container's terminationMessagePath, or a test's): set in the environment.
PATH_VARIABLE = "VDK_ML_TRAINING_TERMINATION_LOG"
MAX_BYTES = wire.TERMINATION_MAX_BYTES
# The lines a postscript starts with (runtime/gpu_lines.py's); they do not count as a message.
POSTSCRIPTS = (wire.mark(wire.GPU) + " ",)


def leave(text: str, path: str | None = None) -> bool:
    """Write `text` as the container's termination message, unless another process of the container did.
    Outside Kubernetes (no such file) nothing happens; the file is never created. Never raises."""
    try:
        fd = os.open(path or os.environ.get(PATH_VARIABLE) or PATH, os.O_RDWR)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size:
            kept = _read(fd)
            if any(line.strip() and not line.startswith(POSTSCRIPTS) for line in kept.splitlines()):
                return False
            data = text.encode("utf-8", "replace")[: MAX_BYTES - 1] + b"\n"
            postscripts = kept.encode("utf-8", "replace")
            if len(data) + len(postscripts) <= MAX_BYTES:
                data += postscripts
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, data)
            return True
        os.write(fd, text.encode("utf-8", "replace")[: MAX_BYTES - 1] + b"\n")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def add(text: str, path: str | None = None) -> bool:
    """Add a postscript line after whatever the message is, if it fits in the kubelet's 4 KiB (it keeps a
    file's end: a message pushed out of it would be lost). Like `leave`, never creates the file or raises."""
    data = text.strip().encode("utf-8", "replace") + b"\n"
    try:
        fd = os.open(path or os.environ.get(PATH_VARIABLE) or PATH, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size + len(data) > MAX_BYTES:
            return False
        os.write(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, MAX_BYTES * 4):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")

"""What a training process leaves in its Kubernetes container's termination message: the kubelet copies
the file /dev/termination-log (at most 4 KiB) into the pod's status when the container ends, where `vdk
show` and `vdk list --usage` read it without a log request.

A stalled rank leaves its stall line and its training thread's top frames (runtime/watchdog.py); rank 0
leaves its last progress line, which says how long the script ran after its last optimizer step
(runtime/progress_lines.py). Those modules read what they write; this one only writes. The first process of a
container to leave a message keeps it: a node's other ranks would only repeat or garble it.
"""

from __future__ import annotations

import os

PATH = "/dev/termination-log"
MAX_BYTES = 4096


def leave(text: str, path: str | None = None) -> bool:
    """Write `text` as the container's termination message, unless another process of the container did.
    Outside Kubernetes (no such file) nothing happens; the file is never created. Never raises."""
    try:
        fd = os.open(path or PATH, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size:
            return False
        os.write(fd, text.encode("utf-8", "replace")[: MAX_BYTES - 1] + b"\n")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)

"""The virtual GPUs on every thread of a rank, not only the one that started it.

torch keeps the device mode (runtime/device_mode.py) per thread, so a thread would see no GPU at all ("Cannot
access accelerator device when none is available"): every thread that `threading` starts (the code's own,
a DataLoader's pin-memory thread, a ThreadPoolExecutor's) enters it first, and so does every
`torch.distributed.rpc` call a rank runs for another (in RPC's own threads). As with CUDA, each thread has
its own current GPU, GPU 0 until it selects one (devices.py).
"""

from __future__ import annotations

import threading
from typing import Any

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.patching import Adaptations

RPC_MODULE = "torch.distributed.rpc.internal"


def install(a: Adaptations, mode: Any) -> None:
    """Threads started from now on, and RPC calls run for other ranks, enter `mode` (the device mode)."""
    _threads(a, mode)
    post_import.when_imported(RPC_MODULE, lambda module: _rpc_handlers(a, mode, module))


def _threads(a: Adaptations, mode: Any) -> None:
    if not hasattr(threading.Thread, "_bootstrap_inner"):  # CPython's: where a new thread starts running
        return

    def make(original):
        def _bootstrap_inner(thread: threading.Thread) -> None:
            enter(mode)
            original(thread)

        return _bootstrap_inner

    a.replace(threading.Thread, "_bootstrap_inner", make)


def _rpc_handlers(a: Adaptations, mode: Any, module: Any) -> None:
    """RPC runs a Python function sent by another rank in a thread of its C++ pool: in the device mode."""

    def make(original):
        def _run_function(python_udf: Any) -> Any:
            if not in_mode(mode):
                enter(mode)  # the pool's thread keeps it for the calls it runs later
            return original(python_udf)

        return _run_function

    a.replace(module, "_run_function", make)


def enter(mode: Any) -> None:
    """Enter `mode` for the rest of this thread's life (a thread's modes end with it)."""
    mode.__enter__()


def in_mode(mode: Any) -> bool:
    from torch.overrides import _get_current_function_mode_stack

    return any(m is mode for m in _get_current_function_mode_stack())

"""The machinery of patching a library in memory, shared by every stand-in module (cpu_shims.py,
virtual_gpu/, device_tracking.py, hf_shims.py, lightning_shims.py).

`Adaptations` replaces attributes (keeping the originals, so tests can uninstall them) and counts which
stand-ins the user's code needed, for the summary; `with_arguments` wraps a function so that a stand-in
edits its call's arguments by name; `moved` moves the tensors of nested inputs to a device. Standard
library only at import; `moved` imports torch when it is called.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any


class Adaptations:
    """Which stand-ins fired, and how often; plus the originals, so tests can uninstall them."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.observed: set[str] = set()  # what the code did that explains a failure, e.g. spawning no process
        self.spawned: list[int] = []  # the workers each mp.spawn / start_processes call started, in order
        # What the code asked for that the smoke run turned off (`report_to=wandb`, `push_to_hub`): the cluster
        # run meets it; each with the module it will import there (None: none).
        self.turned_off: dict[str, str | None] = {}
        self._originals: list[tuple[Any, str, Any]] = []
        self._mode: Any = None  # the device mode (device_tracking.DeviceTracker), left on uninstall

    def note(self, what: str) -> None:
        self.counts[what] += 1

    def observe(self, what: str) -> None:
        self.observed.add(what)

    def turn_off(self, what: str, needs: str | None = None) -> None:
        """The smoke run turned off `what`, which the cluster run will do (importing module `needs`)."""
        self.turned_off[what] = needs

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Set `owner.name` to `make(original)`; a missing attribute is left alone."""
        original = getattr(owner, name, None)
        if original is None:
            return
        replacement = make(original)
        if callable(replacement) and not isinstance(replacement, type):
            try:
                functools.update_wrapper(replacement, original)
            except (AttributeError, TypeError):
                pass
        self._originals.append((owner, name, original))
        setattr(owner, name, replacement)

    def exit_on_uninstall(self, mode: Any) -> None:
        """`mode` (the device mode, entered for the rest of the process) is left when they are uninstalled."""
        self._mode = mode

    def uninstall(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()


def with_arguments(original: Callable, change: Callable[[dict], None]) -> Callable:
    """A wrapper that binds the call to `original`'s signature, lets `change` edit the arguments
    by name (positional or keyword alike), and calls `original` with them."""
    signature = inspect.signature(original)

    def wrapper(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # let the original raise its own, familiar error
        change(bound.arguments)
        return original(*bound.args, **bound.kwargs)

    return wrapper


def moved(value: Any, device: Any) -> Any:
    """Every tensor in nested inputs moved to `device`, as DDP and DataParallel do with a forward's inputs."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, value)

"""Run a function right after a module has been imported by the user's code (a post-import hook), so
that adapting a library costs nothing when the script never imports it."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable

Hook = Callable[[object], None]


class _PostImportHooks(importlib.abc.MetaPathFinder):
    """Calls the hooks of module `name` once, right after its normal loader has executed it."""

    def __init__(self) -> None:
        self.hooks: dict[str, list[Hook]] = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookedLoader(spec.loader, self.hooks.pop(fullname))
                return spec
        return None


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader, hooks: list[Hook]):
        self.loader = loader
        self.hooks = hooks

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for hook in self.hooks:
            hook(module)

    def __getattr__(self, name):  # get_source, is_package, ... of the real loader
        return getattr(self.loader, name)


_finder: _PostImportHooks | None = None


def when_imported(name: str, hook: Hook) -> None:
    """`hook(module)` now if module `name` is imported already, else right after it is."""
    global _finder
    if name in sys.modules:
        hook(sys.modules[name])
        return
    if _finder is None or _finder not in sys.meta_path:
        _finder = _PostImportHooks()
        sys.meta_path.insert(0, _finder)
    _finder.hooks.setdefault(name, []).append(hook)

"""What one command's image work shares: one client per registry (the base image's, and the target's: the same
client when the base lives in the target registry), the base image resolved once (its manifest and config, pinned
by digest), and one temporary directory for the layers a build writes. `vdk deploy` opens one for its pre-flight
checks, its build and its push; a build alone (`build_and_push`) and a local container run open their own.

    with BuildSession(spec, "registry.example.com/ml") as session:
        base = session.base()            # one manifest request, whoever asks first (any thread)
        session.target.check_push(repo)  # the same client pushes later
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from pathlib import Path

from vdk.plugin.ml_training.image.base_manifest import BaseImage
from vdk.plugin.ml_training.image.base_manifest import resolve_base
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.reference import split_registry
from vdk.plugin.ml_training.image.registry import BASE
from vdk.plugin.ml_training.image.registry import TARGET
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.image.registry_timing import RetryPolicy
from vdk.plugin.ml_training.job import MLJobSpec


class BuildSession:
    """The registries of one command for `spec`'s image (`registry`: where it is pushed, host[/path]; None: nowhere,
    only the base is read), and what was read from them. A context manager: leaving it closes the clients and
    removes the temporary directory."""

    def __init__(
        self, spec: MLJobSpec, registry: str | None, progress: Progress | None = None, retry: RetryPolicy | None = None
    ):
        self.spec = spec
        host = split_registry(registry)[0] if registry else None
        self.same_registry = spec.base_reference.registry == host
        self._stack = contextlib.ExitStack()
        self.target: RegistryClient | None = None
        if host is not None:  # with the base in the target registry, the pushing client reads it too
            role = "" if self.same_registry else TARGET
            self.target = self._stack.enter_context(RegistryClient(host, progress, retry, role=role))
        self.base_client: RegistryClient = (
            self.target
            if self.same_registry and self.target is not None
            else self._stack.enter_context(RegistryClient(spec.base_reference.registry, progress, retry, role=BASE))
        )
        self._lock = threading.Lock()
        self._base: BaseImage | None = None
        self._base_error: BaseException | None = None
        self._tmp: Path | None = None

    def __enter__(self) -> BuildSession:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @property
    def clients(self) -> tuple[RegistryClient, ...]:
        """Every client of the session, each once."""
        return tuple({id(c): c for c in (self.target, self.base_client) if c is not None}.values())

    def report_to(self, progress: Progress) -> None:
        """From now, the clients' transfers and waits are shown through `progress` (the checks' are silent)."""
        for client in self.clients:
            client.report_to(progress)

    def base(self) -> BaseImage:
        """The base image's manifest and config, pinned by digest: read at the first call (one manifest request,
        and its config), the same value (or the same error) for every later call, from any thread."""
        with self._lock:
            if self._base is None and self._base_error is None:
                try:
                    self._base = resolve_base(self.base_client, self.spec.base_reference)
                except Exception as e:  # noqa: BLE001 - each caller gets the same error
                    self._base_error = e
            if self._base_error is not None:
                raise self._base_error
            assert self._base is not None
            return self._base

    @property
    def tmp(self) -> Path:
        """A temporary directory of the session's (the layers a build writes before they are pushed)."""
        with self._lock:
            if self._tmp is None:
                self._tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="vdk-ml-image-")))
            return self._tmp

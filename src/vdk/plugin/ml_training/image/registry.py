"""Talking to one OCI registry: python-dxf does the Registry HTTP API (blob HEAD/upload/mount/pull,
manifests, Basic and Bearer-token auth); this module adds what it leaves to its callers:
credentials from the Docker/podman config, timeouts and retries (registry_timing.py: bounded, and said
while they last), streaming bodies with progress, plain HTTP for loopback registries, and errors that say
what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar
from typing import cast

import requests
from dxf import DXF
from dxf import DXFBase
from dxf import exceptions as dxf_errors

from vdk.plugin.ml_training.image import credentials
from vdk.plugin.ml_training.image import registry_errors
from vdk.plugin.ml_training.image.build_errors import RegistryAuthError
from vdk.plugin.ml_training.image.build_errors import RegistryError
from vdk.plugin.ml_training.image.build_errors import RegistryUnreachableError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_progress import Transfer
from vdk.plugin.ml_training.image.reference import is_loopback
from vdk.plugin.ml_training.image.registry_timing import RetryPolicy
from vdk.plugin.ml_training.image.registry_timing import Waits
from vdk.plugin.ml_training.image.registry_timing import seconds
from vdk.plugin.ml_training.image.registry_timing import timed_out
from vdk.plugin.ml_training.image.registry_timing import unresolved_name
from vdk.plugin.ml_training.job.image_reference import api_host

T = TypeVar("T")

_CHUNK = 1 << 20
INSECURE_REGISTRIES_ENV = registry_errors.INSECURE_REGISTRIES_ENV

# What a registry is to the command that talks to it: says what to change when its name does not resolve.
BASE = registry_errors.BASE
TARGET = registry_errors.TARGET


class _Body:
    """An upload body read chunk by chunk, whose length requests can see (so it sends Content-Length)."""

    def __init__(self, chunks: Iterable[bytes], size: int, transfer: Transfer, alive: Callable[[int], None]):
        self.chunks, self.size, self.transfer, self.alive = chunks, size, transfer, alive

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.transfer.advance(len(chunk))
            self.alive(len(chunk))
            yield chunk


def file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def cert_dirs() -> list[Path]:
    """Where podman and Docker look for a registry's CA (`<dir>/<host:port>/ca.crt`)."""
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return [config_home / "containers" / "certs.d", Path("/etc/containers/certs.d"), Path("/etc/docker/certs.d")]


def _ca_bundle(host: str) -> str | bool:
    """A registry's own CA from a containers/Docker certs.d directory, else the default trust
    (which honours $REQUESTS_CA_BUNDLE)."""
    for root in cert_dirs():
        ca = root / host / "ca.crt"
        if ca.is_file():
            return str(ca)
    return True


def allows_plain_http(host: str) -> bool:
    """Loopback registries, and those listed in $VDK_ML_TRAINING_INSECURE_REGISTRIES (comma-separated
    host[:port]), may be reached over plain HTTP when they do not speak TLS."""
    listed = {h.strip() for h in os.environ.get(INSECURE_REGISTRIES_ENV, "").split(",") if h.strip()}
    return is_loopback(host) or host in listed


class RegistryClient:
    """One registry host. Use as a context manager (connections are pooled per repository)."""

    def __init__(
        self,
        registry: str,
        progress: Progress | None = None,
        retry: RetryPolicy | None = None,
        insecure: bool | None = None,
        role: str = "",
    ):
        self.registry = registry  # as users write it (docker.io for Docker Hub)
        self.host = api_host(registry)
        self.progress = progress or Progress()
        self.retry = retry or RetryPolicy.from_environment()
        self.role = role  # BASE, TARGET or both ("" also: a registry the job uses)
        self.deadline: float | None = None  # time.monotonic() after which no request starts (a push's)
        self._deadline_seconds = 0.0
        self._insecure = insecure
        self._repos: dict[tuple[str, int], DXF] = {}  # per repository and thread: sessions are not shared
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._lookups: dict[str, credentials.Lookup] = {}  # per repository: a login may be for one only
        self._waits = Waits(registry, self.retry, self.progress.stage)
        self._local = threading.local()  # the current request's sign of life, per thread
        self._stopped = threading.Event()  # set by `stop`: no request starts any more, none is retried
        self._stack.callback(self._waits.close)

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def report_to(self, progress: Progress) -> None:
        """From now, transfers and long waits are shown through `progress` (a client of a command's checks, silent,
        then of its build)."""
        self.progress = progress
        self._waits.say = progress.stage

    def stop(self) -> None:
        """From now, no request of this client starts and none is tried again (a signal stopped the command, or
        another blob's upload failed): the threads that use it end with their current request."""
        self._stopped.set()

    def start_deadline(self, budget: float) -> None:
        """From now, no request starts after `budget` seconds (a push's deadline: RetryPolicy.push_seconds)."""
        self._deadline_seconds = budget
        self.deadline = time.monotonic() + budget

    def _alive(self, nbytes: int) -> None:
        """Bytes of the current request moved: a sign of life (the silence allowed starts again)."""
        alive = getattr(self._local, "alive", None)
        if alive is not None:
            alive(nbytes)

    # --- connection -----------------------------------------------------------------------

    def _plain_http(self) -> bool:
        """Whether to speak plain HTTP: only to a registry that may (see `allows_plain_http`) and
        does not answer TLS (as Docker and podman decide for their insecure registries)."""
        if self._insecure is None:
            self._insecure = False
            if allows_plain_http(self.host):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # only the handshake matters here
                        requests.get(f"https://{self.host}/v2/", timeout=(self.retry.connect_seconds, 5), verify=False)
                except requests.exceptions.SSLError:
                    self._insecure = True
                except requests.exceptions.RequestException:
                    pass  # unreachable either way; the real request reports it
        return self._insecure

    def _repo(self, repository: str) -> DXF:
        key = (repository, threading.get_ident())
        with self._lock:
            if key not in self._repos:
                plain = self._plain_http()
                dxf = DXF(
                    self.host,
                    repository,
                    auth=self._authenticate,
                    insecure=plain,
                    tlsverify=True if plain else _ca_bundle(self.host),
                    timeout=self.retry.timeouts(),  # type: ignore[arg-type]  # requests' (connect, read) pair
                )
                self._repos[key] = self._stack.enter_context(dxf)
            return self._repos[key]

    def _credentials(self, repository: str) -> credentials.Lookup:
        with self._lock:
            if repository not in self._lookups:
                self._lookups[repository] = credentials.find_credentials(self.registry, repository)
            return self._lookups[repository]

    def _authenticate(self, dxf: DXFBase, response: requests.Response) -> None:
        repository = getattr(dxf, "_repo", "") or ""
        creds = self._credentials(repository).credentials
        try:
            if creds is not None:
                dxf.authenticate(creds.username, creds.password, response=response)
            else:
                dxf.authenticate(response=response)
        except dxf_errors.DXFAuthInsecureError:
            raise RegistryAuthError(
                f"{self.registry} asks for credentials over plain HTTP, which would send them unencrypted",
                f"serve the registry over HTTPS (its CA can go in /etc/containers/certs.d/{self.host}/ca.crt)",
            ) from None
        except dxf_errors.DXFUnauthorizedError:
            raise self._auth_error(repository) from None

    def _auth_error(self, repository: str, denied: bool = False, detail: str = "") -> RegistryAuthError:
        lookup = self._credentials(repository)
        login = f"podman login {self.registry}` (or `docker login {self.registry}`"
        notes = "".join(f"\n  note: {n}" for n in lookup.notes)
        if lookup.credentials is None:
            searched = ", ".join(lookup.searched) or ", ".join(str(p) for p in credentials.auth_files())
            return RegistryAuthError(
                f"{self.registry} requires credentials and none were found (looked in {searched}){notes}",
                f"log in with `{login})",
            )
        what = "may not do this" if denied else "were rejected"
        extra = f" ({detail})" if detail else ""
        return RegistryAuthError(
            f"the credentials for {self.registry} from {lookup.credentials.source} {what}{extra}{notes}",
            f"log in again with `{login})" + (", or ask for push access to this repository" if denied else ""),
        )

    # --- retries -------------------------------------------------------------------------

    def _call(
        self,
        repository: str,
        what: str,
        operation: Callable[[], T],
        on_retry: Callable[[], None] | None = None,
        upload_bytes: int = 0,
    ) -> T:
        """`operation` (requests of `repository`), tried again while a failure may pass and the policy allows
        (registry_timing.py); every failure an error that says what happened and what to do."""
        policy = self.retry
        limit = policy.answer_timeout(upload_bytes)
        started = time.monotonic()
        last: Exception | None = None
        attempts = no_answer = 0
        while True:
            if attempts:
                if not self._may_retry(attempts, no_answer, started, policy):
                    break
                self._stopped.wait(self._bounded(policy.delay(attempts - 1)))  # a signal ends it in the main thread
                if on_retry and not self._stopped.is_set():
                    on_retry()
            self._check_deadline(what)
            attempts += 1
            try:
                with self._waits.waiting(what, limit) as alive:
                    self._local.alive = alive
                    # requests' (connect, read) pair, which python-dxf passes on (it types a number)
                    self._repo(repository)._timeout = (policy.connect_seconds, max(1.0, self._bounded(limit)))  # type: ignore[assignment]
                    return operation()
            except RegistryError:
                raise
            except dxf_errors.DXFUnauthorizedError:
                raise self._auth_error(repository) from None
            except requests.HTTPError as e:
                status = e.response.status_code if e.response is not None else 0
                if status in (401, 403):
                    raise self._auth_error(
                        repository, denied=status == 403, detail=registry_errors.error_detail(e.response)
                    ) from None
                if status < 500 and status != 429:
                    error = RegistryError(
                        f"{self.registry} refused to {what}: HTTP {status} {registry_errors.error_detail(e.response)}",
                        "check the image name and your access to the repository",
                    )
                    error.status = status
                    raise error from None
                last = e
            except requests.exceptions.SSLError as e:
                raise registry_errors.tls_error(self.registry, self.host, e) from None
            except (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
                dxf_errors.DXFDigestMismatchError,
            ) as e:
                if unresolved_name(e) is not None:
                    raise registry_errors.name_error(self.registry, self.host, self.role, what) from None
                no_answer += timed_out(e)
                last = e
        took = time.monotonic() - started
        raise registry_errors.gave_up(self.registry, self.host, self.retry, what, last, attempts, no_answer, took)

    def _may_retry(self, attempts: int, no_answer: int, started: float, policy: RetryPolicy) -> bool:
        if attempts >= policy.attempts or (no_answer and no_answer >= policy.timeout_attempts):
            return False
        return time.monotonic() - started < policy.operation_seconds

    def _bounded(self, wait: float) -> float:
        """`wait`, but not past the push's deadline."""
        if self.deadline is None:
            return wait
        return max(0.0, min(wait, self.deadline - time.monotonic()))

    def _check_deadline(self, what: str) -> None:
        if self._stopped.is_set():
            raise RegistryUnreachableError(f"requests to {self.registry} were stopped before: {what}", "run it again")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise RegistryUnreachableError(
                f"the push to {self.registry} did not finish within its deadline ({seconds(self._deadline_seconds)}"
                f", from the bytes it moves); stopped before: {what}. Nothing was tagged",
                f"check the connection to {self.registry} (a slow link, a proxy), then deploy again: what was "
                "uploaded already is not sent again",
            )

    # --- operations ----------------------------------------------------------------------

    def _no_such_image(self, repository: str, ref: str) -> RegistryError:
        return RegistryError(
            f"{self.registry}/{repository}:{ref} does not exist",
            "check the base image name and tag (`podman search` or the registry's web UI)",
        )

    def get_manifest(self, repository: str, ref: str) -> tuple[bytes, str]:
        """The manifest (or index) bytes and their media type."""

        def fetch() -> tuple[bytes, str]:
            _, response = self._repo(repository).get_manifest_and_response(ref)
            return response.content, response.headers.get("Content-Type", "").split(";")[0].strip()

        try:
            data, media_type = self._call(repository, f"read manifest {repository}:{ref}", fetch)
        except RegistryError as e:
            if e.status == 404:
                raise self._no_such_image(repository, ref) from None
            raise
        if not media_type:
            media_type = json.loads(data).get("mediaType", "")
        return data, media_type

    def get_blob(self, repository: str, digest: str) -> bytes:
        def fetch() -> bytes:
            return b"".join(_chunks(self._repo(repository), digest))

        return self._call(repository, f"read blob {digest[:19]}", fetch)

    def blob_exists(self, repository: str, digest: str) -> bool:
        def head() -> bool:
            try:
                self._repo(repository).blob_size(digest)
                return True
            except requests.HTTPError as e:
                if e.response is not None and e.response.status_code == 404:
                    return False
                raise

        return self._call(repository, f"check blob {digest[:19]}", head)

    def mount(self, repository: str, digest: str, from_repository: str) -> bool:
        """Cross-repository mount (no bytes move). False if the registry would rather have an upload."""

        def mount() -> bool:
            try:
                self._repo(repository).mount_blob(from_repository, digest)
                return True
            except dxf_errors.DXFMountFailed:
                return False

        return self._call(repository, f"mount blob {digest[:19]} from {from_repository}", mount)

    def upload(
        self, repository: str, digest: str, size: int, chunks: Callable[[], Iterable[bytes]], label: str
    ) -> None:
        """Upload a blob, whose bytes `chunks()` yields afresh on every attempt."""
        transfer = self.progress.transfer(label, size)
        try:
            self._call(
                repository,
                f"upload {label}",
                lambda: self._repo(repository).push_blob(
                    data=_Body(chunks(), size, transfer, self._alive), digest=digest, check_exists=False
                ),
                on_retry=transfer.restart,
                upload_bytes=size,
            )
        finally:
            transfer.close()

    def check_push(self, repository: str) -> None:
        """Start a blob upload to `repository` and cancel it: the registry answers, takes the credentials
        and lets them push there, and nothing is stored (what `vdk deploy` checks before its smoke run)."""

        def start() -> str:
            return self._repo(repository)._request("post", "blobs/uploads/").headers.get("Location", "")

        location = self._call(repository, f"start an upload to {repository}", start)
        if location:
            try:  # cancelled: the registry forgets the empty upload (one that cannot cancel lets it expire)
                self._repo(repository)._base_request("delete", location)
            except (requests.RequestException, dxf_errors.DXFError):
                pass

    def read_blob(
        self, repository: str, digest: str, size: int, label: str, consume: Callable[[io.BufferedReader], T]
    ) -> T:
        """`consume(stream)` of a blob's bytes as they arrive, with progress; run again from the start
        when the connection drops (so it must start afresh each time). The digest is checked at the end."""
        transfer = self.progress.transfer(label, size, action=("reading", "read"))

        def attempt() -> T:
            def moved(nbytes: int) -> None:
                transfer.advance(nbytes)
                self._alive(nbytes)

            body = ChunkStream(_chunks(self._repo(repository), digest), moved)
            result = consume(io.BufferedReader(body, _CHUNK))
            body.drain()  # python-dxf compares the digest once the body is complete
            return result

        try:
            return self._call(repository, f"read {label}", attempt, on_retry=transfer.restart)
        finally:
            transfer.close()

    def open_blob(self, repository: str, digest: str) -> Iterable[bytes]:
        """A blob's bytes as they arrive (verified against the digest at the end)."""
        return _chunks(self._repo(repository), digest)

    def send(self, repository: str, what: str, method: str, path: str, **kwargs) -> requests.Response:
        """One request below /v2/<repository>/ (`manifests/<ref>`, `referrers/<digest>`) with the retries and
        errors of every other; an answer of 4xx raises RegistryError, its `.status` the code."""
        return self._call(repository, what, lambda: self._repo(repository)._request(method, path, **kwargs))

    def put_manifest(self, repository: str, tag: str, data: bytes, media_type: str) -> str:
        """Store a manifest under a tag; returns its digest, checked against the registry's."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        text = data.decode("ascii")  # canonical JSON is ASCII (json.dumps escapes the rest)
        assert json.loads(text)["mediaType"] == media_type
        self._call(
            repository, f"store manifest {repository}:{tag}", lambda: self._repo(repository).set_manifest(tag, text)
        )
        stored, _ = self._call(
            repository,
            f"check manifest {repository}@{digest[:19]}",
            lambda: self._repo(repository).head_manifest_and_response(digest),
        )
        if stored and stored != digest:
            raise RegistryError(
                f"{self.registry} stored manifest {stored}, not the {digest} that was sent",
                "the registry rewrote the manifest; push to a registry that keeps manifests as sent",
            )
        return digest


class ChunkStream(io.RawIOBase):
    """A file-like view of an iterable of byte chunks (an HTTP body), counting what was read."""

    def __init__(self, chunks: Iterable[bytes], on_read: Callable[[int], None] | None = None):
        self._chunks = iter(chunks)
        self._buffer = memoryview(b"")
        self._on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._buffer:
            try:
                self._buffer = memoryview(next(self._chunks))
            except StopIteration:
                return 0
            if self._on_read:
                self._on_read(len(self._buffer))
        n = min(len(buffer), len(self._buffer))
        buffer[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]  # a memoryview: no copy of the rest
        return n

    def drain(self) -> None:
        """Read to the end (so that a digest check at the end of the body runs)."""
        self._buffer = memoryview(b"")
        for chunk in self._chunks:
            if self._on_read:
                self._on_read(len(chunk))


def _chunks(repo: DXF, digest: str) -> Iterable[bytes]:
    """A blob's body in chunks as they arrive (python-dxf types the pair it returns with size=True too)."""
    return cast(Iterable[bytes], repo.pull_blob(digest, chunk_size=_CHUNK))

"""Talking to one OCI registry: python-dxf does the Registry HTTP API (blob HEAD/upload/mount/pull,
manifests, Basic and Bearer-token auth); this module adds what it leaves to its callers:
credentials from the Docker/podman config, retries with backoff, streaming bodies with progress,
plain HTTP for loopback registries, and errors that say what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import threading
import time
import warnings
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import requests
from dxf import DXF
from dxf import exceptions as dxf_errors

from vdk.plugin.ml_training.image import credentials
from vdk.plugin.ml_training.image.build_errors import RegistryAuthError
from vdk.plugin.ml_training.image.build_errors import RegistryError
from vdk.plugin.ml_training.image.build_errors import RegistryUnreachableError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_progress import Transfer
from vdk.plugin.ml_training.image.reference import api_host
from vdk.plugin.ml_training.image.reference import is_loopback

T = TypeVar("T")

_CHUNK = 1 << 20
INSECURE_REGISTRIES_ENV = "VDK_ML_TRAINING_INSECURE_REGISTRIES"
_TIMEOUT = (10, 300)  # connect, read (seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of requests that failed for a reason that may pass (5xx, 429, dropped connection)."""

    attempts: int = 5
    first_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.first_delay * (2**attempt))
        return base * (0.5 + random.random() / 2)  # jitter: parallel clients do not retry in step


class _Body:
    """An upload body read chunk by chunk, whose length requests can see (so it sends Content-Length)."""

    def __init__(self, chunks: Iterable[bytes], size: int, transfer: Transfer):
        self.chunks, self.size, self.transfer = chunks, size, transfer

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.transfer.advance(len(chunk))
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


def _error_detail(response: requests.Response | None) -> str:
    if response is None:
        return ""
    try:
        errors = response.json().get("errors") or []
        parts = [f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors if isinstance(e, dict)]
        if parts:
            return "; ".join(parts)
    except ValueError:
        pass
    return (response.text or "").strip()[:200] or (response.reason or "")


class RegistryClient:
    """One registry host. Use as a context manager (connections are pooled per repository)."""

    def __init__(
        self,
        registry: str,
        progress: Progress | None = None,
        retry: RetryPolicy | None = None,
        insecure: bool | None = None,
    ):
        self.registry = registry  # as users write it (docker.io for Docker Hub)
        self.host = api_host(registry)
        self.progress = progress or Progress()
        self.retry = retry or RetryPolicy()
        self._insecure = insecure
        self._repos: dict[tuple[str, int], DXF] = {}  # per repository and thread: sessions are not shared
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._lookups: dict[str, credentials.Lookup] = {}  # per repository: a login may be for one only

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

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
                        requests.get(f"https://{self.host}/v2/", timeout=5, verify=False)
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
                    timeout=_TIMEOUT,
                )
                self._repos[key] = self._stack.enter_context(dxf)
            return self._repos[key]

    def _credentials(self, repository: str) -> credentials.Lookup:
        with self._lock:
            if repository not in self._lookups:
                self._lookups[repository] = credentials.find_credentials(self.registry, repository)
            return self._lookups[repository]

    def _authenticate(self, dxf: DXF, response: requests.Response) -> None:
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
        self, repository: str, what: str, operation: Callable[[], T], on_retry: Callable[[], None] | None = None
    ) -> T:
        last: Exception | None = None
        for attempt in range(self.retry.attempts):
            if attempt:
                time.sleep(self.retry.delay(attempt - 1))
                if on_retry:
                    on_retry()
            try:
                return operation()
            except RegistryError:
                raise
            except dxf_errors.DXFUnauthorizedError:
                raise self._auth_error(repository) from None
            except requests.HTTPError as e:
                status = e.response.status_code if e.response is not None else 0
                if status in (401, 403):
                    raise self._auth_error(repository, denied=status == 403, detail=_error_detail(e.response)) from None
                if status >= 500 or status == 429:
                    last = e
                    continue
                error = RegistryError(
                    f"{self.registry} refused to {what}: HTTP {status} {_error_detail(e.response)}",
                    "check the image name and your access to the repository",
                )
                error.status = status
                raise error from None
            except requests.exceptions.SSLError as e:
                raise RegistryError(
                    f"cannot open a trusted TLS connection to {self.registry}: {_short(e)}",
                    f"if the registry has a private CA, put it in ~/.config/containers/certs.d/{self.host}/ca.crt "
                    f"(or /etc/containers/certs.d/{self.host}/ca.crt, or set REQUESTS_CA_BUNDLE); if it speaks "
                    f"plain HTTP only, add {self.host} to ${INSECURE_REGISTRIES_ENV}",
                ) from None
            except (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
                dxf_errors.DXFDigestMismatchError,
            ) as e:
                last = e
                continue
        if isinstance(last, requests.HTTPError):
            status = last.response.status_code if last.response is not None else "?"
            raise RegistryError(
                f"{self.registry} kept failing to {what} ({self.retry.attempts} attempts): "
                f"HTTP {status} {_error_detail(last.response)}",
                "the registry has a problem; try again later or ask its operators",
            )
        raise RegistryUnreachableError(
            f"cannot reach {self.registry} to {what} ({self.retry.attempts} attempts): {_short(last)}",
            f"check the address {self.registry}, your network/VPN/proxy, and that the registry is up",
        )

    # --- operations ----------------------------------------------------------------------

    def get_manifest(self, repository: str, ref: str) -> tuple[bytes, str]:
        """The manifest (or index) bytes and their media type."""

        def fetch() -> tuple[bytes, str]:
            _, response = self._repo(repository).get_manifest_and_response(ref)
            return response.content, response.headers.get("Content-Type", "").split(";")[0].strip()

        try:
            data, media_type = self._call(repository, f"read manifest {repository}:{ref}", fetch)
        except RegistryError as e:
            if getattr(e, "status", None) == 404:
                raise RegistryError(
                    f"{self.registry}/{repository}:{ref} does not exist",
                    "check the base image name and tag (`podman search` or the registry's web UI)",
                ) from None
            raise
        if not media_type:
            media_type = json.loads(data).get("mediaType", "")
        return data, media_type

    def get_blob(self, repository: str, digest: str) -> bytes:
        def fetch() -> bytes:
            return b"".join(self._repo(repository).pull_blob(digest, chunk_size=_CHUNK))

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
                    data=_Body(chunks(), size, transfer), digest=digest, check_exists=False
                ),
                on_retry=transfer.restart,
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
            body = ChunkStream(self._repo(repository).pull_blob(digest, chunk_size=_CHUNK), transfer.advance)
            result = consume(io.BufferedReader(body, _CHUNK))
            body.drain()  # python-dxf compares the digest once the body is complete
            return result

        try:
            return self._call(repository, f"read {label}", attempt, on_retry=transfer.restart)
        finally:
            transfer.close()

    def open_blob(self, repository: str, digest: str) -> Iterable[bytes]:
        """A blob's bytes as they arrive (verified against the digest at the end)."""
        return self._repo(repository).pull_blob(digest, chunk_size=_CHUNK)

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


def _short(error: Exception | None) -> str:
    """The gist of a requests/urllib3 error, without its nested reprs."""
    text = str(error) if error else "no answer"
    for gist in (
        "Connection refused",
        "CERTIFICATE_VERIFY_FAILED",
        "WRONG_VERSION_NUMBER",
        "Read timed out",
        "Connection aborted",
        "Connection reset",
        "Name or service not known",
        "timed out",
    ):
        if gist in text:
            return gist.lower() if gist[0].isupper() and "_" not in gist else gist
    return text[:300]


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

"""Serve an assembled job image to a local container engine, as a registry would.

`vdk run --container` needs the image `vdk deploy` would push in podman's or Docker's image store,
without a registry of the user's. Both engines pull from the registry API, and both skip the layers
they already have (by digest): so the image is served, read-only, from a short-lived loopback
endpoint in this process. The engine fetches the manifest and config, the job's own layers (files
on local disk) and, only once per base, the base's layers, which are streamed from the base's
registry. The bytes are those a push would upload, so the engine ends up with the very image, by
digest, that deploy pushes.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path

from vdk.plugin.ml_training.image.build import AssembledImage
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.image.registry import file_chunks
from vdk.plugin.ml_training.vocabulary.wire import PROJECT

REPOSITORY = PROJECT  # the path under which the served image is named: 127.0.0.1:<port>/<repository>/<job>
_MANIFEST_PATH = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<ref>[^/]+)$")
_BLOB_PATH = re.compile(r"^/v2/(?P<name>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")


class _Blobs:
    """What the endpoint can hand out, by digest."""

    def __init__(self, image: AssembledImage, base_registry: RegistryClient):
        self.image = image
        self.base_registry = base_registry
        self.files: dict[str, Path] = {blob.digest: blob.path for _, blob, _ in image.layers if blob.path}
        self.base_sizes: dict[str, int] = {d["digest"]: int(d.get("size", 0)) for d in image.base.layers}

    def size(self, digest: str) -> int | None:
        if digest == self.image.config_digest:
            return len(self.image.config)
        if digest in self.files:
            return self.files[digest].stat().st_size
        return self.base_sizes.get(digest)

    def chunks(self, digest: str) -> Iterator[bytes]:
        if digest == self.image.config_digest:
            yield self.image.config
        elif digest in self.files:
            yield from file_chunks(self.files[digest])
        else:  # a base layer the engine does not have yet
            yield from self.base_registry.open_blob(self.image.base.reference.repository, digest)


@contextmanager
def serve(image: AssembledImage, base_registry: RegistryClient, name: str) -> Iterator[str]:
    """Serve `image` on 127.0.0.1 until the block ends; yields its pull reference,
    `127.0.0.1:<port>/vdk-ml-training/<name>@sha256:...`."""
    blobs = _Blobs(image, base_registry)
    repository = f"{REPOSITORY}/{name}"
    tag = image.target.tag or "latest"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # the engine shows its own progress
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/v2", "/v2/"):
                return self._send(200, b"{}", "application/json", body)
            manifest = _MANIFEST_PATH.match(path)
            if manifest and manifest["name"] == repository and manifest["ref"] in (tag, image.digest):
                return self._send(200, image.manifest, image.media_type, body, image.digest)
            blob = _BLOB_PATH.match(path)
            if blob and blob["name"] == repository:
                size = blobs.size(blob["digest"])
                if size is not None:
                    return self._stream(blob["digest"], size, body)
            what = "BLOB_UNKNOWN" if blob else "MANIFEST_UNKNOWN" if manifest else "NAME_UNKNOWN"
            error = json.dumps({"errors": [{"code": what, "message": f"{path} is not served here"}]}).encode()
            self._send(404, error, "application/json", body)

        def _send(self, status: int, data: bytes, media_type: str, body: bool, digest: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", media_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _stream(self, digest: str, size: int, body: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if not body:
                return
            try:
                for chunk in blobs.chunks(digest):
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the engine gave up on this blob; it says why itself
            except Exception:  # noqa: BLE001 - a base layer that could not be read: the engine sees a short body
                self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="vdk-ml-image-server", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}/{repository}@{image.digest}"
    finally:
        server.shutdown()
        server.server_close()

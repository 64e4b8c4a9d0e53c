"""A registry with the OCI 1.1 referrers API, for the tests: a loopback proxy in front of the real registry (Debian's
docker-registry 2.8 has no such API) that adds it as the distribution spec says ("Pushing Manifests with Subject",
"Listing Referrers"): a manifest pushed with a `subject` is answered with the header `OCI-Subject: <subject
digest>`, and `GET /v2/<name>/referrers/<digest>` answers 200 with an image index of the descriptors of every
manifest whose subject is that digest (`mediaType`, `digest`, `size`, `artifactType`: the manifest's, else its
config's media type, and its `annotations`), Content-Type `application/vnd.oci.image.index.v1+json`, filtered by
`?artifactType=` with `OCI-Filters-Applied: artifactType`. Everything else is forwarded as it is."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs
from urllib.parse import urlsplit

from tests.support.loopback_http import serve
from tests.support.registry import forward
from tests.support.registry import request_body
from tests.support.registry import send_head

INDEX = "application/vnd.oci.image.index.v1+json"
_MANIFEST_PUT = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<ref>[^/]+)$")
_REFERRERS = re.compile(r"^/v2/(?P<name>.+)/referrers/(?P<digest>sha256:[0-9a-f]{64})$")


class ReferrersRegistry:
    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.referrers: dict[tuple[str, str], list[dict]] = {}  # (name, subject digest) -> descriptors
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self._lock = threading.Lock()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                send_head(self, status, headers, len(data))
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _handle(self):
                body = request_body(self)
                path = urlsplit(self.path).path
                with registry._lock:
                    registry.requests.append((self.command, path))
                listed = _REFERRERS.match(path)
                if listed and self.command == "GET":
                    wanted = parse_qs(urlsplit(self.path).query).get("artifactType")
                    index, filtered = registry.index(listed["name"], listed["digest"], wanted)
                    headers = [("Content-Type", INDEX)] + (
                        [("OCI-Filters-Applied", "artifactType")] if filtered else []
                    )
                    self._answer(200, headers, index)
                    return
                status, headers, data = forward(
                    registry.upstream_port, self.command, self.path, self.headers.items(), body
                )
                pushed = _MANIFEST_PUT.match(path)
                if pushed and self.command == "PUT" and status == 201:
                    subject = registry.note(pushed["name"], body)
                    if subject:
                        headers = [*headers, ("OCI-Subject", subject)]
                self._answer(status, headers, data)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = serve(Handler)
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"

    def note(self, name: str, body: bytes) -> str | None:
        """Keep the descriptor of a manifest pushed with a subject; its subject's digest (None: it has none)."""
        try:
            manifest = json.loads(body)
        except ValueError:
            return None
        subject = (manifest.get("subject") or {}).get("digest")
        if not subject:
            return None
        descriptor = {
            "mediaType": manifest.get("mediaType"),
            "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
            "size": len(body),
            "artifactType": manifest.get("artifactType") or (manifest.get("config") or {}).get("mediaType"),
            "annotations": manifest.get("annotations") or {},
        }
        with self._lock:
            entries = self.referrers.setdefault((name, subject), [])
            if all(e["digest"] != descriptor["digest"] for e in entries):
                entries.append(descriptor)
        return subject

    def index(self, name: str, digest: str, artifact_types: list[str] | None) -> tuple[bytes, bool]:
        with self._lock:
            entries = list(self.referrers.get((name, digest), []))
        if artifact_types:
            entries = [e for e in entries if e["artifactType"] in artifact_types]
        document = {"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}
        return json.dumps(document).encode(), bool(artifact_types)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

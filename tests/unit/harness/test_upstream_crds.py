"""The upstream CRDs the schema tests need: found where they are, downloaded into the cache when they are
nowhere (from a local HTTP server here), refused when they differ from their pins, and when they cannot
be had, a skip with one reason instead of an error."""

import hashlib
import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

import pytest

from tests.support import crd_schema
from tests.support import upstream_crds
from tests.support.upstream_crds import CRDChecksumMismatch
from tests.support.upstream_crds import CRDUnavailable
from tests.support.upstream_crds import Pin


def pin_of(filename: str, content: bytes, tag: str = "v9.9.9") -> Pin:
    return Pin(
        filename, "kubeflow/trainer", tag, f"manifests/base/crds/{filename}", hashlib.sha256(content).hexdigest()
    )


A = b"kind: CustomResourceDefinition\nmetadata: {name: as.example.org}\n"
B = b"kind: CustomResourceDefinition\nmetadata: {name: bs.example.org}\n"
PINS = (pin_of("a.yaml", A), pin_of("b.yaml", B))


class Upstream:
    """A loopback HTTP server that answers like raw.githubusercontent.com: /<repository>/<tag>/<path>."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.requests: list[str] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                upstream.requests.append(self.path)
                body = upstream.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream():
    servers = []

    def start(files: dict[str, bytes]) -> Upstream:
        servers.append(Upstream(files))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def path_of(pin: Pin) -> str:
    return f"/{pin.repository}/{pin.tag}/{pin.path}"


def test_the_first_place_that_has_a_file_wins_and_every_place_is_checked(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    second.mkdir()
    (second / "a.yaml").write_bytes(A)
    assert upstream_crds.locate(PINS[0], [first, second]) == second / "a.yaml"
    first.mkdir()
    (first / "a.yaml").write_bytes(B)
    with pytest.raises(CRDChecksumMismatch, match=r"first/a.yaml is not the pinned upstream a.yaml"):
        upstream_crds.locate(PINS[0], [first, second])
    with pytest.raises(CRDUnavailable):
        upstream_crds.locate(PINS[1], [first, second])


def test_the_configured_folder_comes_first(tmp_path, monkeypatch):
    monkeypatch.setenv(upstream_crds.CRD_DIR_ENV, str(tmp_path / "mine"))
    assert upstream_crds.places(tmp_path / "cache") == [
        tmp_path / "mine",
        upstream_crds.SHARED_DIR,
        tmp_path / "cache",
    ]
    monkeypatch.delenv(upstream_crds.CRD_DIR_ENV)
    assert upstream_crds.places(tmp_path / "cache") == [upstream_crds.SHARED_DIR, tmp_path / "cache"]


def test_without_the_crds_the_tests_that_need_them_skip_with_one_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(upstream_crds.CRD_DIR_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(upstream_crds, "SHARED_DIR", tmp_path / "no-shared")
    monkeypatch.setattr(upstream_crds, "CACHE_DIR", tmp_path / "no-cache")
    crd_schema.load_crd.cache_clear()
    try:
        reasons = set()
        for filename in (crd_schema.PYTORCHJOB_CRD, crd_schema.TRAINJOB_CRD):
            with pytest.raises(pytest.skip.Exception) as skipped:
                crd_schema.load_crd(filename)
            reasons.add(str(skipped.value))
        assert reasons == {upstream_crds.UNAVAILABLE}
        assert "make test" in upstream_crds.UNAVAILABLE and upstream_crds.CRD_DIR_ENV in upstream_crds.UNAVAILABLE
    finally:
        crd_schema.load_crd.cache_clear()


def test_the_pins_are_the_crds_the_schema_tests_read():
    assert set(upstream_crds.PINNED) == {crd_schema.PYTORCHJOB_CRD, crd_schema.TRAINJOB_CRD}
    for pin in upstream_crds.PINS:
        assert pin.url() == f"https://raw.githubusercontent.com/kubeflow/trainer/{pin.tag}/{pin.path}"
        assert len(pin.sha256) == 64

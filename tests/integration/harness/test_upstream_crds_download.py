"""Downloading the upstream CRDs the schema tests need (from a loopback HTTP server that answers like
raw.githubusercontent.com): files no place has are downloaded into the cache once, a download that
differs from its pin is an error and is not kept, and `make crds` fails on such a mismatch but goes on
offline, saying the tests will be skipped. (Where they are looked for: tests/unit/harness/.)"""

import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

import pytest

from tests.support import upstream_crds
from tests.support.made_up_crds import PINS
from tests.support.made_up_crds import A
from tests.support.made_up_crds import B
from tests.support.registry import free_port
from tests.support.upstream_crds import CRDChecksumMismatch
from tests.support.upstream_crds import Pin


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


def test_files_no_place_has_are_downloaded_into_the_cache_once(tmp_path, upstream):
    server = upstream({path_of(PINS[0]): A, path_of(PINS[1]): B})
    cache = tmp_path / "cache"
    report = upstream_crds.fetch(PINS, cache, server.base, search=[tmp_path / "nowhere", cache])
    assert [line.split(":")[0] for line in report] == ["a.yaml", "b.yaml"] and "downloaded" in report[0]
    assert (cache / "a.yaml").read_bytes() == A and (cache / "b.yaml").read_bytes() == B
    assert sorted(p.name for p in cache.iterdir()) == ["a.yaml", "b.yaml"]
    upstream_crds.fetch(PINS, cache, server.base, search=[cache])
    assert len(server.requests) == 2  # the second time, both were found in the cache


def test_a_download_that_differs_from_its_pin_is_an_error_and_is_not_kept(tmp_path, upstream, capsys):
    server = upstream({path_of(PINS[0]): A + b"# changed upstream\n", path_of(PINS[1]): B})
    cache = tmp_path / "cache"
    with pytest.raises(CRDChecksumMismatch, match=rf"{server.base}/kubeflow/trainer/v9.9.9/.*a.yaml is not the pinned"):
        upstream_crds.fetch(PINS, cache, server.base, search=[cache])
    assert not cache.exists() or list(cache.iterdir()) == []


def test_make_test_fails_on_a_checksum_mismatch_and_goes_on_offline(tmp_path, upstream, monkeypatch, capsys):
    monkeypatch.setattr(upstream_crds, "PINS", PINS)
    monkeypatch.setattr(upstream_crds, "SHARED_DIR", tmp_path / "no-shared")
    monkeypatch.delenv(upstream_crds.CRD_DIR_ENV, raising=False)
    server = upstream({path_of(PINS[0]): b"not it", path_of(PINS[1]): B})
    assert upstream_crds.main(server.base, tmp_path / "cache") == 1
    assert "error: " in capsys.readouterr().err

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: as offline as it gets on loopback
    assert upstream_crds.main(closed, tmp_path / "cache") == 0
    out = capsys.readouterr().out
    assert out.count("could not download") == 2 and "will be skipped" in out
    assert not (tmp_path / "cache" / "a.yaml").exists()

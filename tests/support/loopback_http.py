"""The tests' HTTP servers (the fake API server, the Control Service, the registry proxies, the token and status
servers) start the same way: on a free loopback port, each request in its own daemon thread, served from a daemon
thread, over TLS when given a certificate."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path


def serve(
    handler: type[BaseHTTPRequestHandler],
    *,
    tls: tuple[Path, Path] | None = None,
    server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer,
    poll_interval: float = 0.5,
) -> ThreadingHTTPServer:
    """A server of `handler` on 127.0.0.1 (its port: `server_address[1]`), already serving; `tls`: (certificate,
    key) files. Stop it with shutdown() and server_close()."""
    server = server_class(("127.0.0.1", 0), handler)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True).start()
    return server

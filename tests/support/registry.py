"""Real servers for the image tests: Debian's docker-registry, and a fault-injecting loopback proxy."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from dataclasses import field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import requests

from tests.support.loopback_http import serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have_registry() -> bool:
    return shutil.which("docker-registry") is not None


class Registry:
    """`docker-registry serve CONFIG` on a free 127.0.0.1 port with storage in `root`."""

    def __init__(
        self,
        root: Path,
        htpasswd: Path | None = None,
        tls: tuple[Path, Path] | None = None,
        token: TokenServer | None = None,
    ):
        self.root = root
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.tls = tls
        root.mkdir(parents=True, exist_ok=True)
        config = [
            "version: 0.1",
            "log:",
            "  level: error",
            "  accesslog:",
            "    disabled: true",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {root / 'data'}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: {self.host}",
            "  secret: test-secret",
        ]
        if tls:
            config += ["  tls:", f"    certificate: {tls[0]}", f"    key: {tls[1]}"]
        if htpasswd:
            config += ["auth:", "  htpasswd:", "    realm: test-registry", f"    path: {htpasswd}"]
        if token:
            config += [
                "auth:",
                "  token:",
                f"    realm: {token.realm}",
                f"    service: {token.service}",
                f"    issuer: {token.issuer}",
                f"    rootcertbundle: {tls[0] if tls else ''}",
            ]
        self.config = root / "config.yml"
        self.config.write_text("\n".join(config) + "\n")
        self.log = open(root / "registry.log", "wb")
        self.process = subprocess.Popen(
            ["docker-registry", "serve", str(self.config)], stdout=self.log, stderr=subprocess.STDOUT
        )
        self._wait_ready()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {(self.root / 'registry.log').read_text()}")
            try:
                requests.get(f"{self.url}/v2/", timeout=1, verify=str(self.tls[0]) if self.tls else True)
                return
            except requests.RequestException:
                time.sleep(0.05)
        raise RuntimeError("docker-registry did not start within 20 s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def request_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The body of the request `handler` is reading: by its Content-Length, or its chunks (a chunked upload)."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        data = b""
        while True:
            size = int(handler.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                handler.rfile.readline()
                return data
            data += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def forward(port: int, method: str, path: str, headers, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """A request sent on to the registry on 127.0.0.1:`port` as it came (its body whole, no longer chunked):
    the registry's status, headers and body."""
    upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    sent = {k: v for k, v in headers if k.lower() not in ("transfer-encoding", "content-length")}
    if body or method in ("PUT", "POST", "PATCH"):
        sent["Content-Length"] = str(len(body))
    upstream.request(method, path, body=body, headers=sent)
    response = upstream.getresponse()
    data = response.read()
    upstream.close()
    return response.status, response.getheaders(), data


def send_head(handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], length: int) -> None:
    """An answer's status and headers (a registry's, less those of its own connection) for a body of `length`."""
    handler.send_response(status)
    for key, value in headers:
        if key.lower() not in ("transfer-encoding", "content-length", "connection"):
            handler.send_header(key, value)
    handler.send_header("Content-Length", str(length))
    handler.end_headers()


@dataclass
class Fault:
    """Fail the next `times` requests whose method and path match: with a 500, or by dropping the
    connection (`drop`: no answer; `drop-body`: headers and half the body, then gone), or by never answering
    (`hang`: the connection stays open and silent), with a 401 that asks for credentials (`401`), or late
    (`slow`: the registry's answer, `seconds` after the request)."""

    method: str
    path: str  # regular expression, searched in the request path
    action: str  # "500", "drop", "drop-body", "hang", "401" or "slow"
    times: int = 1
    hits: int = field(default=0)
    seconds: float = 0.0  # how late a `slow` answer comes


class FaultProxy:
    """A loopback HTTP proxy in front of a registry that injects faults, then forwards faithfully; it logs every
    request (`log`, `requests`), so a test counts what a command asked of the registry (with no fault: a counting
    proxy).

    The Host header is kept, so the registry's upload Locations point back at the proxy."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str, int]] = []  # (method, path, status) of every request; -1: not answered
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _handle(self):
                body = request_body(self)
                fault, late = proxy._take(self.command, self.path)
                if fault == "hang":
                    proxy._record(self.command, self.path, -1)
                    proxy._stopped.wait()  # accepted, read, and never answered
                    self.close_connection = True
                    return
                if fault == "slow":
                    proxy._stopped.wait(late)
                if fault == "401":
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="injected"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    proxy._record(self.command, self.path, 401)
                    return
                if fault == "500":
                    payload = b'{"errors":[{"code":"UNKNOWN","message":"injected failure"}]}'
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    proxy._record(self.command, self.path, 500)
                    return
                if fault == "drop":
                    proxy._record(self.command, self.path, 0)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, headers, data = forward(
                    proxy.upstream_port, self.command, self.path, self.headers.items(), body
                )
                proxy._record(self.command, self.path, status)
                send_head(self, status, headers, len(data))
                if self.command == "HEAD":
                    return
                if fault == "drop-body":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = serve(Handler)
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"

    def requests(self, method: str | None = None, path: str = "") -> list[tuple[str, str, int]]:
        """The requests logged so far whose method is `method` (None: any) and whose path `path` (a regular
        expression) is found in."""
        with self._lock:
            return [r for r in self.log if (method is None or r[0] == method) and re.search(path, r[1])]

    def _take(self, method: str, path: str) -> tuple[str | None, float]:
        with self._lock:
            for fault in self.faults:
                if fault.hits < fault.times and fault.method == method and re.search(fault.path, path):
                    fault.hits += 1
                    return fault.action, fault.seconds
        return None, 0.0

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.log.append((method, path, status))

    def stop(self) -> None:
        self._stopped.set()
        self.server.shutdown()
        self.server.server_close()


def self_signed_cert(directory: Path, ip: str = "127.0.0.1") -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={ip}",
            "-addext",
            f"subjectAltName=IP:{ip}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def podman_command(root: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of podman with its own storage under `root` (vfs, runc):
    no daemon, nothing shared with the host."""
    argv = [
        "podman",
        "--root",
        str(root / "storage"),
        "--runroot",
        str(root / "run"),
        "--tmpdir",  # else root's podmans share /run/libpod, which `system reset` of any of them deletes
        str(root / "tmp"),
        "--storage-driver",
        "vfs",
        "--runtime",
        "runc",
        "--events-backend",
        "file",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_CONFIG", "REGISTRY_AUTH_FILE", "XDG_CONFIG_HOME")}
    env.update(XDG_RUNTIME_DIR=str(root / "xdg"), HOME=str(root))
    (root / "xdg").mkdir(parents=True, exist_ok=True)
    return argv, env


def podman(root: Path, *args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    """podman with its own storage under `root` (vfs, runc): no daemon, nothing shared with the host."""
    argv, env = podman_command(root, *args)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def _b64url(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """A Docker-registry token service (the bearer-token flow of Docker Hub, GHCR, Harbor...) over
    HTTPS: checks Basic credentials, grants what each scope asks for, and signs an RS256 JWT with
    the test key (openssl does the signing), the certificate in its `x5c` header."""

    def __init__(
        self, cert: Path, key: Path, users: dict[str, str], issuer: str = "test-issuer", service: str = "test-registry"
    ):
        import base64
        import json
        import urllib.parse
        import uuid

        self.issuer, self.service = issuer, service
        self.requests: list[tuple[str | None, list[str]]] = []  # (user, scopes) of every token request
        der = "".join(line for line in cert.read_text().splitlines() if "-----" not in line)
        header = _b64url(json.dumps({"alg": "RS256", "typ": "JWT", "x5c": [der]}).encode())
        server_state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                scopes = [s for value in query.get("scope", []) for s in value.split(" ")]
                user = None
                auth = self.headers.get("Authorization", "")
                if auth.startswith("Basic "):
                    name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    if users.get(name) != password:
                        server_state.requests.append((name, scopes))
                        self.send_response(401)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    user = name
                server_state.requests.append((user, scopes))
                access = []
                for scope in scopes:
                    kind, _, rest = scope.partition(":")
                    name, _, actions = rest.rpartition(":")
                    granted = actions.split(",") if user else []  # anonymous users get nothing
                    access.append({"type": kind, "name": name, "actions": granted})
                now = int(time.time())
                claims = {
                    "iss": issuer,
                    "sub": user or "",
                    "aud": service,
                    "exp": now + 300,
                    "nbf": now - 10,
                    "iat": now,
                    "jti": uuid.uuid4().hex,
                    "access": access,
                }
                signing_input = f"{header}.{_b64url(json.dumps(claims).encode())}"
                signature = subprocess.run(
                    ["openssl", "dgst", "-sha256", "-sign", str(key)],
                    input=signing_input.encode(),
                    capture_output=True,
                    check=True,
                ).stdout
                body = json.dumps({"token": f"{signing_input}.{_b64url(signature)}", "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = serve(Handler, tls=(cert, key))
        self.port = self.server.server_address[1]
        self.realm = f"https://127.0.0.1:{self.port}/token"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""Kubeflow Trainer's status server for the tests: the endpoint a TrainJob's pods post their progress to when
the `TrainJobStatus` feature gate is on, over TLS with a CA and a certificate made here (openssl), and the
environment and files the controller gives the trainer containers.

It behaves as kubeflow/trainer's pkg/statusserver (v2.3.0: server.go, auth.go, middleware.go, utils.go):
- one route, `POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status`; any other
  method or path is 404;
- a body over 64 KiB is 413;
- `Authorization: Bearer <token>` (the scheme in any case): a token it issued (`token()`, `rotate_token()`), not
  revoked or expired, whose audience is the TrainJob's status path without `/apis` and whose
  `kubernetes.io.namespace` claim is the TrainJob's namespace (the real server verifies a projected service
  account token through the cluster's OIDC issuer; an HMAC stands in for that signature here); else 403;
- the body decoded as Go decodes it into the API types: `progressPercentage` and `estimatedRemainingSeconds`
  must be JSON integers (a float such as 12.5 or 12.0 fails the decode), then the payload's `trainerStatus` is
  checked against the upstream CRD's schema (tests/support/crd_schema.py: types, int32 ranges, lengths,
  `lastUpdatedTime` required by its CEL rule); any failure is 422;
- 200 with the request echoed; a payload without `trainerStatus` is 200 and changes nothing;
- errors are `metav1.Status` bodies (`{"kind": "Status", "status": "Failure", "message", "reason", "code"}`).

Each post is recorded (`posts`); an accepted `trainerStatus` is handed to `on_accept` (a test wires it to the
fake API server's TrainJob, as the real server applies it). `answer` forces an answer (a 403, a 500) and `delay`
holds every answer that long (a server that does not answer in time).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path

from tests.support import crd_schema
from tests.support.fake_apiserver import status as status_body
from tests.support.loopback_http import serve

# Trainer's webhook Service in its namespace, which also serves the status server (CertManagement.WebhookServiceName).
SERVICE_HOST = "kubeflow-trainer-controller-manager.kubeflow-system.svc"
# The projected volume the TrainJobStatus plugin mounts (trainjobstatus.go): the token and the CA, both files.
SECRETS_DIR = "/var/run/secrets/kubeflow/trainer"
BODY_LIMIT = 1 << 16
INT32_FIELDS = ("progressPercentage", "estimatedRemainingSeconds")
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key): a CA, and a certificate it signs for the Service's name,
    localhost and 127.0.0.1, with the extensions a strict verifier (Python 3.13's default) wants."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_extensions = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    _openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=test-trainer-ca", "-keyout", ca_key, "-out", ca_cert,
             *ca_extensions)  # fmt: skip
    _openssl("req", *ec, "-subj", f"/CN={SERVICE_HOST}", "-keyout", key, "-out", csr)
    extensions = directory / "server.ext"
    extensions.write_text(
        f"subjectAltName=DNS:{SERVICE_HOST},DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
             "-out", cert, "-extfile", extensions)  # fmt: skip
    return ca_cert, cert, key


def _openssl(*args) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Post:
    """One request the server answered."""

    at: float  # time.monotonic() when it arrived
    code: int
    payload: dict | None  # the decoded body (None: not JSON)
    token: str | None  # the bearer token it carried


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A client that gave up before the answer (its timeout, the tests' delayed answers) is no error here."""


class TrainerStatusServer:
    """The status server of one TrainJob (`namespace`/`trainjob`), started on a loopback port."""

    def __init__(
        self,
        tls: tuple[Path, Path, Path],
        files: Path,
        namespace: str = "ml",
        trainjob: str = "run",
        on_accept: Callable[[dict], None] | None = None,
    ):
        self.ca_cert, cert, key = tls
        self.namespace, self.trainjob = namespace, trainjob
        self.path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{trainjob}/status"
        self.audience = self.path.removeprefix("/apis/")
        self.on_accept = on_accept
        self.schema = crd_schema.trainer_status_schema()  # skips the test here when the CRD is not available
        self.posts: list[Post] = []
        self.answer: tuple[int, str] | None = None  # (code, reason) to give instead of judging the post
        self.delay = 0.0
        self._secret = secrets.token_bytes(32)
        self._issued: set[str] = set()
        self._lock = threading.Lock()
        # what the pod's projected volume holds: the token and the CA (re-written as the kubelet rotates them)
        self.files = files
        files.mkdir(parents=True, exist_ok=True)
        (files / "ca.crt").write_bytes(self.ca_cert.read_bytes())
        self.rotate_token()
        server_state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                server_state._handle(self)

            def do_GET(self):
                server_state._reply(self, 404, "NotFound", "404 page not found", None, None)

            do_PUT = do_PATCH = do_DELETE = do_GET

        self.server = serve(Handler, tls=(cert, key), server_class=_QuietServer)
        self.port = self.server.server_address[1]

    # --- what the controller gives the pods --------------------------------------------------------------

    def url(self, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{self.path}"

    def env(self, host: str = "127.0.0.1", files: str | None = None) -> dict[str, str]:
        """The three variables the TrainJobStatus plugin injects; `files`: where the pod sees the projected volume."""
        where = files or str(self.files)
        return {
            "KUBEFLOW_TRAINER_SERVER_URL": self.url(host),
            "KUBEFLOW_TRAINER_SERVER_CA_CERT": f"{where}/ca.crt",
            "KUBEFLOW_TRAINER_SERVER_TOKEN": f"{where}/token",
        }

    def issue(self, audience: str | None = None, namespace: str | None = None, lifetime: int = 3600) -> str:
        """A token as the kubelet projects one for the pod: a JWT for the TrainJob's status audience."""
        now = int(time.time())
        claims = {
            "aud": [audience or self.audience],
            "exp": now + lifetime,
            "iat": now,
            "iss": "https://kubernetes.default.svc",
            "kubernetes.io": {"namespace": namespace or self.namespace, "serviceaccount": {"name": "default"}},
            "sub": f"system:serviceaccount:{namespace or self.namespace}:default",
        }
        signing = f"{_b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = hmac.new(self._secret, signing.encode(), hashlib.sha256).digest()
        token = f"{signing}.{_b64(signature)}"
        with self._lock:
            self._issued.add(token)
        return token

    def rotate_token(self) -> str:
        """The kubelet's rotation: a new token in the file, and the one before it no longer valid."""
        token = self.issue()
        with self._lock:
            self._issued = {token}
        (self.files / "token").write_text(token)
        return token

    def token(self) -> str:
        return (self.files / "token").read_text()

    def accepted(self) -> list[dict]:
        """The trainerStatus of every post answered 200, in order."""
        with self._lock:
            return [p.payload["trainerStatus"] for p in self.posts if p.code == 200 and "trainerStatus" in p.payload]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- the server --------------------------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        if request.path != self.path:
            return self._reply(request, 404, "NotFound", "404 page not found", None, None)
        length = int(request.headers.get("Content-Length") or 0)
        if length > BODY_LIMIT:
            return self._reply(request, 413, "RequestEntityTooLarge", "Request entity too large", None, None)
        body = request.rfile.read(length)
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        token = self._bearer(request.headers.get("Authorization") or "")
        if self.delay:
            time.sleep(self.delay)
        if self.answer is not None:
            code, reason = self.answer
            return self._reply(request, code, reason, reason, payload, token)
        if token is None or not self._valid(token):
            return self._reply(request, 403, "Forbidden", "Forbidden", payload, token)
        problem = self._invalid(payload)
        if problem:
            return self._reply(request, 422, "Invalid", f"Invalid payload: {problem}", payload, token)
        self._record(200, payload, token)
        if self.on_accept is not None and "trainerStatus" in payload:
            self.on_accept(payload["trainerStatus"])
        echo = json.dumps(payload).encode()
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(echo)))
        request.end_headers()
        request.wfile.write(echo)

    @staticmethod
    def _bearer(header: str) -> str | None:
        scheme, _, token = header.strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None

    def _valid(self, token: str) -> bool:
        with self._lock:
            if token not in self._issued:
                return False
        signing, _, signature = token.rpartition(".")
        expected = hmac.new(self._secret, signing.encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(_unb64(signature), expected):
            return False
        claims = json.loads(_unb64(signing.split(".")[1]))
        return (
            self.audience in claims.get("aud", [])
            and claims.get("kubernetes.io", {}).get("namespace") == self.namespace
            and claims.get("exp", 0) > time.time()
        )

    def _invalid(self, payload) -> str | None:
        """Why Go's decode into the API types or the CRD's schema refuses the payload; None when it takes it."""
        if not isinstance(payload, dict):
            return "not a JSON object"
        status = payload.get("trainerStatus")
        if status is None:
            return None
        if not isinstance(status, dict):
            return "trainerStatus is not an object"
        for name in INT32_FIELDS:  # json.Unmarshal into *int32: a number with a fraction or exponent fails
            if name in status and (isinstance(status[name], bool) or not isinstance(status[name], int)):
                return f"cannot unmarshal {json.dumps(status[name])} into trainerStatus.{name} of type int32"
        updated = status.get("lastUpdatedTime")
        if isinstance(updated, str) and not RFC3339.fullmatch(updated):  # metav1.Time: time.Parse(RFC3339)
            return f"parsing time {json.dumps(updated)} as RFC 3339"
        errors = self.schema.errors(status)
        return "; ".join(map(str, errors)) or None

    def _record(self, code: int, payload, token: str | None) -> None:
        with self._lock:
            self.posts.append(Post(time.monotonic(), code, payload, token))

    def _reply(self, request, code: int, reason: str, message: str, payload, token: str | None) -> None:
        self._record(code, payload, token)
        body = json.dumps(status_body(code, reason, message)).encode()
        request.send_response(code)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

"""A real S3 API on loopback for the data tests: moto in server mode (`moto_server`), started in an environment
of its own through uv (moto needs botocore, which wants python-dateutil<3; the test environment's kubernetes
client wants >=3, so they cannot share one; the plugin's data tools run apart for the same reason). Its
requirement is S3_REQUIREMENTS: the test dependency `moto[server]`.

Buckets and objects are made with plain HTTP requests (moto does not check signatures): `put` returns the
object's VersionId in a versioned bucket. What the plugin does goes through boto3, as for a user."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

S3_REQUIREMENTS = ("moto[server]>=5,<6",)
ACCESS_KEY = "AKIDTESTDATATOOLS"  # moto takes any key unless asked to check them
SECRET_KEY = "test-secret-key"
_OWNER = {
    "Authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def uv() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


@dataclass
class S3Store:
    url: str
    process: subprocess.Popen

    def env(self) -> dict[str, str]:
        """What a job's [ml-training.env] and secrets give boto3 to reach this store."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def _request(self, method: str, path: str, data: bytes | str | None = None) -> requests.Response:
        # moto does not check the signature, but takes the account from the key id: the owner's requests
        answer = requests.request(method, f"{self.url}/{path}", data=data, headers=_OWNER, timeout=30)
        answer.raise_for_status()
        return answer

    def create_bucket(self, bucket: str, versioned: bool = False) -> None:
        self._request("PUT", bucket)
        if versioned:
            body = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>"
            self._request("PUT", f"{bucket}?versioning", body)

    def put(self, bucket: str, key: str, data: bytes) -> str | None:
        """The object written; its VersionId in a versioned bucket."""
        return self._request("PUT", f"{bucket}/{key}", data).headers.get("x-amz-version-id")

    def delete(self, bucket: str, key: str) -> None:
        self._request("DELETE", f"{bucket}/{key}")

    def get(self, bucket: str, key: str, version_id: str | None = None) -> bytes:
        return self._request("GET", f"{bucket}/{key}" + (f"?versionId={version_id}" if version_id else "")).content

    def reset(self) -> None:
        requests.post(f"{self.url}/moto-api/reset", timeout=10).raise_for_status()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_s3(log: Path, timeout: float = 180, checks_credentials_after: int | None = None) -> S3Store:
    """moto_server on a free loopback port (its environment made by uv the first time: a few seconds).
    `checks_credentials_after`: moto checks the access key of every request after that many (moto's IAM
    authentication: a key it never issued is refused, as AWS refuses it)."""
    port = _free_port()
    argv = [uv(), "run", "--no-project", "--quiet", "--python", sys.executable]
    for requirement in S3_REQUIREMENTS:
        argv += ["--with", requirement]
    argv += ["moto_server", "-H", "127.0.0.1", "-p", str(port)]
    env = dict(os.environ)
    if checks_credentials_after is not None:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(checks_credentials_after)
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    store = S3Store(f"http://127.0.0.1:{port}", process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server ended ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            if requests.get(f"{store.url}/moto-api/", timeout=2).status_code < 500:
                return store
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            store.stop()
            raise RuntimeError(f"moto_server did not answer within {timeout} s: {log.read_text()[-2000:]}")
        time.sleep(0.2)

"""What the viewers' tests share: a real `mlflow server` (SQLite backend, loopback) and MLflow's own client, each in
an environment of their own made by uv (MLflow is 650 MB with its server: never in the project's environment);
Debian's headless Chromium, which loads a viewer's page and takes its screenshot; and `vdk show --board` /
`--dashboard` run as a user runs them, until they are stopped."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.fixtures import MACHINE_SETTINGS
from vdk.plugin.ml_training.dependencies.uv_install import uv_command
from vdk.plugin.ml_training.ops.viewers import free_port

MLFLOW = "mlflow>=3,<4"
CHROMIUM = "chromium"
# Where the tests' screenshots go (docs/images/ when the documentation's are made anew); else a temporary folder.
SCREENSHOTS_ENV = "VDK_ML_TRAINING_TEST_SCREENSHOTS"
# The flags of a headless Chromium on a machine without network or GPU (its connections to Google refused, many at
# a time, without the background ones off).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def uv_run(requirements: tuple[str, ...], *command: str) -> list[str]:
    argv = [uv_command(), "run", "--no-project", "--quiet", "--python", sys.executable]
    for requirement in requirements:
        argv += ["--with", requirement]
    return [*argv, *command]


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """`vdk`'s environment in a module's tests: none of this machine's settings, its runs and caches in `tmp`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in MACHINE_SETTINGS and not k.startswith("VDK_ML_TRAINING_") and not k.startswith("MLFLOW_")
    }
    env.update(
        VDK_ML_TRAINING_RUNS_DIR=str(tmp / "runs"),
        VDK_ML_TRAINING_CACHE_DIR=str(tmp / "cache"),
        KUBECONFIG=str(tmp / "no-kubeconfig"),
        XDG_CONFIG_HOME=str(tmp / "xdg-config"),
    )
    env.update(extra)
    return env


class MlflowServer:
    """`mlflow server` with an SQLite backend on a loopback port; `query` asks it through MLflow's client."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = uv_run(
            (MLFLOW,),
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--default-artifact-root",
            str(folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        )
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.log = folder / "server.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait(self, timeout: float = 600) -> MlflowServer:
        """Until it answers (its first start installs MLflow: a minute or two)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"mlflow server ended: {self.log.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(f"mlflow server did not answer in {timeout} s: {self.log.read_text(errors='replace')[-3000:]}")

    def query(self, script: str) -> object:
        """What `script` (Python with `client`, an MlflowClient of this server) prints as JSON."""
        program = f"import json\nfrom mlflow import MlflowClient\nclient = MlflowClient({self.url!r})\n{script}"
        done = subprocess.run(
            uv_run((MLFLOW,), "python", "-c", program), capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        stop_group(self.process)


def stop_group(process: subprocess.Popen, grace: float = 15) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def screenshot_dir(tmp: Path) -> Path:
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Browser:
    """Debian's headless Chromium driven through its DevTools protocol (websocket-client, which the kubernetes
    client brings): a page opened, waited for until a script says it has drawn, its DOM and its screenshot."""

    def __init__(self, profile: Path, size: tuple[int, int] = (1400, 900)):
        binary = shutil.which(CHROMIUM)
        if binary is None:
            pytest.fail("chromium is not installed (apt-get install chromium; .ci/run installs it)")
        shutil.rmtree(profile, ignore_errors=True)
        self.profile = profile
        command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}"]
        command += ["--remote-debugging-port=0", "--remote-allow-origins=*", "about:blank"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.is_file() and len(active.read_text().split()) == 2):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                pytest.fail("chromium did not open its DevTools port")
            time.sleep(0.2)
        port = active.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            pages = [t for t in json.loads(answer.read()) if t.get("type") == "page"]
        import websocket

        self.socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=60)
        self._id = 0

    def call(self, method: str, **params: object) -> dict:
        self._id += 1
        self.socket.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            answer = json.loads(self.socket.recv())
            if answer.get("id") == self._id:
                assert "error" not in answer, answer
                return answer.get("result", {})

    def evaluate(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, drawn: str = "true", timeout: float = 120) -> str:
        """Open `url`, wait until the script `drawn` is true (then a second more, for its last frames); the DOM."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not self.evaluate(f"Boolean({drawn})"):
            if time.monotonic() > deadline:
                pytest.fail(f"{url} was not drawn in {timeout} s ({drawn})")
            time.sleep(0.5)
        time.sleep(1)
        return str(self.evaluate("document.documentElement.outerHTML"))

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        assert path.stat().st_size > 10_000
        return path

    def close(self) -> None:
        socket = getattr(self, "socket", None)
        if socket is not None:
            socket.close()
        stop_group(self.process, grace=5)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Served:
    """`vdk show ... --board` (or `--dashboard`) as a user runs it: its address read from its first line; `stop()`
    sends it Ctrl-C and returns its exit status."""

    def __init__(self, args: list[str], env: dict[str, str], timeout: float = 600):
        command = [str(Path(sys.executable).with_name("vdk")), *args]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )
        self.first_line = self.process.stdout.readline() if self.process.stdout else ""
        found = re.search(r"http://127\.0\.0\.1:\d+/", self.first_line)
        if found is None:
            self.process.wait(timeout)
            pytest.fail(f"no address: {self.first_line}{self.process.stdout.read()}{self.process.stderr.read()}")
        self.url = found.group(0)
        self.stdout = self.first_line

    def stop(self) -> tuple[int, str, str]:
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, self.stdout + out, err

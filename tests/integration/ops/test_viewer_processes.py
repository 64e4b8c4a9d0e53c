"""A viewer as a process of this machine (ops/viewers.py): the one installed beside vdk runs as it is; one that
cannot be had says how to get one; and none outlives vdk, even when vdk is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.processes import MARK
from tests.support.processes import left_after
from tests.support.processes import new_mark
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops import viewers

pytestmark = pytest.mark.usefixtures("isolated_environment")


def test_a_viewer_that_cannot_be_installed_says_how_to_get_one(tmp_path, monkeypatch):
    missing = viewers.ViewerKind("Nothing", ("vdk-ml-training-test-no-such-viewer",), "no-such-viewer", "/")
    monkeypatch.setenv("UV_OFFLINE", "1")  # no index: uv answers at once
    with pytest.raises(MLTrainingError) as error:
        viewers.start_viewer(missing, lambda port: ["--port", str(port)], "nothing", tmp_path / "log", lambda t: None)
    assert "Nothing ended before it served" in error.value.problem
    assert f"{sys.executable} -m pip install vdk-ml-training-test-no-such-viewer" in error.value.fix
    assert "package index reachable" in error.value.fix


def test_the_viewer_beside_vdk_is_used_and_stops_with_its_session(tmp_path, monkeypatch):
    mark = new_mark()
    monkeypatch.setenv(MARK, mark)
    assert viewers.TENSORBOARD.command(["--version"])[0] == str(Path(sys.executable).parent / "tensorboard")
    (tmp_path / "logs").mkdir()
    viewer = viewers.start_viewer(
        viewers.TENSORBOARD,
        lambda port: ["--logdir", str(tmp_path / "logs"), "--host", "127.0.0.1", "--port", str(port)],
        "logs",
        tmp_path / "tensorboard.log",
        lambda text: None,
    )
    assert viewer.url.startswith("http://127.0.0.1:") and left_after(mark, 0)
    viewer.stop()
    assert not left_after(mark, 10)


DRIVER = """
import sys
from pathlib import Path
from vdk.plugin.ml_training.ops import viewers

folder = Path(sys.argv[1])
viewer = viewers.start_viewer(
    viewers.TENSORBOARD,
    lambda port: ["--logdir", str(folder), "--host", "127.0.0.1", "--port", str(port)],
    "logs",
    folder / "tensorboard.log",
)
print(viewer.url, flush=True)
viewer.wait()
"""


def test_a_viewer_ends_when_vdk_is_killed(tmp_path):
    mark = new_mark()
    driver = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(DRIVER), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, MARK: mark},
    )
    try:
        assert driver.stdout is not None and driver.stdout.readline().startswith("http://127.0.0.1:")
        alive = left_after(mark, 0)
        assert len(alive) > 1  # vdk and the viewer
        driver.send_signal(signal.SIGKILL)  # no handler runs: only the lifeline's end tells the viewer
        driver.wait(10)
        started = time.monotonic()
        assert not left_after(mark, 20), "the viewer outlived vdk"
        assert time.monotonic() - started < 20
    finally:
        if driver.poll() is None:
            driver.kill()

"""uv's stderr read once: its steps and downloaded bytes for an activity, its progress told apart from an error."""

from __future__ import annotations

from vdk.plugin.ml_training.dependencies import uv_progress
from vdk.plugin.ml_training.dependencies.uv_progress import UvProgress


class Recording:
    def __init__(self):
        self.steps, self.expected, self.advanced = [], 0, 0

    def step(self, text):
        self.steps.append(text)

    def expect(self, nbytes):
        self.expected += nbytes

    def advance(self, nbytes):
        self.advanced += nbytes


UV_INSTALL = """Using CPython 3.11.7 interpreter at: /usr/bin/python3
Resolved 31 packages in 1.21s
Downloading torch (760.2MiB)
Downloading numpy (16.1MiB)
 Downloaded numpy
 Downloaded torch
Prepared 31 packages in 41.62s
Installed 31 packages in 2.07s
 + numpy==2.4.6
 + torch==2.13.0"""


def test_uv_s_lines_become_the_steps_and_bytes_of_an_activity():
    activity = Recording()
    uv = UvProgress(activity)
    uv.started()
    for line in UV_INSTALL.splitlines():
        uv.line(line)
    assert activity.steps == [
        "installing requirements.txt",
        "resolved 31 packages in 1.21s; downloading what is not cached",
        "downloading torch (760.2 MiB)",
        "downloading numpy (16.1 MiB)",
        "downloaded numpy",
        "downloaded torch",
        "prepared 31 packages in 41.62s; installing",
        "installed 31 packages in 2.07s",
    ]
    assert activity.expected == activity.advanced == int(760.2 * 2**20) + int(16.1 * 2**20)
    assert [line for line in UV_INSTALL.splitlines() if not uv_progress.is_progress(line)] == []
    assert not uv_progress.is_progress("  × No solution found when resolving dependencies:")

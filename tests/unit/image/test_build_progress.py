"""What a build shows while it works (stderr)."""

from __future__ import annotations

import io
import time

from vdk.plugin.ml_training.image.build_progress import BAR_THRESHOLD
from vdk.plugin.ml_training.image.build_progress import StderrProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_small_uploads_are_silent_big_ones_reported_once_in_logs():
    out = io.StringIO()
    progress = StderrProgress(out)
    progress.stage("Base image x")
    small = progress.transfer("code layer", 1000)
    small.advance(1000)
    small.close()
    big = progress.transfer("base layer 0123", BAR_THRESHOLD * 2)
    big.advance(BAR_THRESHOLD)
    big.restart()
    big.advance(BAR_THRESHOLD * 2)
    big.close()
    assert out.getvalue().splitlines() == [
        "Base image x",
        "  uploading base layer 0123 (8.4 MB)",
        "  uploaded base layer 0123 (8.4 MB)",
    ]


def test_a_terminal_gets_a_progress_bar():
    out = Terminal()
    transfer = StderrProgress(out).transfer("dependencies layer", BAR_THRESHOLD * 4)
    transfer.advance(1)
    time.sleep(0.15)  # tqdm redraws at most every 0.1 s
    transfer.advance(BAR_THRESHOLD * 2 - 1)
    transfer.close()
    text = out.getvalue()
    assert "dependencies layer" in text and "50%" in text

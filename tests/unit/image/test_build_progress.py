"""What a build shows while it works (stderr)."""

from __future__ import annotations

import io
import time

from vdk.plugin.ml_training.image import build_progress
from vdk.plugin.ml_training.image.build_progress import BAR_THRESHOLD
from vdk.plugin.ml_training.image.build_progress import LineProgress
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


def test_an_activity_in_a_log_is_a_line_per_step_and_a_heartbeat_while_silent():
    out = io.StringIO()
    progress = StderrProgress(out)
    activity = build_progress._LineActivity(progress, "dependencies", heartbeat=0.2)
    activity.step("resolving requirements.txt")
    time.sleep(1.5)  # silence: the heartbeat speaks (it looks once a second)
    activity.step("installed 3 packages in 0.1s")
    activity.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "  dependencies: resolving requirements.txt"
    beats = [line for line in lines if "still working" in line]
    assert beats and beats[0].startswith("  dependencies: still working, ")
    assert beats[0].endswith("s so far (last: resolving requirements.txt)")
    assert lines[-1] == "  dependencies: installed 3 packages in 0.1s"


def test_an_activity_dropped_without_being_closed_stops_speaking():
    """An exception between an activity's making and the `try` that closes it (a signal handler's: a deploy's failed
    remote check interrupts its smoke run anywhere) drops it unclosed: its heartbeat must not go on printing into
    whatever runs next in the process (it did, 50 s later, into another test's stderr)."""
    import gc
    import threading

    out = io.StringIO()
    for make in (lambda: build_progress._LineActivity(StderrProgress(out), "overlay", heartbeat=0.05),
                 lambda: StderrProgress(Terminal()).activity("overlay")):  # fmt: skip
        activity = make()
        name = next(t.name for t in threading.enumerate() if t.name.startswith("vdk-ml-overlay-"))
        del activity
        gc.collect()
        deadline = time.monotonic() + 10
        while any(t.name == name for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(t.name == name for t in threading.enumerate()), name
    said = len(out.getvalue())
    time.sleep(1.2)
    assert len(out.getvalue()) == said


def test_a_terminal_shows_an_activity_as_one_changing_line_with_the_bytes():
    out = Terminal()
    activity = StderrProgress(out).activity("dependencies")
    activity.step("downloading torch (8 MiB)")
    activity.expect(8 * 2**20)
    activity.advance(4 * 2**20)
    time.sleep(0.6)  # redrawn with the time taken
    activity.close()
    text = out.getvalue()
    assert "dependencies: downloading torch (8 MiB)" in text and "50%" in text and "\n" not in text.strip("\n")


def test_line_progress_says_every_stage_through_its_caller():
    said = []
    progress = LineProgress(said.append, prefix="Pre-flight: ")
    progress.stage("Dependencies: installing requirements.txt")
    progress.stage("NCCL: kept as written")
    progress.transfer("dependencies layer", BAR_THRESHOLD * 2).close()
    activity = progress.activity("dependencies")
    activity.step("resolving")
    activity.close()
    # one spelling of a stage's first word after the prefix (it was `Pre-flight Dependencies` and `Pre-flight
    # dependencies` in one deploy), acronyms as written
    assert said == [
        "Pre-flight: dependencies: installing requirements.txt",
        "Pre-flight: NCCL: kept as written",
        "Pre-flight: uploading dependencies layer (8.4 MB)",
        "Pre-flight: uploaded dependencies layer (8.4 MB)",
        "Pre-flight: dependencies: resolving",
    ]

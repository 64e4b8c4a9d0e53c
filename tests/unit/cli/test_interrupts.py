"""`vdk`'s signal handling in this process: a signal it was started ignoring (nohup's SIGHUP, a background
shell's SIGINT) stays ignored, one it catches raises Interrupted with 128 + its number, and a second one
while stopping is ignored. (The real `vdk run` and `vdk deploy` sent signals: tests/integration/cli/.)"""

from __future__ import annotations

import signal
import sys
import time

import pytest

from vdk.plugin.ml_training.cli import interrupts


def test_a_signal_vdk_was_started_ignoring_stays_ignored():
    """`nohup vdk run ...` must survive its terminal's hangup; a shell's background job ignores SIGINT."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts.stop_on_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
            with pytest.raises(interrupts.Interrupted) as stopped:
                signal.raise_signal(signal.SIGTERM)
            assert (stopped.value.name, stopped.value.exit_code) == ("SIGTERM", 143)
            signal.raise_signal(signal.SIGTERM)  # a second one while stopping is ignored
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_an_interrupted_dropped_by_a_finalizer_is_raised_again():
    """A signal that comes while a finalizer runs (an HTTP response's, a pool's) raises there, and Python
    drops what a finalizer raises: the run must stop all the same, not ignore every signal from then on."""

    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)
            sum(range(10))  # Python code: the handler runs in here

    with pytest.raises(interrupts.Interrupted) as stopped:
        with interrupts.stop_on_signals():
            Finalized()  # finalized at once
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.01)
    assert stopped.value.name == "SIGINT"
    assert stopped.value.__context__ is None  # raised in the body, not from the finalizer's frame


def test_a_signal_that_comes_while_the_unraisable_hook_runs_is_taken_after_it(monkeypatch):
    """A signal whose handler runs inside the hook (another finalizer's error being printed) would raise there,
    where Python drops it too: it is sent again once the hook returned."""

    def printing(unraisable):  # the hook before ours: Python code, where a signal's handler runs
        signal.raise_signal(signal.SIGINT)
        sum(range(10))

    monkeypatch.setattr(sys, "unraisablehook", printing)

    class Broken:
        def __del__(self):
            raise ValueError("a finalizer's own error")

    with pytest.raises(interrupts.Interrupted) as stopped:
        with interrupts.stop_on_signals():
            Broken()  # finalized at once: its error goes to the hook
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.01)
    assert stopped.value.name == "SIGINT" and stopped.value.__context__ is None

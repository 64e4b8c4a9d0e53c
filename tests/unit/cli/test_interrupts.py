"""`vdk`'s signal handling in this process: a signal it was started ignoring (nohup's SIGHUP, a background
shell's SIGINT) stays ignored, one it catches raises Interrupted with 128 + its number, and a second one
while stopping is ignored. (The real `vdk run` and `vdk deploy` sent signals: tests/integration/cli/.)"""

from __future__ import annotations

import signal

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

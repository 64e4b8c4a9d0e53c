"""What the bootstrap reports of a failure, without a process: `describe` keeps the user's frames and the
exception chain. (The bootstrap running entrypoints: tests/integration/runtime/test_bootstrap_processes.py.)"""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.runtime.report import describe


def test_describe_keeps_the_users_frames_and_the_exception_chain():
    def user_code():
        try:
            {}["key"]
        except KeyError as e:
            raise RuntimeError("while loading") from e

    with pytest.raises(RuntimeError) as info:
        user_code()
    described = describe(info.value)
    assert described["message"] == "RuntimeError: while loading"
    assert "KeyError: 'key'" in described["traceback"]
    assert "direct cause" in described["traceback"]

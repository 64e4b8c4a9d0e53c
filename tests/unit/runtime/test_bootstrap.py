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


def test_a_cluster_run_started_more_often_than_its_restarts_and_disruptions_allow_stops_saying_why(
    tmp_path, monkeypatch, capsys
):
    from vdk.plugin.ml_training.runtime import bootstrap
    from vdk.plugin.ml_training.runtime import protocol

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(protocol.RUN_NAME, "mnist-k3x9p2qa")
    monkeypatch.setenv(protocol.MAX_STARTS, "3")  # 1 + max_restarts 0 + max_disruptions 2
    for _ in range(3):
        bootstrap._count_start()
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as stopped:
        bootstrap._count_start()
    assert stopped.value.code == 1
    said = capsys.readouterr()
    assert "this run started 4 times" in said.out + said.err and "raise max_disruptions" in said.out + said.err
    monkeypatch.delenv(protocol.MAX_STARTS)  # a pod of an older plugin's manifest: no cap, as before
    bootstrap._count_start()

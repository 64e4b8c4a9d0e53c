"""The smoke run's agreed end: the first rank that stops says so in the run directory; a rank whose collective
ended because that rank ended stopped with it; an error of its own is still its own."""

from __future__ import annotations

from vdk.plugin.ml_training.runtime import smoke_stop

GLOO_PEER_GONE = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:24479. This is typically caused by a remote worker crashing."
)


def test_the_first_rank_to_stop_is_the_one_recorded(tmp_path):
    assert smoke_stop.stopped_by(tmp_path) is None
    smoke_stop.announce(tmp_path, 1, 2)
    smoke_stop.announce(tmp_path, 0, 3)  # a later stop changes nothing
    assert smoke_stop.stopped_by(tmp_path) == {"rank": 1, "steps": 2}


def test_a_collective_that_ended_because_the_stopped_rank_left_is_the_agreed_end(tmp_path):
    peer_gone = RuntimeError(GLOO_PEER_GONE)
    assert smoke_stop.ended_by_peer(peer_gone, tmp_path) is None  # nobody stopped: a failure
    smoke_stop.announce(tmp_path, 0, 2)
    assert smoke_stop.ended_by_peer(peer_gone, tmp_path) == {"rank": 0, "steps": 2}
    try:  # wrapped by the code or a framework: its cause is what counts
        try:
            raise peer_gone
        except RuntimeError as e:
            raise ValueError("evaluation failed") from e
    except ValueError as wrapped:
        assert smoke_stop.ended_by_peer(wrapped, tmp_path) is not None
    assert smoke_stop.ended_by_peer(ValueError("a bug of its own"), tmp_path) is None
    assert smoke_stop.ended_by_peer(RuntimeError("shape mismatch"), tmp_path) is None

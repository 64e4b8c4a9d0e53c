"""How a script's end becomes its rank's exit status, as `python script.py` would end. (A rank's end in real
processes, through the interpreter's end up to its teardown: tests/integration/runtime/test_rank_end.py.)"""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import rank_process


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (None, 0),
        (SystemExit(), 0),
        (SystemExit(None), 0),
        (SystemExit(0), 0),
        (SystemExit(3), 3),
        (SystemExit(True), 1),
        (SystemExit(-1), 255),  # what the system keeps of it, as after python's own exit
        (SystemExit(256 + 7), 7),
        (SystemExit("no data in /data"), 1),
        (SystemExit(["not", "a", "code"]), 1),
        (RuntimeError("boom"), None),  # the interpreter reports it: a traceback, then 1
        (KeyboardInterrupt(), None),
    ],
)
def test_the_exit_status_is_the_one_python_ends_with(error, status):
    assert rank_process.exit_status(error) == status


def test_a_status_that_means_the_script_finished_is_zero_and_the_others_are_not():
    for error in (None, SystemExit(0), SystemExit(None), SystemExit(2), SystemExit("x"), ValueError()):
        finished = rank_process.ending(error) == protocol.FINISHED
        assert finished == (rank_process.exit_status(error) == 0), error


def test_only_a_message_of_sys_exit_is_printed_as_python_prints_it(capsys):
    rank_process.say_exit_message(SystemExit("no data in /data"))
    rank_process.say_exit_message(SystemExit(["a", 1]))
    for silent in (None, SystemExit(), SystemExit(0), SystemExit(4), RuntimeError("reported elsewhere")):
        rank_process.say_exit_message(silent)
    assert capsys.readouterr() == ("", "no data in /data\n['a', 1]\n")

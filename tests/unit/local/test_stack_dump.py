"""Reading faulthandler's dumps as ranks write them: whether the interpreter crashed, and where the
rank's own thread was in the job's code (not a DataLoader thread, not the launcher's frames)."""

from pathlib import Path

from vdk.plugin.ml_training.local.stack_dump import CUT_SHORT
from vdk.plugin.ml_training.local.stack_dump import NOT_RECORDED
from vdk.plugin.ml_training.local.stack_dump import crash
from vdk.plugin.ml_training.local.stack_dump import user_stack


def test_where_a_rank_was_is_its_main_thread_not_a_dataloader_feeder_thread():
    dump = (
        "Thread 0x00007fc1f966a6c0 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n'
        '  File "/usr/lib/python3.11/multiprocessing/queues.py", line 231 in _feed\n\n'
        "Current thread 0x00007fc221dddb80 (most recent call first):\n"
        '  File "/jobs/hang/train.py", line 60 in main\n'
        '  File "/jobs/hang/train.py", line 71 in <module>\n'
    )
    stack = user_stack(dump, Path("/jobs/hang"))
    assert stack and 'train.py", line 60' in stack[0], stack


def test_where_a_rank_was_without_a_current_thread_is_the_thread_in_the_jobs_code():
    dump = (
        "Fatal Python error: Segmentation fault\n\n"
        "Thread 0x2 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n\n'
        "Thread 0x1 (most recent call first):\n"
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
        '  File "/jobs/crash/train.py", line 9 in step\n'
        '  File "/jobs/crash/train.py", line 12 in <module>\n'
    )
    assert user_stack(dump, Path("/jobs/crash")) == [
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at',
        '  File "/jobs/crash/train.py", line 9 in step',
        '  File "/jobs/crash/train.py", line 12 in <module>',
    ]
    # a sibling directory whose name starts like the job's is not the job's code
    assert user_stack(dump, Path("/jobs/cra"))[0].endswith("line 327 in wait")


def test_a_crash_is_told_from_a_stack_dumped_on_request():
    assert crash("Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n") == (
        "Segmentation fault"
    )
    assert (
        crash('Current thread 0x1 (most recent call first):\n  File "/jobs/a/train.py", line 3 in <module>\n') is None
    )
    assert user_stack("", Path("/jobs/a")) == []


def test_the_rank_s_main_thread_is_chosen_by_its_id_whatever_thread_received_the_signal():
    """Under load the signal may land in any thread, and a feeder thread may have called into the job's code
    (a dataset's __getitem__): the thread the rank named as its main one is the one shown."""
    dump = (
        "vdk-ml-training main thread 0x00007fc221dddb80\n"
        "Current thread 0x00007fc1f966a6c0 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n'
        '  File "/jobs/hang/data.py", line 12 in __getitem__\n\n'
        "Thread 0x00007fc221dddb80 (most recent call first):\n"
        '  File "/jobs/hang/train.py", line 60 in main\n'
        '  File "/jobs/hang/train.py", line 71 in <module>\n'
    )
    assert user_stack(dump, Path("/jobs/hang")) == [
        '  File "/jobs/hang/train.py", line 60 in main',
        '  File "/jobs/hang/train.py", line 71 in <module>',
    ]


def test_a_forked_worker_s_dump_in_the_same_file_does_not_hide_the_rank_s():
    dump = (
        "vdk-ml-training main thread 0x00007fc221dddb80\n"
        "Current thread 0x00007fc221dddb80 (most recent call first):\n"  # the DataLoader worker, forked
        '  File "/venv/torch/utils/data/_utils/worker.py", line 300 in _worker_loop\n\n'
        "Thread 0x00007fc221dddb80 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n'
        '  File "/jobs/hang/train.py", line 60 in main\n'
    )
    assert user_stack(dump, Path("/jobs/hang"))[-1] == '  File "/jobs/hang/train.py", line 60 in main'


HEADER = (
    "vdk-ml-training main thread 0x00007fc221dddb80\n"
    'vdk-ml-training main thread entry: File "<frozen runpy>" in _run_module_as_main\n'
)
FEEDER = (
    "Thread 0x00007fc1f966a6c0 (most recent call first):\n"
    '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n'
    '  File "/usr/lib/python3.11/multiprocessing/queues.py", line 231 in _feed\n\n'
)
MAIN = (
    "Current thread 0x00007fc221dddb80 (most recent call first):\n"
    '  File "/venv/torch/nn/parallel/distributed.py", line 1775 in _pre_forward\n'
    '  File "/jobs/hang/train.py", line 18 in main\n'
    '  File "/jobs/hang/train.py", line 30 in <module>\n'
    '  File "<frozen runpy>", line 198 in _run_module_as_main\n'
)


def test_a_whole_dump_of_the_main_thread_is_shown_without_a_note():
    assert user_stack(HEADER + FEEDER + MAIN, Path("/jobs/hang")) == [
        '  File "/venv/torch/nn/parallel/distributed.py", line 1775 in _pre_forward',
        '  File "/jobs/hang/train.py", line 18 in main',
        '  File "/jobs/hang/train.py", line 30 in <module>',
    ]


def test_a_dump_cut_in_the_main_thread_shows_what_it_holds_and_says_the_rest_is_missing():
    """The CI case: the rank was ended after the first frame of its main thread (a second SIGTERM)."""
    cut = MAIN[: MAIN.index("line 18")]  # in the middle of a line, too: that half line is not a frame
    assert user_stack(HEADER + FEEDER + cut, Path("/jobs/hang")) == [
        '  File "/venv/torch/nn/parallel/distributed.py", line 1775 in _pre_forward',
        f"  {CUT_SHORT}",
    ]


def test_a_dump_that_ended_before_the_main_thread_says_so_instead_of_showing_a_helper_thread():
    assert user_stack(HEADER + FEEDER, Path("/jobs/hang")) == [f"  {NOT_RECORDED}"]
    assert user_stack(HEADER + FEEDER[:40], Path("/jobs/hang")) == [f"  {NOT_RECORDED}"]


def test_a_stack_deeper_than_faulthandler_lists_is_whole():
    deep = MAIN.replace('  File "<frozen runpy>", line 198 in _run_module_as_main\n', "  ...\n")
    assert CUT_SHORT not in "".join(user_stack(HEADER + deep, Path("/jobs/hang")))


def test_a_spawned_worker_s_program_is_not_where_it_was():
    # a worker multiprocessing spawned starts with `python -c "...child_main(...)"`: its outermost frame
    ended = (
        "Current thread 0x1 (most recent call first):\n"
        '  File "/venv/vdk/plugin/ml_training/runtime/rank_process.py", line 425 in end_now\n'
        '  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 122 in spawn_main\n'
        '  File "<string>", line 1 in <module>\n'
    )
    assert user_stack(ended, Path("/jobs/hang")) == []  # nothing of the job's: not a frame that is no one's
    hung = (
        "Current thread 0x1 (most recent call first):\n"
        '  File "/jobs/hang/train.py", line 10 in wait_for_data\n'
        '  File "/jobs/hang/train.py", line 16 in work\n'
        '  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 122 in spawn_main\n'
        '  File "<string>", line 1 in <module>\n'
    )
    assert user_stack(hung, Path("/jobs/hang")) == [
        '  File "/jobs/hang/train.py", line 10 in wait_for_data',
        '  File "/jobs/hang/train.py", line 16 in work',
    ]

"""What a rank reports of the error it ended with: a framework that caught the user's error and exited (Hydra)
is seen through, from the user's first frame; a launcher that relays a worker's traceback as text reports the
worker's error."""

from __future__ import annotations

import sys
from pathlib import Path

from vdk.plugin.ml_training.runtime import virtual_gpu
from vdk.plugin.ml_training.runtime.report import describe
from vdk.plugin.ml_training.runtime.report import describe_exit

FRAMEWORK = f"{sys.prefix}/lib/python3/site-packages/wrapper/main.py"  # an installed package's file
WRAPPER = """
import sys

def run_and_report(task):
    try:
        return task()
    except Exception as error:
        print(f"Error executing job: {error}")
        sys.exit(1)
"""


def user_code():
    widths = {"width": 16}
    raise ValueError(f"width {widths['width']} is more than 8")


def caught_exit(task) -> SystemExit:
    namespace: dict = {}
    exec(compile(WRAPPER, FRAMEWORK, "exec"), namespace)
    try:
        namespace["run_and_report"](task)
    except SystemExit as e:
        return e
    raise AssertionError("the wrapper did not exit")


def test_an_error_a_framework_caught_before_exiting_is_reported_from_the_user_s_frame():
    described = describe_exit(caught_exit(user_code))
    assert described["type"] == "ValueError" and described["exited"] == 1
    assert described["message"] == "ValueError: width 16 is more than 8"
    traceback = described["traceback"]
    assert FRAMEWORK not in traceback  # the framework's frames above the user's are left out
    assert traceback.splitlines()[1].startswith(f'  File "{__file__}"') and "in user_code" in traceback
    assert "SystemExit" not in traceback


def test_an_exit_without_an_error_says_its_code():
    try:
        sys.exit(3)
    except SystemExit as e:
        described = describe_exit(e)
    assert described["message"] == "the script exited with 3" and "exited" not in described


def test_a_worker_s_traceback_relayed_as_text_is_the_error_reported():
    relayed = RuntimeError(
        "\n\n-- Process 1 terminated with the following error:\nTraceback (most recent call last):\n"
        '  File "/job/train.py", line 12, in worker\n    build(16)\n'
        '  File "/job/train.py", line 5, in build\n    raise ValueError("width 16 is more than 8")\n'
        "ValueError: width 16 is more than 8\n"
    )
    described = describe(relayed)
    assert described["type"] == "ValueError" and described["relayed"] == "RuntimeError"
    assert described["message"] == "ValueError: width 16 is more than 8"
    assert described["traceback"].startswith('Traceback (most recent call last):\n  File "/job/train.py", line 12')
    assert describe(RuntimeError("no traceback here"))["type"] == "RuntimeError"


# A stand-in's file in a sub-package of the runtime (where the virtual GPUs' modules are).
STAND_IN = str(Path(virtual_gpu.__file__).parent / "stand_in.py")
STAND_IN_CODE = """
def current_device(index):
    return int(index)
"""


def test_the_frames_of_the_runtime_s_sub_packages_are_left_out_as_its_own_are():
    namespace: dict = {}
    exec(compile(STAND_IN_CODE, STAND_IN, "exec"), namespace)
    try:
        namespace["current_device"]("cuda:x")  # the user's line
    except ValueError as e:
        described = describe(e)
    traceback = described["traceback"]
    assert STAND_IN not in traceback
    assert f'File "{__file__}"' in traceback and described["message"].startswith("ValueError: invalid literal")

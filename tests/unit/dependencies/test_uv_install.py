"""What uv says while it installs (its stderr lines, as uv 0.x writes them) passed on as steps, and left out of
an error's reason; the uv command line with and without a listener."""

from __future__ import annotations

from vdk.plugin.ml_training.dependencies import uv_install

UV_SAYS = """Using CPython 3.11.7 interpreter at: /venv/bin/python
Resolved 3 packages in 210ms
Downloading scipy (35.1MiB)
 Downloaded scipy
Prepared 3 packages in 1.52s
Installed 3 packages in 80ms
 + numpy==2.1.0
 + scipy==1.14.1
 + six==1.16.0
"""


def test_an_error_s_reason_keeps_uv_s_message_without_its_progress():
    message = ["  × No solution found when resolving dependencies:", "  ╰─▶ bad-pkg==9 was not found"]
    failure = "Resolved 2 packages in 10ms\n" + "\n".join(message) + "\n"
    reason = uv_install._uv_message(UV_SAYS + failure)
    assert reason.splitlines() == message
    # without an activity uv runs with -q: only its interpreter line is left out
    assert uv_install._uv_message("Using CPython 3.11.7\n  × no\n") == "  × no"

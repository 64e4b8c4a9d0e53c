"""uv's words read into names: a requirement's version is never taken for a package (the "4-9-3, antlr4-python3-
runtime" of a range that did not start with `==`), and a wheel built on this machine with native code is told from
a portable or pure one by its WHEEL tags. (Each pattern against the real uv's output:
tests/integration/dependencies/test_uv_messages_uv.py.)"""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.dependencies import uv_messages


@pytest.mark.parametrize(
    "requirement",
    [
        "antlr4-python3-runtime==4.9.3",
        "antlr4-python3-runtime>=4.9.3",
        "antlr4-python3-runtime>=4.9,<4.10",
        "antlr4_python3_runtime~=4.9",
        "antlr4-python3-runtime",
    ],
)
def test_a_package_without_wheels_is_its_name_whatever_version_follows(requirement):
    said = f"  cause: Because {requirement} has no usable wheels and you require hydra-core, we can conclude ..."
    assert uv_messages.packages_without_wheels(said) == ["antlr4-python3-runtime"]


def wheel_info(folder, name, *tags, purelib=False):
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = [f"Root-Is-Purelib: {str(purelib).lower()}", *(f"Tag: {tag}" for tag in tags)]
    (info / "WHEEL").write_text("Wheel-Version: 1.0\n" + "\n".join(lines) + "\n")


def test_only_a_wheel_for_this_machine_alone_counts_as_built_here(tmp_path):
    wheel_info(tmp_path, "natpkg", "cp311-cp311-linux_x86_64")
    wheel_info(tmp_path, "numpy", "cp311-cp311-manylinux_2_17_x86_64", "cp311-cp311-manylinux2014_x86_64")
    wheel_info(tmp_path, "antlr4_python3_runtime", "py3-none-any", purelib=True)
    assert uv_messages.built_native(tmp_path) == {"natpkg": "cp311-cp311-linux_x86_64"}


def test_a_failed_build_s_reason_is_the_build_s_own_words_and_uv_s_hint():
    said = """error: Failed to build `natbad==1.1`
  cause: The build backend returned an error
  cause: Call to `setuptools.build_meta.build_wheel` failed (exit status: 1)

         [stdout]
         running build_ext

         [stderr]
         natbad.c:1:10: fatal error: vdk_no_such_header.h: No such file or directory
         compilation terminated.

hint: This error likely indicates that you need to install a library that provides `vdk_no_such_header.h`"""
    build = uv_messages.failed_build(said)
    assert build is not None and build.package == "natbad"
    assert build.reason.splitlines() == [
        "natbad.c:1:10: fatal error: vdk_no_such_header.h: No such file or directory",
        "compilation terminated.",
        "This error likely indicates that you need to install a library that provides `vdk_no_such_header.h`",
    ]

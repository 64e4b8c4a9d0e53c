"""Every pattern of uv's words that vdk reads (dependencies/uv_messages.py) read from what the real uv writes, run
against local package indexes and directories of files built here: a package without a wheel it may install (uv's
"has no usable wheels" with a pinned name, "no wheels with a matching platform tag", "Wheels are required for"), a
source distribution whose build failed with the compiler's reason, the first-index rule's hint; and the errors the
install raises from them, each naming the package as written (not a version: "4-9-3") and the Python it is for."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.support.wheels import make_source
from tests.support.wheels import make_wheel
from tests.support.wheels import simple_index
from tests.support.wheels import wheel_of_installed
from vdk.plugin.ml_training import helper_processes
from vdk.plugin.ml_training.dependencies import uv_install
from vdk.plugin.ml_training.dependencies import uv_messages
from vdk.plugin.ml_training.dependencies.install_errors import FirstIndexError
from vdk.plugin.ml_training.dependencies.install_errors import NoWheelError
from vdk.plugin.ml_training.dependencies.install_errors import SourceBuildError

IMAGE = uv_install.Target("3.11", "x86_64-manylinux_2_28")
NATIVE = (
    "#include <Python.h>\n"
    'static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "natpkg_native", NULL, -1, NULL};\n'
    "PyMODINIT_FUNC PyInit_natpkg_native(void) { return PyModule_Create(&m); }\n"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A directory of files: an sdist-only antlr4-python3-runtime (pure Python, as on PyPI) and a Hydra wheel that
    needs it, a wheel for macOS only, a C extension's sdist that includes a header nobody has, one that compiles,
    and setuptools (their build backend)."""
    d = tmp_path_factory.mktemp("files")
    make_source(d, "antlr4-python3-runtime", "4.9.3")
    make_wheel(d, "hydra-core", "1.3.2", requires=("antlr4-python3-runtime==4.9.*",))
    make_wheel(d, "macpkg", "1.0", tag="cp311-cp311-macosx_11_0_arm64")
    make_source(d, "natbad", "1.0", c_source="#include <vdk_no_such_header.h>\n" + NATIVE)
    make_source(d, "natpkg", "1.0", c_source=NATIVE)
    wheel_of_installed(d, "setuptools")
    return d


@pytest.fixture(scope="module")
def uv_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture(autouse=True)
def no_machine_indexes(isolated_environment, monkeypatch, uv_cache):
    """Only the indexes a test names: none of pip's or uv's of this machine; uv's cache of these tests (a build
    backend installed once for all of them)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("UV_CACHE_DIR", str(uv_cache))
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal, at whose width uv would wrap the words vdk reads
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("UV_INDEX", "UV_DEFAULT_INDEX", "UV_FIND_LINKS", "UV_INDEX_STRATEGY", "UV_NO_BUILD"):
        monkeypatch.delenv(name, raising=False)


def uv_says(tmp_path: Path, requirements: str, target: uv_install.Target = IMAGE) -> str:
    """uv's stderr for an install of `requirements` that fails, run as vdk runs it (its flags and environment)."""
    file = tmp_path / "requirements.txt"
    file.write_text(requirements)
    argv = [uv_install.uv_command(), "pip", "install", "--target", str(tmp_path / "t"), "-r", str(file)]
    done = helper_processes.run([*argv, *target.flags()], cwd=tmp_path, env=uv_install.uv_environment(), timeout=300)
    assert done.returncode != 0, done.stderr
    return done.stderr


class Steps:
    """An activity that keeps the steps it is shown."""

    def __init__(self):
        self.steps: list[str] = []

    def step(self, text):
        self.steps.append(text)

    def expect(self, nbytes):
        pass

    def advance(self, nbytes):
        pass


def install(tmp_path: Path, requirements: str, target: uv_install.Target = IMAGE, steps: Steps | None = None) -> Path:
    tmp_path.mkdir(exist_ok=True)
    file = tmp_path / "requirements.txt"
    file.write_text(requirements)
    uv_install.install(file, tmp_path / "target", tmp_path, target, "deploy again", activity=steps)
    return tmp_path / "target"


def test_no_wheel_names_each_package_as_written_whatever_its_version_says(tmp_path, files):
    wheels_only = f"--no-index\n--find-links {files}\n--only-binary :all:\n"
    pinned = uv_says(tmp_path, wheels_only + "antlr4-python3-runtime==4.9.3\n")
    assert "antlr4-python3-runtime==4.9.3 has no usable wheels" in pinned  # uv's words: a version follows the name
    assert "Wheels are required for `antlr4-python3-runtime`" in pinned
    assert uv_messages.packages_without_wheels(pinned) == ["antlr4-python3-runtime"]
    through_hydra = uv_says(tmp_path, wheels_only + "hydra-core\n")
    assert uv_messages.packages_without_wheels(through_hydra) == ["antlr4-python3-runtime"]
    other_platform = uv_says(tmp_path, f"--no-index\n--find-links {files}\nmacpkg\n")
    assert "macpkg==1.0 has no wheels with a matching platform tag" in other_platform
    assert uv_messages.packages_without_wheels(other_platform) == ["macpkg"]


def test_a_package_without_a_wheel_or_a_source_is_said_so_for_the_python_it_is_for(tmp_path, files):
    with pytest.raises(NoWheelError) as raised:
        install(tmp_path, f"--no-index\n--find-links {files}\nmacpkg\n", uv_install.Target())
    problem, fix = raised.value.problem, raised.value.fix
    assert raised.value.packages == ["macpkg"]
    assert problem.startswith(f"macpkg has no wheel for this Python ({sys.executable}) on the package indexes")
    assert f"publishes a wheel for this Python ({sys.executable})" in fix  # not "a this machine wheel"


def test_a_source_distribution_that_does_not_build_is_refused_with_the_compiler_s_reason(tmp_path, files):
    said = uv_says(tmp_path, f"--no-index\n--find-links {files}\nnatbad\n")
    build = uv_messages.failed_build(said)
    assert build is not None and build.package == "natbad"
    assert "vdk_no_such_header.h: No such file or directory" in build.reason  # the compiler's words
    with pytest.raises(SourceBuildError) as raised:
        install(tmp_path, f"--no-index\n--find-links {files}\nnatbad\n")
    problem, fix = raised.value.problem, raised.value.fix
    assert problem.startswith("natbad is installed from its source distribution (no wheel for Python 3.11 on ")
    assert "only when it is pure Python" in problem and "vdk_no_such_header.h" in problem
    assert "pip wheel PACKAGE" in fix and "base_provides" in fix and fix.endswith("Then deploy again")


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (the sdist builds, but for this machine)")
def test_a_source_distribution_with_native_code_that_builds_here_is_refused_for_an_image(tmp_path, files):
    with pytest.raises(SourceBuildError) as raised:
        install(tmp_path, f"--no-index\n--find-links {files}\nnatpkg\n")
    assert raised.value.packages == ["natpkg"]
    assert "its wheel was built for this machine (`cp311-cp311-linux_x86_64`)" in raised.value.problem
    # for another Python than this one uv refuses the wheel it built itself
    with pytest.raises(SourceBuildError) as raised:
        install(
            tmp_path / "py3.12",
            f"--no-index\n--find-links {files}\nnatpkg\n",
            uv_install.Target("3.12", "x86_64-manylinux_2_28"),
        )
    assert raised.value.packages == ["natpkg"]
    assert "is not compatible with the target Python 3.12" in raised.value.problem
    assert "--no-build" not in raised.value.problem  # uv's advice; the fix is vdk's


def test_a_pure_python_source_distribution_is_built_into_a_wheel_once_and_installed(tmp_path, files):
    first, again = Steps(), Steps()
    target = install(tmp_path / "a", f"--no-index\n--find-links {files}\nhydra-core\n", steps=first)
    assert uv_install.installed_packages(target) == (("antlr4-python3-runtime", "4.9.3"), ("hydra-core", "1.3.2"))
    assert (target / "antlr4_python3_runtime" / "__init__.py").read_text() == "__version__ = '4.9.3'\n"
    assert uv_messages.built_native(target) == {}
    assert "building antlr4-python3-runtime==4.9.3 from its source distribution" in first.steps
    install(tmp_path / "b", f"--no-index\n--find-links {files}\nhydra-core\n", steps=again)
    assert not [step for step in again.steps if step.startswith("build")]  # uv's cache keeps the built wheel


def test_the_first_index_rule_is_named_with_the_index_that_had_only_the_older_version(tmp_path, files):
    main = simple_index(tmp_path / "main", [make_wheel(tmp_path / "main-files", "timmy", "1.0")])
    extra = simple_index(tmp_path / "extra", [make_wheel(tmp_path / "extra-files", "timmy", "2.0")])
    requirements = f"--index-url {extra}\n--extra-index-url {main}\ntimmy==2.0\n"  # uv searches `main` first
    first_index = uv_install.Target("3.11", "x86_64-manylinux_2_28", index_strategy="first-index")
    hint = uv_messages.first_index_hint(uv_says(tmp_path, requirements, first_index))
    assert hint == uv_messages.FirstIndex("timmy", main, "timmy==2.0", extra)
    with pytest.raises(FirstIndexError) as raised:
        install(tmp_path, requirements, first_index)
    problem, fix = raised.value.problem, raised.value.fix
    assert problem.startswith(f"timmy==2.0 cannot be installed for Python 3.11 on x86_64-manylinux_2_28: {main} is")
    assert "`index_strategy = first-index`" in problem and f"({extra} was not searched for it)" in problem
    assert "set `index_strategy = best-match` in [ml-training]" in fix and f"pin a version {main} has" in fix
    # as pip: every index searched
    assert ("timmy", "2.0") in uv_install.installed_packages(install(tmp_path / "pip", requirements))

"""Base images the builder does not know, read from the real registry: for each, the plan finds the
interpreter, the Python version and the installed packages without any [ml-training] keys; a base
is read once per digest; the table agrees with what inspection finds in the well-known layouts."""

from __future__ import annotations

import io

import pytest
import requests

from tests.support.base_images import PYTHON_311_SLIM_BOOKWORM
from tests.support.base_images import PYTORCH_2_13_RUNTIME
from tests.support.base_images import push_layout
from tests.support.jobs import job_on
from tests.support.registry import FaultProxy
from vdk.plugin.ml_training.image import RegistryUnreachableError
from vdk.plugin.ml_training.image import RetryPolicy
from vdk.plugin.ml_training.image import StderrProgress
from vdk.plugin.ml_training.image import base_inspection
from vdk.plugin.ml_training.image import plan_image
from vdk.plugin.ml_training.image.base_facts import table_entry
from vdk.plugin.ml_training.image.base_manifest import resolve_base
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.job.image_reference import parse_reference
from vdk.plugin.ml_training.source import audit

FAST_RETRY = RetryPolicy(attempts=2, first_delay=0.01, max_delay=0.02)
ACCEPT = "application/vnd.oci.image.manifest.v1+json"


def plan_of(spec, shown: io.StringIO | None = None, retry=None):
    progress = StderrProgress(shown) if shown is not None else Progress()
    return plan_image(spec, "registry.example.com/ml", audit.collect(spec.job_dir), progress=progress, retry=retry)


# (interpreter, Python, provided packages, part of the reason the plan gives)
EXPECTED = {
    "debian": (
        "python3",
        "3.11",
        (),
        "`python3` on the image's PATH: /usr/bin/python3 -> /usr/bin/python3.11; the image has no `python`",
    ),
    "python_only": ("python", "3.11", (), "`python` on the image's PATH: /usr/bin/python -> /usr/bin/python3.11"),
    "venv": ("python", "3.11", ("venvdep",), "/opt/venv/bin/python -> /usr/bin/python3.11, a virtual environment"),
    "torch_dist_packages": ("python3", "3.11", ("numpy", "six", "torch"), "the image has no `python`"),
}


@pytest.mark.slow
@pytest.mark.parametrize("which", list(EXPECTED))
def test_the_plan_finds_interpreter_version_and_packages_of_each_base_without_keys(which, tmp_path, local_bases):
    spec = job_on(tmp_path, getattr(local_bases, which))
    shown = io.StringIO()
    plan = plan_of(spec, shown)

    python, version, provides, reason = EXPECTED[which]
    assert (plan.base.python, plan.base.python_version, plan.base.provides) == (python, version, provides)
    assert plan.base.wheel_platform == "x86_64-manylinux_2_36"  # bookworm's glibc, from its /etc/os-release
    assert plan.command[0] == python  # the image's command starts the base's own interpreter
    text = plan.render()
    assert f"python     {python}: " in text and reason in text  # which interpreter, and why
    assert "read from the base image (Debian GNU/Linux 12 (bookworm))" in text
    assert "Reading base image" in shown.getvalue()  # read from the base, not assumed
    if which == "torch_dist_packages":
        assert plan.base.pins == (("torch", "2.13.0"),)  # the rest of requirements.txt must agree with it
    if which == "venv":
        assert "systemonly" not in plan.base.provides  # the system's packages are not the venv's


@pytest.mark.slow
def test_a_base_is_read_once_per_digest_with_progress_then_from_the_cache(tmp_path, local_bases, registry, monkeypatch):
    base = local_bases.debian
    first = io.StringIO()
    plan_of(job_on(tmp_path, base, "first"), first)
    lines = first.getvalue().splitlines()
    assert lines[0].startswith(f"Reading base image {registry.host}/base/debian to find its Python")
    assert any(line.startswith("  reading base layer 1/1 (") for line in lines)  # a large layer: progress shown
    assert lines[-1] == "Base image: python3 (Python 3.11, /usr/bin/python3.11), 0 distributions installed"

    def no_layers(*args, **kwargs):
        raise AssertionError("a base already read must not be read again")

    monkeypatch.setattr(base_inspection, "read_layer", no_layers)
    again = io.StringIO()
    assert plan_of(job_on(tmp_path, base, "again"), again).base.python == "python3"
    assert again.getvalue() == ""
    # The same image under another tag: the same digest, so nothing is read either.
    manifest = requests.get(f"{registry.url}/v2/base/debian/manifests/python3-bookworm", headers={"Accept": ACCEPT})
    requests.put(
        f"{registry.url}/v2/base/debian/manifests/retagged",
        data=manifest.content,
        headers={"Content-Type": manifest.headers["Content-Type"]},
    ).raise_for_status()
    assert (
        plan_of(job_on(tmp_path, base.replace(":python3-bookworm", ":retagged"), "retagged")).base.python == "python3"
    )
    digest = manifest.headers["Docker-Content-Digest"]
    assert (tmp_path / "cache" / "bases" / f"{digest[7:]}.json").is_file()


@pytest.mark.slow
def test_a_base_pinned_by_digest_and_already_read_needs_no_registry(tmp_path, local_bases, registry, request):
    plan_of(job_on(tmp_path, local_bases.debian, "first"))
    digest = requests.get(
        f"{registry.url}/v2/base/debian/manifests/python3-bookworm", headers={"Accept": ACCEPT}
    ).headers["Docker-Content-Digest"]
    request.getfixturevalue("no_network")
    pinned = job_on(tmp_path, f"{registry.host}/base/debian@{digest}", "pinned")
    assert plan_of(pinned).command[0] == "python3"


@pytest.mark.slow
def test_a_dry_run_without_the_base_registry_uses_what_was_read_before_or_says_what_to_do(
    tmp_path, local_bases, registry
):
    local_bases.debian  # noqa: B018 - pushed to the registry behind the proxy
    proxy = FaultProxy(registry.port)
    try:
        through_proxy = f"{proxy.host}/base/debian:python3-bookworm"
        plan_of(job_on(tmp_path, through_proxy, "online"))
    finally:
        proxy.stop()
    shown = io.StringIO()
    offline = plan_of(job_on(tmp_path, through_proxy, "offline"), shown, retry=FAST_RETRY)
    assert offline.base.python == "python3"
    assert f"note: {proxy.host} cannot be reached; using what was read from {through_proxy}" in shown.getvalue()

    never_read = job_on(tmp_path, f"{proxy.host}/base/never-read:1", "never")
    with pytest.raises(RegistryUnreachableError) as caught:
        plan_of(never_read, retry=FAST_RETRY)
    assert "is not one the builder knows, and it cannot be read" in caught.value.problem
    assert "base_python = python3" in caught.value.fix and "base_python_version" in caught.value.fix


@pytest.mark.slow
def test_keys_override_what_is_read(tmp_path, local_bases):
    spec = job_on(
        tmp_path,
        local_bases.torch_dist_packages,
        extra="base_python = /usr/bin/python3.11\nbase_provides = deepspeed\n",
    )
    plan = plan_of(spec)  # base_python_version is not given: the base is read for it and its packages
    assert plan.base.python == "/usr/bin/python3.11" and plan.command[0] == "/usr/bin/python3.11"
    assert "base_python in config.ini" in plan.render()
    assert set(plan.base.provides) == {"torch", "numpy", "six", "deepspeed"}
    assert plan.base.source == "read from the base image (Debian GNU/Linux 12 (bookworm)); base_provides in config.ini"


def test_a_base_described_by_its_keys_is_not_read(tmp_path, no_network):
    spec = job_on(
        tmp_path,
        "registry.example.com/platform/base:7",
        extra="base_python = python3\nbase_python_version = 3.12\nbase_provides = torch\n",
    )
    plan = plan_of(spec)
    assert (plan.base.python, plan.base.python_version, plan.base.provides) == ("python3", "3.12", ("torch",))


# --- the table against inspection --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "reference, layout",
    [
        ("python:3.11-slim-bookworm", PYTHON_311_SLIM_BOOKWORM),
        ("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", PYTORCH_2_13_RUNTIME),
    ],
)
def test_the_table_agrees_with_inspection_of_the_well_known_layouts(reference, layout, registry, podman_root):
    table = table_entry(parse_reference(reference))
    pushed = push_layout(podman_root, layout, f"{registry.host}/{parse_reference(reference).repository}:table-check")
    ref = parse_reference(pushed)
    with RegistryClient(ref.registry) as client:
        found = base_inspection.read_base(client, resolve_base(client, ref), Progress())
    assert found.python == "python"  # what the table's bases run
    assert found.python_version == table.python_version
    assert found.wheel_platform == table.wheel_platform
    installed = dict(found.distributions)
    assert set(table.provides) <= set(installed)  # what the table leaves out of the layer is there
    assert all(installed[name] == version for name, version in table.pins)

"""The fixtures of the whole suite (registered in tests/conftest.py): local runs in a temporary
directory, one environment isolation, a real registry with a busybox base, and fake clusters."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import bcrypt
import pytest

from tests.support import upstream_crds
from tests.support.base_image import build_rootfs
from tests.support.base_image import push_base
from tests.support.base_images import LocalBases
from tests.support.fake_apiserver import FakeKube
from tests.support.registry import Registry
from tests.support.registry import have_registry
from tests.support.registry import podman
from tests.support.registry import self_signed_cert
from tests.support.trainer_status_server import TrainerStatusServer
from tests.support.trainer_status_server import make_tls
from vdk.plugin.ml_training.k8s import retries
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.local import launcher

# Settings of the machine that would change what a test sees (the plugin's own VDK_ML_TRAINING_*
# too, but for where local runs keep their files and where the upstream CRDs are).
MACHINE_SETTINGS = (
    "KUBECONFIG",
    "KUBERNETES_SERVICE_HOST",
    "REGISTRY_AUTH_FILE",
    "SOURCE_DATE_EPOCH",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    # the stores a job's datasets are read from (the tests give their own)
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "HF_TOKEN",
    "HF_ENDPOINT",
    # a Kubeflow TrainJob's status endpoint (the tests give their own: trainer_status_server)
    "KUBEFLOW_TRAINER_SERVER_URL",
    "KUBEFLOW_TRAINER_SERVER_CA_CERT",
    "KUBEFLOW_TRAINER_SERVER_TOKEN",
    "DISABLE_KUBEFLOW_INTEGRATION",
)


TEST_SETTINGS = (launcher.RUNS_DIR_ENV, upstream_crds.CRD_DIR_ENV)

# Where the session's podman storage goes: a directory to make it in (default: see podman_storage_dir).
PODMAN_DIR_ENV = "VDK_ML_TRAINING_TEST_PODMAN_DIR"
MEMORY = Path("/dev/shm")
MEMORY_STORAGE_MIN_BYTES = 16 << 30  # the end-to-end tests' images and containers take up to ~8 GB


# Set when the session started with SIGHUP ignored (nohup), so that its xdist workers, which start with the
# default, ignore it too.
HANGUP_IGNORED_ENV = "VDK_ML_TRAINING_TEST_HANGUP_IGNORED"


def pytest_configure(config):
    """Under nohup SIGHUP is ignored, and an ignored signal stays ignored in every process started: `vdk` then
    rightly keeps ignoring it (as nohup asks), and each test that sends it SIGHUP fails. A handler that does
    nothing keeps the session as immune, while the processes it starts get the default (exec resets a
    handled signal, never an ignored one)."""
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN or os.environ.get(HANGUP_IGNORED_ENV):
        os.environ[HANGUP_IGNORED_ENV] = "1"
        signal.signal(signal.SIGHUP, lambda signum, frame: None)
    # A session started in the background of a non-interactive shell (`make test &`) has SIGINT ignored, and so has
    # every process it starts (its xdist workers too): the tests start vdk as a user at a terminal does, with
    # Ctrl-C's default, or their Ctrl-C does nothing (vdk rightly keeps a signal it was started ignoring ignored).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def podman_storage_dir() -> Path:
    """PODMAN_DIR_ENV, else memory (/dev/shm) when at least MEMORY_STORAGE_MIN_BYTES are free there and
    available, else the system's temporary directory (/tmp: a short path, as podman's run root must be under 50
    characters; pytest's session directory is longer). Storage left by a session that was killed is removed
    first (its owner's pid is gone)."""
    configured = os.environ.get(PODMAN_DIR_ENV)
    if not configured:
        _remove_stale_storage(MEMORY)  # before judging what is free there
    parent = Path(configured) if configured else MEMORY if memory_is_plenty() else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_storage(parent)
    root = Path(tempfile.mkdtemp(prefix="vdk-ml-podman-", dir=parent))
    (root / "owner.pid").write_text(str(os.getpid()))
    return root


def _remove_stale_storage(parent: Path) -> None:
    """The podman storages under `parent` whose session is gone (killed: its owner's pid is gone)."""
    for stale in parent.glob("vdk-ml-podman-*"):
        try:
            pid = int((stale / "owner.pid").read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            _remove_podman_storage(stale)


def memory_is_plenty() -> bool:
    try:
        stats = os.statvfs(MEMORY)
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return False
    lines = meminfo.splitlines()
    available = next((int(line.split()[1]) * 1024 for line in lines if line.startswith("MemAvailable:")), 0)
    return stats.f_bavail * stats.f_frsize >= MEMORY_STORAGE_MIN_BYTES and available >= MEMORY_STORAGE_MIN_BYTES


def _remove_podman_storage(root: Path) -> None:
    podman(root, "system", "reset", "--force", check=False, timeout=600)
    shutil.rmtree(root, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Every test skipped for want of the upstream CRDs is reported at one place, so the summary has one
    line with the reason (a skip raised in a fixture is otherwise reported at each test)."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple) and upstream_crds.UNAVAILABLE in report.longrepr[2]:
        report.longrepr = (upstream_crds.__file__, 1, report.longrepr[2])
    return report


@pytest.fixture(autouse=True)
def local_runs_in_a_temporary_directory(tmp_path_factory, monkeypatch):
    """Run directories of local runs (failed ones stay a day, with a FIFO while running) go to a
    temporary directory, not the user's $TMPDIR/vdk-ml-training-<uid>: through the environment for
    `vdk` processes, and directly for in-process runs of tests that clean the environment."""
    runs = tmp_path_factory.mktemp("local-runs")
    monkeypatch.setenv(launcher.RUNS_DIR_ENV, str(runs))
    monkeypatch.setattr(launcher, "runs_dir", lambda: runs)
    return runs


@pytest.fixture(autouse=True)
def vdk_defaults_in_a_temporary_directory(tmp_path_factory, monkeypatch):
    """VDK's defaults (the default team of `vdk set-default`) are read from a temporary directory, not the
    user's ~/.vdk.internal: a developer's default team must not change what a test selects."""
    folder = tmp_path_factory.mktemp("vdk-defaults")
    monkeypatch.setenv("VDK_BASE_CONFIG_FOLDER", str(folder))
    return folder


@pytest.fixture
def isolated_environment(local_runs_in_a_temporary_directory, monkeypatch, tmp_path):
    """No credentials, CA bundles, caches, timestamps, kubeconfigs or plugin settings of the machine
    (or of other tests) leak into a test."""
    for name in list(os.environ):
        if name in MACHINE_SETTINGS or (name.startswith("VDK_ML_TRAINING_") and name not in TEST_SETTINGS):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg-runtime"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))


# The package index settings of the machine (pip's and uv's), which a test of index rules leaves out
MACHINE_INDEX_SETTINGS = (
    "PIP_FIND_LINKS",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
    "UV_NO_CONFIG",
)


@pytest.fixture
def only_named_indexes(isolated_environment, monkeypatch):
    """uv finds packages only in the indexes a test names: none of the machine's pip or uv index settings, and
    (isolated_environment) a cache of the test's own, as an overlay or a layer is cached by its index settings."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in MACHINE_INDEX_SETTINGS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    if not have_registry():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    server = Registry(tmp_path_factory.mktemp("registry"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def podman_root(tmp_path_factory):
    """podman's storage for the session (vfs: every layer and container is a full copy of its root
    filesystem), in memory when there is plenty (ten times faster to copy than this disk), else on disk
    (podman_storage_dir); removed when the session ends."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    root = podman_storage_dir()
    yield root
    _remove_podman_storage(root)


@pytest.fixture(scope="session")
def base_image(registry, podman_root, tmp_path_factory) -> str:
    """`127.0.0.1:PORT/base/busybox:1`: busybox + a fake python, pushed by podman."""
    tarball = build_rootfs(tmp_path_factory.mktemp("base") / "rootfs")
    return push_base(podman_root, tarball, f"{registry.host}/base/busybox:1")


@pytest.fixture(scope="session")
def local_bases(registry, podman_root) -> LocalBases:
    """Debian-built bases (python3 only, python only, a venv, torch in dist-packages), each built and
    pushed to the registry when a test first asks for it; see tests/support/base_images.py."""
    return LocalBases(podman_root, registry.host)


# The retries of API requests as a user's are made (k8s/retries.py), with their waits scaled down: tests of
# faults see every retry and its bound without waiting a user's seconds.
FAST_RETRIES = retries.RetryPolicy(attempts=4, base_seconds=0.01, max_wait_seconds=0.05, budget_seconds=20)


@pytest.fixture
def fast_retries(monkeypatch) -> retries.RetryPolicy:
    """Every API request of this test (in this process) retried under FAST_RETRIES."""
    monkeypatch.setattr(retries, "DEFAULT_POLICY", FAST_RETRIES)
    return FAST_RETRIES


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test (a dry run of a described base contacts nothing)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run must not contact anything")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """cluster(**FakeKube options) -> (fake, client): a started fake server and a KubeClient that
    reaches it through a kubeconfig (KUBECONFIG points at it, as for a user and for `vdk`)."""
    started = []
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    def start(namespace: str = "ml", **options) -> tuple[FakeKube, KubeClient]:
        fake = FakeKube(**options).start()
        started.append(fake)
        path = fake.kubeconfig(tmp_path / f"kubeconfig-{len(started)}", namespace=namespace)
        monkeypatch.setenv("KUBECONFIG", str(path))
        return fake, KubeClient()

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory):
    """docker-registry with htpasswd auth over TLS (self-signed)."""
    root = tmp_path_factory.mktemp("auth-registry")
    cert, key = self_signed_cert(root)
    htpasswd = root / "htpasswd"
    htpasswd.write_text("ada:" + bcrypt.hashpw(b"correct-horse", bcrypt.gensalt(rounds=5)).decode() + "\n")
    server = Registry(root / "server", htpasswd=htpasswd, tls=(cert, key))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory):
    """A real S3 API on loopback: moto in server mode (tests/support/s3_store.py). Tests use buckets of their own."""
    from tests.support.s3_store import start_s3

    store = start_s3(tmp_path_factory.mktemp("moto") / "moto.log")
    yield store
    store.stop()


@pytest.fixture
def hf_hub():
    """A local Hugging Face Hub endpoint (tests/support/hf_hub.py) for huggingface_hub's own code."""
    from tests.support.hf_hub import LocalHub

    hub = LocalHub()
    yield hub
    hub.stop()


@pytest.fixture(scope="session")
def trainer_status_tls(tmp_path_factory):
    """A CA and the certificate it signs for Kubeflow Trainer's status server (made once per session)."""
    return make_tls(tmp_path_factory.mktemp("trainer-status-tls"))


@pytest.fixture
def trainer_status_server(trainer_status_tls, tmp_path):
    """start(**options) -> a started TrainerStatusServer (tests/support/trainer_status_server.py), with its
    token and CA files under the test's directory; stopped after the test."""
    started = []

    def start(**options):
        server = TrainerStatusServer(trainer_status_tls, tmp_path / f"trainer-status-{len(started)}", **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def control_service(tmp_path, monkeypatch, registry, base_image):
    """control_service(**TestControlService options) -> (service, fake): a started test VDK Control Service
    (tests/support/control_service.py) set up for ml-training (its entry `ml-training`, the launcher's switch and
    the training namespace `ml` in its vdkOptions, this plugin's builder as a local process pushing to the tests'
    registry), and the fake API server its data-job pods (namespace data-jobs) and their runs (namespace ml) use;
    KUBECONFIG reaches the latter for the test."""
    from tests.support.control_service import TestControlService
    from tests.support.control_service_pods import local_builder
    from vdk.plugin.ml_training.job.keys import variable

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    started = []

    def start(**options):
        fake = FakeKube(namespaces=("default", "ml", "data-jobs")).start()
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "kubeconfig-ml", namespace="ml")))
        options.setdefault("supported", {"ml-training": {"baseImage": base_image, "vdkImage": "vdk/vdk-ml:1",
                                                         "builderImage": "vdk/vdk-ml-training-builder:1"}})  # fmt: skip
        options.setdefault("builder", local_builder())
        options.setdefault("vdk_options", {variable("launcher"): "true", variable("namespace"): "ml"})
        options.setdefault("kubeconfig", fake.kubeconfig(tmp_path / "kubeconfig-pod", namespace="data-jobs"))
        service = TestControlService(tmp_path / "control-service", fake, f"{registry.host}/data-jobs", **options)
        started.append((service.start(), fake))
        return service, fake

    yield start
    for service, fake in started:
        service.stop()
        fake.stop()

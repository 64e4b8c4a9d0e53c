"""The viewers ML engineers already open, started on this machine on a loopback port: TensorBoard over a folder of
event files (ops/boards.py), Optuna's dashboard over a copy of a sweep's study (ops/boards.py too).

Each runs in an environment of its own, as the data tools do (ops/data_tools.py): `uv run --with tensorboard`
(or `optuna-dashboard`), made once and cached by uv on top of this interpreter, from the package indexes the
dependency layer uses, searched as the job's `index_strategy` says (data_tools.uv_run).
Why apart: TensorBoard is 130 MB with its server (grpcio, its data server, Pillow,
Werkzeug), optuna-dashboard 90 MB, and neither is needed to train, deploy or follow a run. A viewer installed beside
vdk (its program next to this interpreter) is used as it is. Where neither works (no index reachable), the error
says how to get one.

A viewer is a process of its own session, stopped with `stop()` (and with `vdk`: its end closes the viewer's
lifeline, a pipe whose end it waits for) — nothing is left behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.vocabulary.package_indexes import DEFAULT_INDEX_STRATEGY

HOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 600.0  # the first start installs the viewer's environment (a minute or two)
STOP_GRACE_SECONDS = 10.0
_POLL_SECONDS = 0.3


@dataclass(frozen=True)
class ViewerKind:
    """A viewer: its name for people, its requirements, the program it runs and how it is told where to listen."""

    name: str
    requirements: tuple[str, ...]
    program: str  # its console script
    ready_path: str  # answers 200 once it serves

    def command(
        self, arguments: list[str], index_strategy: str = DEFAULT_INDEX_STRATEGY, job_dir: Path | None = None
    ) -> list[str]:
        """The viewer installed next to this interpreter, else uv's environment of it, installed by the index rules
        of the job in `job_dir` (its `index_strategy`) as the data tools' is."""
        beside = Path(sys.executable).parent / self.program
        if beside.is_file() and os.access(beside, os.X_OK):
            return [str(beside), *arguments]
        from vdk.plugin.ml_training.ops.data_tools import uv_run

        return [*uv_run(self.requirements, index_strategy, job_dir), self.program, *arguments]

    def how_to_get(self) -> str:
        return (
            f"install it beside vdk (`{sys.executable} -m pip install {' '.join(self.requirements)}`), or make the "
            "package index reachable (vdk installs it once, into an environment of its own, with uv)"
        )


TENSORBOARD = ViewerKind("TensorBoard", ("tensorboard",), "tensorboard", "/data/environment")


def optuna_dashboard() -> ViewerKind:
    """Optuna's dashboard, with the Optuna that wrote the study (the same storage schema)."""
    from importlib import metadata

    try:
        optuna = f"optuna=={metadata.version('optuna')}"
    except metadata.PackageNotFoundError:
        optuna = "optuna"
    return ViewerKind("Optuna Dashboard", ("optuna-dashboard", optuna), "optuna-dashboard", "/api/meta")


@dataclass
class Viewer:
    """A viewer serving on this machine until `stop()`."""

    kind: ViewerKind
    url: str
    process: subprocess.Popen
    what: str  # what it shows: a folder, a study
    log: Path
    lifeline: int | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {"viewer": self.kind.name, "url": self.url, "shows": self.what, "pid": self.process.pid}

    def wait(self) -> int:
        """Until the viewer ends (Ctrl-C reaches the caller, which stops it)."""
        return self.process.wait()

    def stop(self) -> None:
        """Stop the viewer and everything it started; wait for it."""
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        if self.process.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue
        self.process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def start_viewer(
    kind: ViewerKind,
    arguments: Callable[[int], list[str]],
    what: str,
    log: Path,
    say: Say = lambda text: None,
    timeout: float = START_TIMEOUT_SECONDS,
    index_strategy: str = DEFAULT_INDEX_STRATEGY,
    job_dir: Path | None = None,
) -> Viewer:
    """Start `kind` with `arguments(port)` on a free loopback port and wait until it answers; MLTrainingError when
    it cannot start (its log's last lines said). `index_strategy`, `job_dir`: the job's, whose index rules the
    viewer's install follows."""
    port = free_port()
    command = kind.command(arguments(port), index_strategy, job_dir)
    from vdk.plugin.ml_training.ops.data_tools import environment

    env = environment({})
    env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()  # the viewer's lifeline: vdk's end closes it, whatever ends vdk
    log.parent.mkdir(parents=True, exist_ok=True)
    where = "installed beside vdk" if command[0].endswith(kind.program) else "uv: " + " ".join(kind.requirements)
    say(f"Starting {kind.name} ({where})")
    try:
        with open(log, "wb") as out:
            process = subprocess.Popen(
                _with_lifeline(command, read_end),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                pass_fds=(read_end,),
            )
    except OSError as e:
        os.close(read_end)
        os.close(write_end)
        raise MLTrainingError(f"{kind.name} cannot start ({e})", kind.how_to_get()) from None
    os.close(read_end)
    viewer = Viewer(kind, f"http://{HOST}:{port}/", process, what, log, write_end)
    try:
        _wait_until_ready(viewer, timeout, say)
    except BaseException:
        viewer.stop()
        raise
    return viewer


def _with_lifeline(command: list[str], fd: int) -> list[str]:
    """The command under a shell that ends it (its whole session) when the pipe `fd` reaches its end."""
    script = (  # `kill 0`: the shell's process group, which start_new_session made the viewer's own
        'trap "kill -TERM 0 2>/dev/null" EXIT; "$@" & child=$!; '
        f'( cat <&{fd} >/dev/null; kill -TERM 0 ) & wait "$child"'
    )
    return ["/bin/sh", "-c", script, "viewer", *command]


def _wait_until_ready(viewer: Viewer, timeout: float, say: Say) -> None:
    started = time.monotonic()
    told = started
    while True:
        if viewer.process.poll() is not None:
            raise MLTrainingError(
                f"{viewer.kind.name} ended before it served (exit status {viewer.process.returncode}):\n"
                + _tail(viewer.log),
                viewer.kind.how_to_get(),
            )
        try:
            with urllib.request.urlopen(viewer.url.rstrip("/") + viewer.kind.ready_path, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        now = time.monotonic()
        if now - started > timeout:
            raise MLTrainingError(
                f"{viewer.kind.name} did not answer within {timeout:.0f} s:\n" + _tail(viewer.log),
                viewer.kind.how_to_get(),
            )
        if now - told >= 10:
            say(f"  still starting {viewer.kind.name} ({now - started:.0f} s; the first start installs it)")
            told = now
        time.sleep(_POLL_SECONDS)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"

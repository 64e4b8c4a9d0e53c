"""Starts torchrun for a `LaunchPlan` in a working directory outside the job (local/workdir.py), relays
rank 0's output, enforces the timeout, samples the ranks' memory and, whatever happens (a timeout, Ctrl-C,
SIGTERM, an error here, `vdk` killed: see local/lifeline.py), leaves no process behind."""

from __future__ import annotations

import codecs
import contextlib
import importlib.util
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from pathlib import Path
from typing import IO
from typing import Protocol

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.local import job_dir_mount
from vdk.plugin.ml_training.local import process_tree
from vdk.plugin.ml_training.local import workdir
from vdk.plugin.ml_training.local.data_links import link_datasets
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.lifeline import Lifeline
from vdk.plugin.ml_training.local.rank_memory import MemoryWatch
from vdk.plugin.ml_training.local.run_facts import full_run_facts
from vdk.plugin.ml_training.local.smoke_heartbeat import Heartbeat
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.vocabulary.wire import PROJECT

AGENT_LOG = "agent.log"
WORK_DIR = "work"  # the ranks' working directory inside a run directory
OUTPUTS_DIR = "outputs"  # in the job's image: the directory of the run directory the ranks work in (resume check)
RESTART_DIR = "restart-"  # a second start's run directory, inside the first start's
# Where run directories go instead of the default (tests point it at a temporary directory).
RUNS_DIR_ENV = "VDK_ML_TRAINING_RUNS_DIR"
FULL_RUNS = "full"  # full runs' directories below VDK_ML_TRAINING_RUNS_DIR: kept, never pruned
KEEP_FAILED_RUNS_SECONDS = 86400
PORT_ATTEMPTS = 3
HEARTBEAT_POLL_SECONDS = 1.0  # how often a smoke run's steps are looked at while it runs


@dataclass(frozen=True)
class LocalRun:
    """What happened to the process tree: torchrun's exit code, time taken, why it was stopped."""

    plan: LaunchPlan
    run_dir: Path
    exit_code: int | None
    wall_seconds: float
    timed_out: bool
    engine: str | None = None  # the container engine that ran the job's image; None: this machine's Python
    work: workdir.WorkDir | None = None  # the ranks' working directory on this machine (None: the image's)
    peak_memory: Mapping[int | str, int] = field(default_factory=dict)  # rank -> peak resident bytes
    # in the job's image, with the resume check: the directory of the first start's run directory the ranks worked in
    outputs: Path | None = None

    @property
    def agent_log(self) -> Path:
        return self.run_dir / AGENT_LOG


def runs_dir() -> Path:
    """Where run directories live; a failed run's stays for its logs until it is a day old."""
    configured = os.environ.get(RUNS_DIR_ENV)
    if configured:
        return Path(configured)
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"vdk-ml-training-{user}"


def full_runs_dir() -> Path:
    """Where full runs keep their directories (logs, and the working directory with what the run wrote):
    on disk and never pruned, `$XDG_DATA_HOME/vdk-ml-training/runs` (`~/.local/share/...`), or `full/`
    of VDK_ML_TRAINING_RUNS_DIR when that is set."""
    configured = os.environ.get(RUNS_DIR_ENV)
    if configured:
        return Path(configured) / FULL_RUNS
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / PROJECT / "runs"


def check_torch() -> None:
    """torchrun and the ranks run in this interpreter's environment: without torch there, nothing
    would start and torchrun's log would only say so in a traceback."""
    if importlib.util.find_spec("torch") is None:
        raise MLTrainingError(
            f"torch is not installed in {sys.executable}'s environment, which runs the training processes",
            f"pip install torch (or the CUDA build you need) into that environment, e.g. "
            f"`{sys.executable} -m pip install torch`, then run again",
        )


@dataclass(frozen=True)
class Attempt:
    """One attempt to start a plan's torchrun (another port is tried when the first was taken)."""

    plan: LaunchPlan
    run_dir: Path
    port: int
    env: dict[str, str]  # the plan's and the run's variables
    stdout: int  # where torchrun's stdout goes: a file descriptor, or subprocess.PIPE
    stderr: IO[bytes]  # torchrun's own log
    work: workdir.WorkDir | None  # the ranks' working directory; None: the image's job directory


class Starter(Protocol):
    """Where a plan's torchrun runs: on this machine (`HostStarter`), or in the job's image
    (local/container.py). It starts the process tree and stops all of it."""

    @property
    def engine(self) -> str | None:
        """The container engine, None for this machine."""

    def check(self) -> None:
        """Raise MLTrainingError if nothing could start (before the run directory is made)."""

    def prepare(self, plan: LaunchPlan, run_dir: Path) -> workdir.WorkDir | None:
        """The ranks' working directory on this machine, made in `run_dir`; None when the image has it."""

    def start(self, attempt: Attempt) -> subprocess.Popen:
        """Start the attempt's torchrun."""

    def stop(self, proc: subprocess.Popen, run_dir: Path) -> None:
        """Stop every process of the run (terminating first, so that ranks dump their stacks) and wait."""

    def ended(self, proc: subprocess.Popen, run_dir: Path) -> None:
        """torchrun ended by itself: stop what of its run outlived it (a DataLoader worker of a rank that
        died is reparented to init, and may wait for a rank that is gone forever)."""

    def release(self) -> None:
        """The run is over: cut its lifeline (local/lifeline.py)."""


class HostStarter:
    """torchrun in this interpreter's environment, in its own session, on a lifeline: torchrun's agent
    stops the run if `vdk` ends without doing so (killed), and gets the job directory read-only where this
    machine allows (local/job_dir_mount.py)."""

    engine = None

    def __init__(self) -> None:
        self._lifeline: Lifeline | None = None
        self._protect: dict[str, str] = {}
        self._lock = threading.Lock()  # start and stop_running may come from two threads
        self._running: tuple[subprocess.Popen, Path] | None = None
        self._stopping = False

    def check(self) -> None:
        check_torch()

    def prepare(self, plan: LaunchPlan, run_dir: Path) -> workdir.WorkDir:
        protected = job_dir_mount.available()
        work = workdir.prepare(plan.spec.job_dir, run_dir / WORK_DIR, protected=protected, files=plan.files)
        if protected:
            self._protect = {
                job_dir_mount.PROTECT_ENV: str(work.job_dir),
                job_dir_mount.WRITABLE_ENV: str(run_dir.resolve()),
            }
        link_datasets(work.path, plan.data)
        return work

    def start(self, attempt: Attempt) -> subprocess.Popen:
        with self._lock:
            if self._stopping:
                raise KeyboardInterrupt("stopped before it started")
            proc = self._start(attempt)
            self._running = (proc, attempt.run_dir)
            return proc

    def stop_running(self) -> None:
        """From another thread (a pruner; the main thread that Ctrl-C reached while runs go on in others): stop
        the run this starter started, as a timeout does, and start none after it."""
        with self._lock:
            self._stopping = True
            running = self._running
        if running is not None:
            self.stop(*running)

    def _start(self, attempt: Attempt) -> subprocess.Popen:
        self.release()  # a previous attempt's (another port)
        lifeline = self._lifeline = Lifeline()
        plan, work = attempt.plan, attempt.work
        proc = subprocess.Popen(
            plan.command(attempt.run_dir, attempt.port),
            cwd=work.path if work else plan.spec.job_dir,
            env={**attempt.env, **self._protect, **lifeline.env()},
            stdin=subprocess.DEVNULL,
            stdout=attempt.stdout,
            stderr=attempt.stderr,
            pass_fds=(lifeline.read_fd,),
            start_new_session=True,  # Ctrl-C reaches us only; we stop the whole tree ourselves
        )
        lifeline.started()
        return proc

    def stop(self, proc: subprocess.Popen, run_dir: Path) -> None:
        terminate(proc, run_dir)

    def ended(self, proc: subprocess.Popen, run_dir: Path) -> None:
        terminate(proc, run_dir)  # the run's process groups: nothing is left, or what is goes now

    def release(self) -> None:
        if self._lifeline is not None:
            self._lifeline.cut()
            self._lifeline = None


def launch(
    plan: LaunchPlan,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    starter: Starter | None = None,
    again: LocalRun | None = None,
) -> LocalRun:
    """Run the plan to its end and return what happened. KeyboardInterrupt stops every process first. `again`: start
    it where that run ran (its working directory, with what it wrote there, as a restarted pod finds its volume; its
    run name), with result files of its own in that run's directory."""
    starter = starter or HostStarter()
    starter.check()
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    runs = again.run_dir if again is not None else full_runs_dir() if plan.mode == protocol.FULL else runs_dir()
    runs.mkdir(mode=0o700, parents=True, exist_ok=True)
    if plan.mode != protocol.FULL and again is None:
        _prune_old_runs(runs)
    for attempt in range(PORT_ATTEMPTS):
        run = _launch_once(plan, runs, stdout, stderr, starter, again)
        if attempt + 1 == PORT_ATTEMPTS or not _lost_port_race(run):
            return run
        shutil.rmtree(run.run_dir, ignore_errors=True)  # nothing ran: try another port
    raise AssertionError("unreachable")


def _launch_once(
    plan: LaunchPlan, runs: Path, stdout: IO[str], stderr: IO[str], starter: Starter, again: LocalRun | None = None
) -> LocalRun:
    started = time.monotonic()
    # full runs' directories are kept: the time in their name tells them apart
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-") if plan.mode == protocol.FULL else ""
    prefix = RESTART_DIR if again is not None else f"{plan.spec.name}-{stamp}"
    run_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=runs))
    try:
        work = again.work if again is not None else starter.prepare(plan, run_dir)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    # the ranks' pids are this machine's only when they run here (a container has its own pid namespace)
    memory = MemoryWatch(run_dir) if starter.engine is None else contextlib.nullcontext()
    # A terminal's name means nothing inside a container: rank 0 writes its stderr to a FIFO there.
    with (
        open(run_dir / AGENT_LOG, "wb") as agent_log,
        _Console(stdout, stderr, run_dir, terminal=starter.engine is None) as console,
    ):
        env = {**plan.env, protocol.RUN_DIR: str(run_dir), **console.env}
        env[protocol.RUN_NAME] = (again.run_dir if again is not None else run_dir).name  # whose checkpoints
        outputs = None
        if plan.mode == protocol.FULL:
            env.update(full_run_facts(plan.spec, run_dir.name))
        if work is not None:
            env[protocol.JOB_DIR] = str(work.job_dir)
            env[protocol.OUTPUT_DIR] = str(work.path)  # as on a cluster: what the run writes, beside the code
        elif protocol.SMOKE_RESUME in plan.env:  # in the image: a directory both starts see, as a pod's volume
            outputs = (again.run_dir if again is not None else run_dir) / OUTPUTS_DIR
            outputs.mkdir(mode=0o777, exist_ok=True)
            os.chmod(outputs, 0o777)  # the image's user may be another uid
            env[protocol.OUTPUT_DIR] = str(outputs)
        try:
            proc = starter.start(Attempt(plan, run_dir, free_port(), env, console.stdout_target, agent_log, work))
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing started: nothing to look at
            raise
        console.started(proc)
        timed_out = False
        with memory:
            try:
                _wait(proc, plan, run_dir, stderr)
                starter.ended(proc, run_dir)
            except subprocess.TimeoutExpired:
                timed_out = True
                starter.stop(proc, run_dir)
            except BaseException:
                starter.stop(proc, run_dir)
                raise
            finally:
                starter.release()
    peaks = dict(memory.peaks) if isinstance(memory, MemoryWatch) else {}
    wall = time.monotonic() - started
    return LocalRun(plan, run_dir, proc.returncode, wall, timed_out, starter.engine, work, peaks, outputs)


def free_port() -> int:
    """A free TCP port below the range the kernel hands out on its own (so no outgoing connection
    takes it before torchrun listens on it), or any free port if that range is unknown."""
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(50):
        port = random.randrange(20000, max(low, 20001))
        if _bindable(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lost_port_race(run: LocalRun) -> bool:
    """Another process took the port between our check and torchrun's listen; no rank started."""
    if run.exit_code == 0 or protocol.read_results(run.run_dir):
        return False
    try:
        return "EADDRINUSE" in run.agent_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _prune_old_runs(runs: Path) -> None:
    cutoff = time.time() - KEEP_FAILED_RUNS_SECONDS
    for old in runs.iterdir():
        if old.name == FULL_RUNS:
            continue
        try:
            if old.is_dir() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def terminate(proc: subprocess.Popen, run_dir: Path) -> None:
    """SIGTERM torchrun's agent, which passes it on to each rank once; then to torchrun's process group, every
    rank's (ranks started by torchrun live in their own sessions) and every process below the agent (in any
    session, daemons included: the agent adopts them); SIGKILL whatever is left after a grace period."""
    process_tree.stop_through_agent(proc.pid, run_dir, poll=proc.poll)
    proc.wait()


def _wait(proc: subprocess.Popen, plan: LaunchPlan, run_dir: Path, stderr: IO[str]) -> None:
    """proc.wait(timeout=plan.timeout_seconds); a smoke run that stays quiet says how far it got meanwhile."""
    if plan.mode != protocol.SMOKE:
        proc.wait(timeout=plan.timeout_seconds)
        return

    def say(line: str) -> None:
        stderr.write(line + "\n")
        stderr.flush()

    heartbeat = Heartbeat(run_dir, plan.spec.smoke_steps, plan.timeout_seconds, say)
    deadline = None if plan.timeout_seconds is None else heartbeat.started + plan.timeout_seconds
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, plan.timeout_seconds or 0)
        try:
            proc.wait(timeout=HEARTBEAT_POLL_SECONDS if left is None else min(left, HEARTBEAT_POLL_SECONDS))
            return
        except subprocess.TimeoutExpired:
            heartbeat.tick()


class _Console:
    """Where rank 0's output goes.

    stdout: torchrun (and so rank 0) writes straight to our stdout's file descriptor when it has one,
    so a terminal stays a terminal; otherwise (click's test runner) through a pipe copied into
    `stdout`. stderr: torchrun's own goes to agent.log, so rank 0 reopens ours: the terminal by
    name, or else a FIFO that a thread copies into `stderr`.
    """

    def __init__(self, stdout: IO[str], stderr: IO[str], run_dir: Path, terminal: bool = True):
        self.stdout, self.stderr, self.run_dir = stdout, stderr, run_dir
        self.terminal = terminal  # rank 0 may open our terminal by its name
        self.env: dict[str, str] = {}
        self.stdout_target: int = subprocess.PIPE
        self._threads: list[threading.Thread] = []
        self._fifo_fds: tuple[int, int] | None = None
        self._fifo: Path | None = None

    def __enter__(self) -> _Console:
        out_fd = _real_fd(self.stdout)
        self.stdout_target = out_fd if out_fd is not None else subprocess.PIPE
        err_fd = _real_fd(self.stderr)
        if self.terminal and err_fd is not None and os.isatty(err_fd):
            self.env[protocol.CONSOLE_STDERR] = os.ttyname(err_fd)
        else:
            try:
                self._relay_stderr_through_fifo(err_fd)
            except BaseException:
                self._remove_fifo()
                raise
        return self

    def _relay_stderr_through_fifo(self, err_fd: int | None) -> None:
        fifo = self.run_dir / "rank-0.stderr"
        try:
            os.mkfifo(fifo, 0o600)
        except (AttributeError, OSError):
            return  # no FIFOs here: rank 0's stderr joins its stdout
        self._fifo = fifo  # removed on exit, whatever happens next
        read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            # Our own writer end keeps the reader from seeing end-of-file before rank 0 opens it.
            self._fifo_fds = (read_fd, os.open(fifo, os.O_WRONLY))
        except BaseException:
            os.close(read_fd)
            raise
        os.set_blocking(read_fd, True)
        self._copy(lambda: os.read(read_fd, 65536), _sink(self.stderr, err_fd))
        self.env[protocol.CONSOLE_STDERR] = str(fifo)

    def started(self, proc: subprocess.Popen) -> None:
        stdout = proc.stdout
        if stdout is not None:
            # a binary pipe is a BufferedReader, which typeshed's IO does not say
            self._copy(lambda: stdout.read1(65536), _sink(self.stdout, None))  # type: ignore[attr-defined]

    def __exit__(self, *exc) -> None:
        try:
            if self._fifo_fds:
                os.close(self._fifo_fds[1])
            for thread in self._threads:
                # A process that outlived the run (a stray DataLoader worker) may hold a pipe open.
                thread.join(timeout=2)
            if self._fifo_fds:
                os.close(self._fifo_fds[0])
            self.stdout.flush()
            self.stderr.flush()
        finally:
            self._remove_fifo()

    def _remove_fifo(self) -> None:
        """A FIFO left in a run directory blocks whoever later opens it to read the logs."""
        if self._fifo is not None:
            try:
                self._fifo.unlink()
            except FileNotFoundError:
                pass
            self._fifo = None

    def _copy(self, read: Callable[[], bytes], write: Callable[[bytes], None]) -> None:
        def pump() -> None:
            try:
                while True:
                    data = read()
                    if not data:
                        return
                    write(data)
            except (OSError, ValueError):
                return

        thread = threading.Thread(target=pump, name="vdk-ml-console", daemon=True)
        thread.start()
        self._threads.append(thread)


def _real_fd(stream: IO[str]) -> int | None:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    stream.flush()
    return fd


def _sink(stream: IO[str], fd: int | None) -> Callable[[bytes], None]:
    if fd is not None:

        def write_fd(data: bytes) -> None:
            while data:
                data = data[os.write(fd, data) :]

        return write_fd
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write_text(data: bytes) -> None:
        stream.write(decoder.decode(data))
        stream.flush()

    return write_text

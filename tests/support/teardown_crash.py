"""Jobs whose processes crash in their teardown, for the tests of how a rank ends (runtime/rank_process.py):
`abort_at_exit.c` built with `cc` into a library whose destructor calls abort() when the process exits through
exit() — as gloo's threads now and then do after a script ended well — and the code of a job that loads it once
it has trained, after leaving what only the end of a process writes (a file never closed, a log record that
logging writes when it shuts down, a thread still at work, an exit handler: `leftovers`), and prints through C's
stdout buffer. `--abort-before-returning` crashes rank 1 (worker 1) before its script returns instead.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("abort_at_exit.c")
LIBRARY = "abort_at_exit.so"
# What the library's destructor prints as it aborts the process (it never runs when the process ends by os._exit).
TEARDOWN_ABORT = "abort_at_exit: abort() in the process's teardown"
ABORT_BEFORE_RETURNING = "--abort-before-returning"

LEFTOVERS = '''"""What a script leaves for the end of its process to write."""
import atexit
import logging
import logging.handlers
import os
import threading
import time

_kept = []  # alive to the end of the process: its files are closed, and so written, only then


def leave(directory, name):
    def path(what):
        return os.path.join(directory, f"{what}-{name}.txt")

    f = open(path("left-open"), "w", buffering=1 << 16)
    f.write("written through a file never closed\\n")
    _kept.append(f)
    log = logging.getLogger(f"leftovers.{name}")
    log.propagate = False
    target = logging.FileHandler(path("log"), "w")
    held = logging.handlers.MemoryHandler(1000, flushLevel=logging.CRITICAL, target=target)
    log.addHandler(held)
    log.warning("a record held until logging shuts down")
    _kept.append(held)

    def late():
        time.sleep(1)
        with open(path("thread"), "w") as out:
            out.write("the thread ended\\n")

    threading.Thread(target=late).start()  # not a daemon: python waits for it before the exit handlers

    def at_exit():
        with open(path("atexit"), "w") as out:
            out.write(f"after the thread: {os.path.exists(path('thread'))}\\n")

    atexit.register(at_exit)
'''

# What `leave` left, once its process has ended as python ends a script: file -> content.
LEFT_OVER = {
    "left-open": "written through a file never closed\n",
    "log": "a record held until logging shuts down\n",
    "thread": "the thread ended\n",
    "atexit": "after the thread: True\n",
}

# The end of every script below: a crash before returning when asked, else what only the process's end writes,
# a line in C's stdout buffer, and the library whose destructor aborts the process's teardown.
_END = """
def end(name, crash):
    library = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "abort_at_exit.so"))
    if crash:
        library.abort_now()
    leftovers.leave(os.environ["EVIDENCE_DIR"], name)
    library.say_buffered(f"{name}: in C's stdout buffer\\n".encode())
    # One write, so that the line is whole: torchrun starts its ranks as `python -u`, where print writes its text
    # and its newline apart, and another rank's line written between the two broke this one in two (under load).
    sys.stdout.write(f"{name}: the script returns\\n")
    sys.stdout.flush()
"""

# Any process, no torch: `python train.py [--exit N]`.
PLAIN = f'''import ctypes
import os
import sys

import leftovers
{_END}

if __name__ == "__main__":
    end("0", "{ABORT_BEFORE_RETURNING}" in sys.argv)
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
'''

_TRAIN = """
def train(rank):
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.ones(8, 4) * (rank + 1)).pow(2).mean().backward()
        optimizer.step()
    dist.destroy_process_group()
"""

# The ranks of torchrun: DDP on gloo, two steps.
DDP = f'''import ctypes
import os
import sys

import torch
import torch.distributed as dist

import leftovers
{_TRAIN}{_END}

if __name__ == "__main__":
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    train(rank)
    end(f"rank-{{rank}}", rank == 1 and "{ABORT_BEFORE_RETURNING}" in sys.argv)
'''

# One process that spawns its two workers (mp.spawn), which train as one world on gloo.
MP_SPAWN = f'''import ctypes
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import leftovers
{_TRAIN}{_END}

def worker(rank, crash):
    dist.init_process_group("gloo", rank=rank, world_size=2)
    train(rank)
    end(f"worker-{{rank}}", rank == 1 and crash)


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    mp.spawn(worker, args=("{ABORT_BEFORE_RETURNING}" in sys.argv,), nprocs=2)
    print("launcher: the script returns", flush=True)
'''


def build(directory: Path) -> Path:
    """The library compiled into `directory`: its path."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) to build abort_at_exit.so with: install gcc")
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / LIBRARY
    command = [compiler, "-shared", "-fPIC", "-O1", "-o", str(library), str(SOURCE)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return library


def job_files(directory: Path, script: str, entry: str = "train.py") -> dict[str, str | bytes]:
    """A job's files: `script` as `entry`, `leftovers.py`, and the library (built in `directory`)."""
    return {entry: script, "leftovers.py": LEFTOVERS, LIBRARY: build(directory).read_bytes()}


def left_over(evidence: Path, name: str) -> dict[str, str]:
    """What `leave` left in `evidence` for process `name` (rank-1, worker-0, ...): file -> content. The files are
    taken away: the next run starts from none."""
    found = {}
    for what in LEFT_OVER:
        path = evidence / f"{what}-{name}.txt"
        if path.exists():
            found[what] = path.read_text()
            path.unlink()
    return found

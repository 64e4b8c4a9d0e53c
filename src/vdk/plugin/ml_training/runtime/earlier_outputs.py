"""A run that continues another (`vdk execute --start --from RUN`) begins with RUN's outputs: before the user's code
runs, its output directory receives everything RUN's holds (RUN's directory of the same claim, mounted read-only at
VDK_ML_TRAINING_CONTINUES_DIR), its checkpoints and `vdk-checkpoints.json` included, so that automatic resume
(runtime/resume.py) goes on from RUN's last checkpoint: the new run's lineage names RUN (VDK_ML_TRAINING_RESUME_FROM).

Files are copied (not hard-linked: a script that saves `snapshot.pt` again writes into the file it opened, which would
change RUN's), each under a temporary name first so that it appears whole; symbolic links (RUN's links to its job's
code) stay links.
Every rank of every node enters the output directory at once and places what is missing; the first to finish leaves a
mark, and a restarted pod of the new run copies nothing again (what the run deleted since stays deleted). Standard
library only.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.vocabulary import wire

DONE = ".vdk-continued"


def source_dir() -> str | None:
    """RUN's directory, when this run continues one."""
    return os.environ.get(protocol.CONTINUES_DIR) or None


def begin_with(source: str, target: str) -> bool:
    """`target` holds what `source` holds; False when an earlier start of this run did it already. Every rank that
    starts walks the whole tree (what a peer placed is skipped; a file appears whole or not at all), so none reads
    the directory before it is complete, and a pod stopped half-way leaves nothing a restart cannot finish."""
    done = os.path.join(target, DONE)
    if os.path.exists(done):
        return False
    os.makedirs(target, exist_ok=True)
    if not os.path.isdir(source) or not os.listdir(source):
        whose = os.environ.get(protocol.RESUME_FROM) or "the run this one continues"
        said = wire.warning(f"{source} (the outputs of {whose}) is empty: this run begins without them")
        print(said, file=sys.stderr, flush=True)
    else:
        _copy_tree(source, target)
    with open(done, "w", encoding="utf-8") as f:
        f.write(source + "\n")
    return True


def _copy_tree(source: str, target: str) -> None:
    for root, dirs, files in os.walk(source):
        relative = os.path.relpath(root, source)
        into = target if relative == "." else os.path.join(target, relative)
        os.makedirs(into, exist_ok=True)
        for name in list(dirs):
            if os.path.islink(os.path.join(root, name)):
                dirs.remove(name)
                files.append(name)
        for name in files:
            if relative == "." and name == DONE:
                continue
            _place(os.path.join(root, name), os.path.join(into, name))


def _place(source: str, destination: str) -> None:
    if os.path.lexists(destination):
        return
    try:
        if os.path.islink(source):
            os.symlink(os.readlink(source), destination)
            return
        partial = f"{destination}.{os.getpid()}.{threading.get_ident()}.partial"
        shutil.copy2(source, partial)
        try:
            os.link(partial, destination)  # the whole file under its name, or a peer's is there already
        finally:
            os.unlink(partial)
    except FileExistsError:
        pass  # a peer placed it

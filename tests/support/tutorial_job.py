"""A job directory as an image holds it, with a tutorial-style script: it resumes from snapshot.json in its
working directory, imports a sibling module, reads a data file next to it and writes its outputs relative
to where it runs (for the tests of runtime/output_workdir.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

SCRIPT = """
import json, os
import helper

if os.path.exists("snapshot.json"):
    with open("snapshot.json") as f:
        start = json.load(f)["epoch"] + 1
    print(f"resuming at epoch {start}")
else:
    start = 0
with open("data/words.txt") as f:
    words = f.read().split()
for epoch in range(start, start + 2):
    with open("snapshot.json", "w") as f:
        json.dump({"epoch": epoch}, f)
os.makedirs("out/final", exist_ok=True)
with open("out/final/model.bin", "wb") as f:
    f.write(helper.weights(len(words)))
print("cwd", os.getcwd(), "file", __file__)
"""


def tutorial_job(root: Path) -> Path:
    """`root/image-job`: train.py (SCRIPT), helper.py and data/words.txt."""
    job = root / "image-job"
    (job / "data").mkdir(parents=True)
    (job / "train.py").write_text(textwrap.dedent(SCRIPT))
    (job / "helper.py").write_text("def weights(n):\n    return bytes(range(n))\n")
    (job / "data" / "words.txt").write_text("a b c")
    return job

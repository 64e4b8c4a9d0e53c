"""The outputs stream of `vdk execute --outputs`, written by the real writer and crafted by hand: every path an
entry may name that leaves the target directory, every kind of link already in it, and malformed streams end
in a StreamError that says what is wrong; nothing is written outside `--to`, no half-written file stays, and
a name is never printed raw."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from vdk.plugin.ml_training.runtime.outputs_stream import MARK
from vdk.plugin.ml_training.runtime.outputs_stream import OutputsReader
from vdk.plugin.ml_training.runtime.outputs_stream import StreamError
from vdk.plugin.ml_training.runtime.outputs_stream import display
from vdk.plugin.ml_training.runtime.outputs_stream import export


def line(kind: str, data) -> str:
    return f"{MARK} {kind} {json.dumps(data)}\n"


def stream(files: dict[str, bytes], listed: dict[str, int] | None = None) -> list[str]:
    """A stream of `files` (path -> content) as the writer makes it; `listed` overrides listed sizes."""
    out = [line("entry", {"path": p, "size": (listed or {}).get(p, len(b)), "mtime": 1.7e9}) for p, b in files.items()]
    for path, content in files.items():
        out.append(line("file", {"path": path}))
        if content:
            out.append(base64.b64encode(content).decode() + "\n")
        out.append(line("end", {"path": path, "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}))
    out.append(line("done", {"files": len(files), "bytes": sum(len(b) for b in files.values())}))
    return out


@pytest.fixture
def place(tmp_path):
    """(to, outside): the --to directory and a directory beside it that must never change."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"precious")
    return tmp_path / "to", outside


def everything_under(root: Path) -> dict[str, bytes | str]:
    found = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = f"-> {os.readlink(path)}" if path.is_symlink() else (path.read_bytes() if path.is_file() else "/")
    return found


def test_what_the_writer_sends_arrives_whole_with_its_times(tmp_path):
    source = tmp_path / "run"
    (source / "ckpt").mkdir(parents=True)
    (source / "model.pt").write_bytes(os.urandom(30000))
    (source / "ckpt" / "step-10.pt").write_bytes(b"x" * 100)
    (source / "empty").write_bytes(b"")
    os.utime(source / "model.pt", (1.6e9, 1.6e9))
    lines: list[str] = []
    export(str(source), True, lines.append)
    to = tmp_path / "copy"
    seen = []
    reader = OutputsReader(to, lambda path, done, size: seen.append((path, done, size))).feed_all(
        "".join(lines).splitlines(keepends=True)
    )
    assert sorted(f.path for f in reader.files) == ["ckpt/step-10.pt", "empty", "model.pt"]
    assert everything_under(to) == {**everything_under(source)}
    assert (to / "model.pt").stat().st_mtime == 1.6e9
    assert ("empty", 0, 0) in seen and ("model.pt", 30000, 30000) in seen
    mask = os.umask(0)
    os.umask(mask)
    assert (to / "model.pt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_only_the_files_of_a_name_or_below_a_directory_of_that_name_are_sent(tmp_path):
    source = tmp_path / "run"
    for relative in ("vdk-tensorboard/events.1", "trial-0/vdk-tensorboard/events.2", "model.pt", "study.db",
                     "vdk-tensorboard-old/x", "logs/study.db.bak"):  # fmt: skip
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_bytes(relative.encode())
    for only, wanted in (
        ("vdk-tensorboard", ["trial-0/vdk-tensorboard/events.2", "vdk-tensorboard/events.1"]),
        ("study.db", ["study.db"]),
    ):
        lines: list[str] = []
        export(str(source), True, lines.append, only)
        reader = OutputsReader(tmp_path / only, lambda *a: None).feed_all("".join(lines).splitlines(keepends=True))
        assert sorted(f.path for f in reader.files) == wanted
        assert all((tmp_path / only / path).read_bytes() == path.encode() for path in wanted)


@pytest.mark.parametrize(
    "path",
    ["", ".", "..", "sub/..", "sub/../..", "../victim", "/etc/passwd", "a//b", "a/./b", "sub/", "./x", "a\0b"],
)
def test_an_entry_that_does_not_name_a_file_inside_the_target_is_refused(place, path):
    to, outside = place
    with pytest.raises(StreamError) as e:
        OutputsReader(to).feed_all(stream({path: b"evil"}))
    assert "does not name a file inside the output directory" in str(e.value) or "without a file name" in str(e.value)
    assert everything_under(outside) == {"victim": b"precious"}
    assert not to.with_name("to.part").exists() and not list(to.parent.glob("*.part"))
    assert everything_under(to) == {} if to.exists() else True


@pytest.mark.parametrize("path", [5, None, ["a"], {"p": 1}])
def test_an_entry_whose_name_is_not_a_string_is_refused(place, path):
    to, _ = place
    bad = [line("entry", {"path": path, "size": 1}), line("done", {})]
    with pytest.raises(StreamError, match="without a file name"):
        OutputsReader(to).feed_all(bad)


def test_a_link_to_a_directory_in_the_target_is_not_followed(place):
    to, outside = place
    to.mkdir()
    (to / "sub").symlink_to(outside)
    with pytest.raises(StreamError, match="is a symbolic link: the copy does not follow links"):
        OutputsReader(to).feed_all(stream({"sub/victim": b"evil"}))
    assert everything_under(outside) == {"victim": b"precious"}
    assert not list(to.rglob("*.part")) and not list(outside.glob(".*"))


@pytest.mark.parametrize("link", ["part symlink", "target symlink", "dangling target symlink", "target hard link"])
def test_a_link_already_in_the_target_is_never_written_through(place, link):
    to, outside = place
    to.mkdir()
    victim = outside / "victim"
    if link == "part symlink":
        (to / "model.bin.part").symlink_to(victim)
    elif link == "target symlink":
        (to / "model.bin").symlink_to(victim)
    elif link == "dangling target symlink":
        (to / "model.bin").symlink_to(outside / "new-file")
    else:
        os.link(victim, to / "model.bin")
    reader = OutputsReader(to).feed_all(stream({"model.bin": b"weights"}))
    assert reader.written == [to / "model.bin"]
    assert (to / "model.bin").read_bytes() == b"weights" and not (to / "model.bin").is_symlink()
    assert everything_under(outside) == {"victim": b"precious"}
    assert victim.stat().st_nlink == 1
    if link == "part symlink":  # left alone: it is not the copy's
        assert os.readlink(to / "model.bin.part") == str(victim)


def test_a_directory_in_the_way_is_an_error(place):
    to, _ = place
    (to / "model.bin").mkdir(parents=True)
    with pytest.raises(StreamError, match="a directory of that name is in the way"):
        OutputsReader(to).feed_all(stream({"model.bin": b"weights"}))


def entry(path="a", size=3):
    return line("entry", {"path": path, "size": size})


DIGEST = hashlib.sha256(b"abc").hexdigest()
MALFORMED = {
    "not JSON": [f"{MARK} entry {{nope\n"],
    "JSON but not an object": [f"{MARK} entry [1, 2]\n"],
    "an entry without a size": [line("entry", {"path": "a"})],
    "a size that is no number": [line("entry", {"path": "a", "size": "big"})],
    "a negative size": [line("entry", {"path": "a", "size": -1})],
    "a file not listed": [line("file", {"path": "a"})],
    "an end without its file": [entry(), line("end", {"path": "a", "sha256": DIGEST, "size": 3})],
    "a file inside a file": [entry(), entry("b"), line("file", {"path": "a"}), line("file", {"path": "b"})],
    "data that is not base64": [entry(), line("file", {"path": "a"}), "!!!not base64!!!\n"],
    "more data than listed": [entry(size=1), line("file", {"path": "a"}), base64.b64encode(b"abc").decode() + "\n"],
    "a wrong digest": [
        entry(),
        line("file", {"path": "a"}),
        base64.b64encode(b"abd").decode() + "\n",
        line("end", {"path": "a", "sha256": DIGEST, "size": 3}),
    ],
    "fewer bytes than listed": [
        entry(size=5),
        line("file", {"path": "a"}),
        base64.b64encode(b"abc").decode() + "\n",
        line("end", {"path": "a", "sha256": DIGEST, "size": 3}),
    ],
    "an end whose size is no number": [
        entry(),
        line("file", {"path": "a"}),
        base64.b64encode(b"abc").decode() + "\n",
        line("end", {"path": "a", "sha256": DIGEST, "size": "x"}),
    ],
    "no done": [entry(), line("file", {"path": "a"}), base64.b64encode(b"abc").decode() + "\n"],
    "done in the middle of a file": [entry(), line("file", {"path": "a"}), line("done", {})],
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_stream_is_a_clear_error_and_leaves_no_file(tmp_path, case):
    to = tmp_path / "to"
    with pytest.raises(StreamError) as e:
        OutputsReader(to).feed_all(MALFORMED[case])
    assert str(e.value) and "Traceback" not in str(e.value)
    assert not to.exists() or list(to.rglob("*")) == []


def test_an_absurd_time_is_not_kept(tmp_path):
    to = tmp_path / "to"
    for mtime in ("nan", "inf", 1e300, -5):
        lines = [line("entry", {"path": "a", "size": 3, "mtime": mtime}), *stream({"a": b"abc"})[1:]]
        OutputsReader(to).feed_all(lines)
        assert (to / "a").read_bytes() == b"abc"


def test_an_interrupted_copy_leaves_no_half_written_file(tmp_path):
    to = tmp_path / "to"
    lines = stream({"big": b"y" * 20000})

    def cut():
        yield from lines[:3]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        OutputsReader(to).feed_all(cut())
    assert list(to.rglob("*")) == []


def test_names_are_printed_with_their_control_characters_escaped(tmp_path):
    evil = "\x1b]0;pwned\x07\x1b[2Jmodel\u200b\r.bin"
    shown = display(evil)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert shown == "\\x1b]0;pwned\\x07\\x1b[2Jmodel\\u200b\\r.bin"
    assert display("ckpt/épreuve 1.pt") == "ckpt/épreuve 1.pt"  # what a terminal shows as itself is kept
    to = tmp_path / "to"
    with pytest.raises(StreamError) as e:
        OutputsReader(to).feed_all([entry(evil), line("done", {}), line("end", {"path": evil})])
    assert "\x1b" not in str(e.value)

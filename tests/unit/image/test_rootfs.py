"""An image's root filesystem read from its layers' tar streams: whiteouts across layers, links."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from vdk.plugin.ml_training.image.build_errors import BaseImageError
from vdk.plugin.ml_training.image.rootfs import RootFS
from vdk.plugin.ml_training.image.rootfs import read_layer


def layer(*entries, compress: bool = True) -> io.BufferedReader:
    """A layer blob: entries are (name, content) files, (name, None) directories, (name, "->", target)
    symbolic links, (name, "=>", target) hard links, (name, bytes, mode) files with a mode."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry[0])
            data = b""
            if len(entry) == 3 and entry[1] == "->":
                info.type, info.linkname = tarfile.SYMTYPE, entry[2]
            elif len(entry) == 3 and entry[1] == "=>":
                info.type, info.linkname = tarfile.LNKTYPE, entry[2]
            elif entry[1] is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            else:
                data = entry[1]
                info.size, info.mode = len(data), entry[2] if len(entry) == 3 else 0o644
            tar.addfile(info, io.BytesIO(data))
    blob = gzip.compress(raw.getvalue()) if compress else raw.getvalue()
    return io.BufferedReader(io.BytesIO(blob))


def merged(*layers) -> RootFS:
    fs = RootFS()
    for blob in layers:
        fs.apply(read_layer(blob, lambda path: path.endswith((".txt", "METADATA"))))
    return fs


def test_a_whiteout_deletes_a_lower_file_and_directory_but_not_its_own_layers_entries():
    fs = merged(
        layer(("usr/bin/python3", b"elf", 0o755), ("usr/lib/old/", None), ("usr/lib/old/x.txt", b"x"), ("keep", b"k")),
        # the whiteout and a new entry of the same name in one layer: the new entry stays
        layer(("usr/bin/.wh.python3", b""), ("usr/lib/.wh.old", b""), ("keep", b"new"), ("./.wh.keep", b"")),
    )
    assert fs.resolve("usr/bin/python3") is None
    assert fs.resolve("usr/lib/old/x.txt") is None and fs.resolve("usr/lib/old") is None
    assert fs.resolve("keep") is not None
    assert fs.resolve("usr/bin") is not None  # only the named entry goes


def test_an_opaque_directory_hides_what_lower_layers_put_there():
    fs = merged(
        layer(("site/", None), ("site/oldpkg-1.0.dist-info/METADATA", b"Name: oldpkg\n"), ("other.txt", b"o")),
        layer(("site/", None), ("site/.wh..wh..opq", b""), ("site/torch-2.0.dist-info/METADATA", b"Name: torch\n")),
    )
    assert set(fs.listdir("site")) == {"torch-2.0.dist-info"}
    assert fs.read("site/torch-2.0.dist-info/METADATA") == b"Name: torch\n"
    assert fs.read("other.txt") == b"o"


def test_links_resolve_inside_the_image_relative_absolute_and_through_directories():
    fs = merged(
        layer(
            ("bin", "->", "usr/bin"),  # Debian's merged /usr
            ("usr/bin/python3.11", b"elf", 0o755),
            ("usr/bin/python3", "->", "python3.11"),
            ("opt/venv/bin/python", "->", "python3"),
            ("opt/venv/bin/python3", "->", "/usr/bin/python3"),
            ("escape", "->", "../../../../usr/bin/python3"),  # `..` stops at the image's root
            ("loop-a", "->", "loop-b"),
            ("loop-b", "->", "loop-a"),
            ("etc/os-release", "->", "../usr/lib/os-release"),
            ("usr/lib/os-release", b"ID=debian\n"),
            ("usr/lib/os-release.txt", "=>", "usr/lib/os-release"),
        )
    )
    assert fs.resolve("bin/python3")[0] == "/usr/bin/python3.11"
    assert fs.resolve("/opt/venv/bin/python")[0] == "/usr/bin/python3.11"
    assert fs.resolve("/opt/venv/bin/python")[1].executable
    assert fs.lookup("/opt/venv/bin/python", follow_last=False)[0] == "/opt/venv/bin/python"
    assert fs.resolve("escape")[0] == "/usr/bin/python3.11"
    assert fs.resolve("loop-a") is None  # a loop is not a file
    assert fs.read("etc/os-release") is None  # not a wanted file: its bytes were not kept
    assert fs.resolve("usr/lib/os-release.txt")[1].kind == "file"  # a hard link is a file


def test_a_layer_writing_below_a_link_writes_into_its_target():
    fs = merged(
        layer(("bin", "->", "usr/bin"), ("usr/bin/", None)),
        layer(("bin/tool", b"t", 0o755)),  # no `bin/` directory entry: the link is followed
    )
    assert fs.resolve("usr/bin/tool") is not None and fs.lookup("bin", follow_last=False)[1].kind == "symlink"


def test_a_file_replacing_a_directory_and_plain_tar_layers():
    fs = merged(
        layer(("data/", None), ("data/a.txt", b"a")),
        layer(("data", b"now a file"), compress=False),
    )
    assert fs.resolve("data")[1].kind == "file" and fs.resolve("data/a.txt") is None


def test_walk_files_lists_the_files_below_a_directory_and_nothing_below_a_file():
    fs = merged(
        layer(("opt/app/", None), ("opt/app/run.txt", b"r"), ("opt/app/lib/x.txt", b"x"), ("opt/app/bin", "->", "x"))
    )
    assert {path: node.kind for path, node in fs.walk_files("opt/app")} == {
        "/opt/app/run.txt": "file",
        "/opt/app/lib/x.txt": "file",
        "/opt/app/bin": "symlink",  # listed, not followed
    }
    assert list(fs.walk_files("opt/app/run.txt")) == []  # a file has nothing below it (it raised before)
    assert list(fs.walk_files("missing")) == []


def test_zstd_layers_and_broken_layers_are_clear_errors():
    with pytest.raises(BaseImageError, match="zstd") as zstd:
        read_layer(io.BufferedReader(io.BytesIO(b"\x28\xb5\x2f\xfd" + b"\0" * 100)), lambda p: False)
    assert "base_python" in zstd.value.fix
    with pytest.raises(BaseImageError, match="not a readable tar archive"):
        read_layer(io.BufferedReader(io.BytesIO(gzip.compress(b"not a tar" * 100))), lambda p: False)

"""An image's root filesystem as its layers describe it, read from the layers' tar streams: which
paths exist once every layer is applied (whiteouts included), where symbolic links lead, and the
first bytes of the few small files the base inspection reads. Nothing is unpacked to disk.

Layers follow the OCI image spec ("Representing Changes"): `dir/.wh.name` in a layer deletes
`dir/name` of the layers below; `dir/.wh..wh..opq` hides everything the layers below put in `dir`.
Both apply to lower layers only, never to entries of their own layer.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import zlib
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.image.build_errors import BaseImageError

WHITEOUT_PREFIX = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"
KEPT_BYTES = 64 * 1024  # of a wanted file: metadata headers and config files are far smaller
_MAX_LINKS = 40  # as the Linux kernel's limit on nested symbolic links
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

DIR, FILE, SYMLINK, OTHER = "dir", "file", "symlink", "other"


@dataclass(slots=True)  # one per file: a CUDA base has a few hundred thousand
class Node:
    kind: str  # DIR, FILE, SYMLINK or OTHER (devices, fifos)
    mode: int = 0
    target: str = ""  # of a symbolic link, as written
    data: bytes | None = None  # the first KEPT_BYTES of a wanted file
    children: dict[str, Node] | None = None  # of a directory (an empty dict per file would double the memory)

    def __post_init__(self) -> None:
        if self.kind == DIR and self.children is None:
            self.children = {}

    @property
    def contents(self) -> dict[str, Node]:
        """A directory's children by name (every directory has its dict; asking a file is a bug)."""
        if self.children is None:
            raise TypeError(f"a {self.kind} node has no children")
        return self.children

    @property
    def executable(self) -> bool:
        return self.kind == FILE and bool(self.mode & 0o111)


@dataclass
class Layer:
    """One layer's changes, in the order they apply: deletions of lower paths, then entries."""

    whiteouts: list[str] = field(default_factory=list)  # paths deleted from the layers below
    opaque: list[str] = field(default_factory=list)  # directories emptied of the layers below' content
    entries: list[tuple[str, Node]] = field(default_factory=list)
    hardlinks: list[tuple[str, str]] = field(default_factory=list)  # (path, target) within the image


def normalise(name: str) -> str:
    """`./usr/bin/` -> `usr/bin`; the root is ``."""
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


def read_layer(stream: io.BufferedReader, wanted: Callable[[str], bool]) -> Layer:
    """A layer blob (tar, gzip-compressed or not) read as a stream; the content of files for which
    `wanted(path)` is true is kept (their first KEPT_BYTES)."""
    head = stream.peek(4)[:4]
    if head.startswith(_ZSTD_MAGIC):
        raise BaseImageError(
            "the base image has zstd-compressed layers, which the builder cannot read to find its Python",
            "describe the base in [ml-training]: `base_python = python3`, `base_python_version = 3.11` and "
            "`base_provides = torch, numpy` (what it has installed); nothing is read from it then",
        )
    layer = Layer()
    try:
        with tarfile.open(fileobj=stream, mode="r|gz" if head.startswith(_GZIP_MAGIC) else "r|") as tar:
            for member in tar:
                _add_member(layer, tar, member, wanted)
    except (tarfile.TarError, zlib.error, EOFError) as e:
        raise BaseImageError(
            f"a layer of the base image is not a readable tar archive ({e})",
            "check that the base image can be pulled (`podman pull IMAGE`), or describe it in [ml-training] "
            "with `base_python`, `base_python_version` and `base_provides`",
        ) from None
    return layer


def _add_member(layer: Layer, tar: tarfile.TarFile, member: tarfile.TarInfo, wanted: Callable[[str], bool]) -> None:
    path = normalise(member.name)
    if not path:
        return
    parent, name = posixpath.split(path)
    if name == OPAQUE_WHITEOUT:
        layer.opaque.append(parent)
        return
    if name.startswith(WHITEOUT_PREFIX):
        layer.whiteouts.append(posixpath.join(parent, name[len(WHITEOUT_PREFIX) :]))
        return
    if member.isdir():
        layer.entries.append((path, Node(DIR, member.mode)))
    elif member.issym():
        layer.entries.append((path, Node(SYMLINK, member.mode, target=member.linkname)))
    elif member.islnk():
        layer.hardlinks.append((path, normalise(member.linkname)))
    elif member.isreg():
        data = None
        if wanted(path):
            extracted = tar.extractfile(member)
            data = extracted.read(KEPT_BYTES) if extracted else None
        layer.entries.append((path, Node(FILE, member.mode, data=data)))
    else:
        layer.entries.append((path, Node(OTHER, member.mode)))


class RootFS:
    """The merged tree of the layers applied so far."""

    def __init__(self) -> None:
        self.root = Node(DIR, 0o755)

    def apply(self, layer: Layer) -> None:
        for path in layer.whiteouts:
            self._remove(path)
        for path in layer.opaque:
            node = self._node(path, follow_last=False)
            if node is not None and node.kind == DIR:
                node.children = {}
        for path, node in layer.entries:
            self._put(path, node)
        for path, target in layer.hardlinks:  # a second name of a file: the same kind, mode and kept bytes
            linked = self._node(target, follow_last=False)
            if linked is not None and linked.kind == FILE:
                self._put(path, Node(FILE, linked.mode, data=linked.data))
            else:
                self._put(path, Node(FILE, 0o644))

    def _remove(self, path: str) -> None:
        parent_path, name = posixpath.split(path)
        parent = self._node(parent_path, follow_last=True)
        if parent is not None and parent.kind == DIR:
            parent.contents.pop(name, None)

    def _put(self, path: str, node: Node) -> None:
        parent_path, name = posixpath.split(path)
        parent = self._directory(parent_path)
        existing = parent.contents.get(name)
        if node.kind == DIR and existing is not None and existing.kind == DIR:
            existing.mode = node.mode  # a directory entry keeps what lower layers put in it
            return
        parent.contents[name] = node

    def _directory(self, path: str) -> Node:
        """The directory at `path`, created when missing; a symbolic link on the way to a directory
        is followed (as container runtimes resolve a layer's paths inside the root)."""
        node = self.root
        parts = _parts(path)
        for i, part in enumerate(parts):
            child = node.contents.get(part)
            if child is not None and child.kind == SYMLINK:
                found = self.resolve("/".join(parts[: i + 1]))
                child = found[1] if found and found[1].kind == DIR else None
            if child is None or child.kind != DIR:
                child = node.contents[part] = Node(DIR, 0o755)
            node = child
        return node

    def _node(self, path: str, follow_last: bool) -> Node | None:
        found = self.lookup(path, follow_last=follow_last)
        return found[1] if found else None

    def lookup(self, path: str, follow_last: bool = True) -> tuple[str, Node] | None:
        """(the path with every symbolic link resolved, its node), or None if it does not exist.
        Links resolve inside the image: `..` never leaves its root."""
        pending = _parts(path)
        resolved: list[str] = []
        node: Node | None = self.root
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                node = self._walk(resolved)
                continue
            if node is None or node.kind != DIR:
                return None
            child = node.contents.get(part)
            if child is None:
                return None
            if child.kind == SYMLINK and (pending or follow_last):
                hops += 1
                if hops > _MAX_LINKS:
                    return None
                target = child.target
                if target.startswith("/"):
                    resolved = []
                pending = _parts(target) + pending
                node = self._walk(resolved)
                continue
            resolved.append(part)
            node = child
        if node is None:  # walked back to a path that no longer exists (cannot happen: each was walked before)
            return None
        return "/" + "/".join(resolved), node

    def resolve(self, path: str) -> tuple[str, Node] | None:
        return self.lookup(path, follow_last=True)

    def _walk(self, parts: list[str]) -> Node | None:
        node: Node | None = self.root
        for part in parts:
            if node is None or node.kind != DIR:
                return None
            node = node.contents.get(part)
        return node

    def listdir(self, path: str) -> dict[str, Node]:
        found = self.resolve(path)
        return dict(found[1].contents) if found and found[1].kind == DIR else {}

    def read(self, path: str) -> bytes | None:
        """The kept bytes of a wanted file (links followed), None if absent or not kept."""
        found = self.resolve(path)
        return found[1].data if found and found[1].kind == FILE else None

    def walk_files(self, path: str = "/") -> Iterator[tuple[str, Node]]:
        """(path, node) of every non-directory below `path`, without following links."""
        start = self.resolve(path)
        if start is None or start[1].kind != DIR:
            return  # nothing below a path that is missing or not a directory
        stack = [(start[0].rstrip("/"), start[1])]
        while stack:
            base, node = stack.pop()
            for name, child in node.contents.items():
                child_path = f"{base}/{name}"
                if child.kind == DIR:
                    stack.append((child_path, child))
                else:
                    yield child_path, child


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]

"""Reading a base image the table does not know: which interpreter its command can start, its
Python version, the distributions that interpreter can import, and its C library.

The config gives the environment (`PATH`, `PYTHONPATH`, `PYTHON_VERSION`, `User`); the layers
give the rest. They are read as streams, in order, through rootfs.py (whiteouts applied), and only
the few small files that matter are kept: `*.dist-info/METADATA`, `*.egg-info`, `pyvenv.cfg`,
`os-release`. A base is read once per manifest digest; the findings are cached (base_facts_cache.py), so a
later build (or dry run) of the same base reads nothing but its manifest.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex

from packaging.utils import canonicalize_name

from vdk.plugin.ml_training.image import oci
from vdk.plugin.ml_training.image.base_facts import BaseFacts
from vdk.plugin.ml_training.image.base_facts import BaseInfo
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.base_facts import needs_reading
from vdk.plugin.ml_training.image.base_facts import platform_of_os
from vdk.plugin.ml_training.image.base_facts_cache import cached
from vdk.plugin.ml_training.image.base_facts_cache import last_read
from vdk.plugin.ml_training.image.base_facts_cache import remember
from vdk.plugin.ml_training.image.base_facts_cache import store
from vdk.plugin.ml_training.image.base_manifest import BaseImage
from vdk.plugin.ml_training.image.base_manifest import resolve_base
from vdk.plugin.ml_training.image.build_errors import RegistryError
from vdk.plugin.ml_training.image.build_errors import RegistryUnreachableError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_session import BuildSession
from vdk.plugin.ml_training.image.registry import BASE
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.image.registry_timing import RetryPolicy
from vdk.plugin.ml_training.image.rootfs import Node
from vdk.plugin.ml_training.image.rootfs import RootFS
from vdk.plugin.ml_training.image.rootfs import read_layer
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

NAMES = ("python", "python3")  # what a launch command may start, in order of preference
# Where interpreters live when the image's PATH does not lead to one (conda, venvs, source builds).
OFF_PATH_DIRS = ("/opt/conda/bin", "/opt/venv/bin", "/venv/bin", "/usr/local/bin", "/usr/bin")
_VERSIONED = re.compile(r"^python(\d)\.(\d{1,2})$")
_STDLIB = re.compile(r"^python(3)\.(\d{1,2})$")


def wanted(path: str) -> bool:
    """The files whose first bytes inspection keeps while streaming a layer."""
    name = posixpath.basename(path)
    parent = posixpath.basename(posixpath.dirname(path))
    return (
        (name == "METADATA" and parent.endswith(".dist-info"))
        or (name == "PKG-INFO" and parent.endswith(".egg-info"))
        or name.endswith(".egg-info")  # a distutils/Debian egg-info file is PKG-INFO itself
        or name == "pyvenv.cfg"
        or path in ("etc/os-release", "usr/lib/os-release")
    )


# --- what the merged filesystem says --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Interpreter:
    command: str  # what to start: a name on the PATH, or an absolute path
    invoked: str  # the path the command finds
    real: str  # that path with links resolved
    reason: str


def analyse(fs: RootFS, config: dict, digest: str) -> BaseFacts:
    """Everything inspection finds in a merged root filesystem and the image config."""
    env = _env(config)
    os_release = _os_release(fs)
    platform = platform_of_os(os_release)
    if platform is None and fs.resolve("lib/ld-musl-x86_64.so.1"):
        platform = "x86_64-unknown-linux-musl"
    interpreter, why_none = find_interpreter(fs, env)
    if interpreter is None:
        return BaseFacts(digest, None, None, why_none, None, "", (), (), platform, os_release.get("PRETTY_NAME"))
    version, version_reason = python_version(fs, interpreter, env)
    dirs = site_dirs(fs, interpreter, version, env, _user(config)) if version else []
    return BaseFacts(
        digest=digest,
        python=interpreter.command,
        python_path=interpreter.real,
        python_reason=interpreter.reason,
        python_version=version,
        version_reason=version_reason,
        distributions=distributions(fs, dirs),
        site_dirs=tuple(dirs),
        wheel_platform=platform,
        os_name=os_release.get("PRETTY_NAME"),
    )


def _env(config: dict) -> dict[str, str]:
    out = {}
    for item in (config.get("config") or {}).get("Env") or []:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def _user(config: dict) -> str:
    return ((config.get("config") or {}).get("User") or "").split(":")[0]


def _os_release(fs: RootFS) -> dict[str, str]:
    data = fs.read("etc/os-release") or fs.read("usr/lib/os-release") or b""
    fields = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            try:
                fields[key.strip()] = " ".join(shlex.split(value))
            except ValueError:
                fields[key.strip()] = value.strip().strip("\"'")
    return fields


def find_interpreter(fs: RootFS, env: dict[str, str]) -> tuple[_Interpreter | None, str]:
    """The interpreter a launch command should start, as the container runtime would find it:
    `python`, else `python3`, else `python3.X` on the image's PATH (a `python` that is Python 2 is
    passed over); else one in a well-known directory off the PATH. (None, why) if there is none."""
    path_dirs = [d for d in (env.get("PATH") or oci.DEFAULT_PATH).split(":") if d.startswith("/")]
    skipped: list[str] = []
    for name in NAMES:
        for directory in path_dirs:
            found = _executable(fs, posixpath.join(directory, name))
            if found is None:
                continue
            invoked, real = found
            major = _name_version(real)
            if major and major.startswith("2."):
                skipped.append(f"`{name}` ({invoked}) is Python {major}")
                break  # the same name later on the PATH is not what the runtime would start
            reason = f"`{name}` on the image's PATH: {_chain(invoked, real)}{_venv_note(fs, invoked)}"
            if name != NAMES[0] and not skipped:
                reason += "; the image has no `python`"
            return _Interpreter(name, invoked, real, "; ".join([reason, *skipped])), ""
    versioned = _versioned_on_path(fs, path_dirs)
    if versioned:
        invoked, real = versioned
        name = posixpath.basename(invoked)
        reason = f"`{name}` on the image's PATH: {_chain(invoked, real)}; the image has no `python` or `python3`"
        return _Interpreter(name, invoked, real, "; ".join([reason, *skipped])), ""
    for directory in OFF_PATH_DIRS:
        if directory in path_dirs:
            continue
        for name in NAMES:
            found = _executable(fs, posixpath.join(directory, name))
            if found and not (_name_version(found[1]) or "").startswith("2."):
                invoked, real = found
                reason = (
                    f"{invoked}: not on the image's PATH ({':'.join(path_dirs)}), which has no `python` or "
                    f"`python3`{_venv_note(fs, invoked)}"
                )
                return _Interpreter(invoked, invoked, real, "; ".join([reason, *skipped])), ""
    none = f"no `python` or `python3` on its PATH ({', '.join(path_dirs)}) nor in {', '.join(OFF_PATH_DIRS)}"
    return None, "; ".join([none, *skipped])


def _executable(fs: RootFS, path: str) -> tuple[str, str] | None:
    found = fs.resolve(path)
    if found is None or not found[1].executable:
        return None
    return path, found[0]


def _versioned_on_path(fs: RootFS, path_dirs: list[str]) -> tuple[str, str] | None:
    best: tuple[tuple[int, int], str, str] | None = None
    for directory in path_dirs:
        for name in fs.listdir(directory):
            match = _VERSIONED.match(name)
            if not match or match.group(1) != "3":
                continue
            found = _executable(fs, posixpath.join(directory, name))
            key = (int(match.group(1)), int(match.group(2)))
            if found and (best is None or key > best[0]):
                best = (key, *found)
    return (best[1], best[2]) if best else None


def _chain(invoked: str, real: str) -> str:
    return invoked if invoked == real else f"{invoked} -> {real}"


def _venv_note(fs: RootFS, invoked: str) -> str:
    return ", a virtual environment" if _venv_config(fs, invoked) is not None else ""


def _venv_config(fs: RootFS, invoked: str) -> dict[str, str] | None:
    """pyvenv.cfg of the virtual environment `invoked` belongs to (as Python finds it: next to the
    executable's directory, links not followed), else None."""
    data = fs.read(posixpath.join(posixpath.dirname(posixpath.dirname(invoked)), "pyvenv.cfg"))
    if data is None:
        return None
    fields = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip().lower()] = value.strip()
    return fields


def _name_version(path: str) -> str | None:
    match = _VERSIONED.match(posixpath.basename(path))
    return f"{match.group(1)}.{match.group(2)}" if match else None


def python_version(fs: RootFS, interpreter: _Interpreter, env: dict[str, str]) -> tuple[str | None, str]:
    """ "3.11" and how it is known: the interpreter's file name, its venv's pyvenv.cfg, its standard
    library directory, or PYTHON_VERSION in the image's environment (the python images set it)."""
    named = _name_version(interpreter.real)
    if named:
        return named, f"the interpreter is {posixpath.basename(interpreter.real)}"
    venv = _venv_config(fs, interpreter.invoked)
    if venv:
        match = re.match(r"^(\d)\.(\d+)", venv.get("version") or venv.get("version_info") or "")
        if match:
            return f"{match.group(1)}.{match.group(2)}", "pyvenv.cfg of its virtual environment"
    prefix = posixpath.dirname(posixpath.dirname(interpreter.real))
    stdlibs = sorted(
        name
        for name in fs.listdir(posixpath.join(prefix, "lib"))
        if _STDLIB.match(name) and fs.resolve(posixpath.join(prefix, "lib", name, "os.py"))
    )
    if len(stdlibs) == 1:
        return stdlibs[0][len("python") :], f"its standard library {prefix}/lib/{stdlibs[0]}"
    match = re.match(r"^(\d)\.(\d+)", env.get("PYTHON_VERSION", ""))
    if match:
        return f"{match.group(1)}.{match.group(2)}", "PYTHON_VERSION in the image's environment"
    if stdlibs:
        several = ", ".join(f"{prefix}/lib/{s}" for s in stdlibs)
        return None, f"its name has no version, and it has several standard libraries: {several}"
    return None, "its name has no version, and it has no standard library next to it"


def site_dirs(fs: RootFS, interpreter: _Interpreter, version: str, env: dict[str, str], user: str) -> list[str]:
    """The directories the interpreter imports installed distributions from (those that exist)."""
    candidates: list[str] = []
    venv = _venv_config(fs, interpreter.invoked)
    if venv is not None:
        root = posixpath.dirname(posixpath.dirname(interpreter.invoked))
        candidates += [f"{root}/lib/python{version}/site-packages", f"{root}/lib64/python{version}/site-packages"]
        if venv.get("include-system-site-packages", "").lower() == "true":
            candidates += _prefix_dirs(posixpath.dirname(posixpath.dirname(interpreter.real)), version)
    else:
        candidates += _prefix_dirs(posixpath.dirname(posixpath.dirname(interpreter.real)), version)
        if user in ("", "root", "0"):  # user site-packages of root (`pip install --user` in a Dockerfile)
            candidates.append(f"/root/.local/lib/python{version}/site-packages")
    candidates = [d for d in (env.get("PYTHONPATH") or "").split(":") if d.startswith("/")] + candidates
    out: list[str] = []
    for directory in candidates:
        found = fs.resolve(directory)
        if found and found[1].kind == "dir" and found[0] not in out:
            out.append(found[0])
    return out


def _prefix_dirs(prefix: str, version: str) -> list[str]:
    """site-packages of an installation prefix, with Debian's dist-packages and /usr/local variants."""
    local = f"{prefix}/local" if prefix == "/usr" else prefix
    return [
        f"{prefix}/lib/python{version}/site-packages",
        f"{prefix}/lib64/python{version}/site-packages",
        f"{local}/lib/python{version}/dist-packages",
        f"{local}/lib/python{version}/site-packages",
        f"{local}/lib64/python{version}/site-packages",
        f"{prefix}/lib/python3/dist-packages",
        f"{prefix}/lib/python{version}/dist-packages",
    ]


def distributions(fs: RootFS, dirs: list[str]) -> tuple[tuple[str, str], ...]:
    """(normalised name, version) of every installed distribution in `dirs`; the first found wins,
    as on sys.path."""
    found: dict[str, str] = {}
    for directory in dirs:
        for entry, node in sorted(fs.listdir(directory).items()):
            parsed = _distribution(fs, posixpath.join(directory, entry), entry, node)
            if parsed and parsed[0] not in found:
                found[parsed[0]] = parsed[1]
    return tuple(sorted(found.items()))


def _distribution(fs: RootFS, path: str, entry: str, node: Node) -> tuple[str, str] | None:
    if entry.endswith(".dist-info"):
        data = fs.read(f"{path}/METADATA")
    elif entry.endswith(".egg-info"):
        data = fs.read(f"{path}/PKG-INFO") if node.kind == "dir" else fs.read(path)
    else:
        return None
    name = version = None
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
    if not (name and version):  # metadata cut or missing: the directory name says it (name-version.dist-info)
        stem = entry.rsplit(".", 1)[0]
        parts = stem.split("-")
        if len(parts) < 2:
            return None
        name, version = name or parts[0], version or parts[1]
    return canonicalize_name(name), version


# --- reading a base from its registry -------------------------------------------------------


def read_base(client: RegistryClient, base: BaseImage, progress: Progress) -> BaseFacts:
    """What `base` holds: from the cache, else read from its layers (once per digest)."""
    digest = base.reference.digest or ""
    facts = cached(digest)
    if facts is None:
        total = sum(int(d.get("size", 0)) for d in base.layers)
        progress.stage(
            f"Reading base image {base.reference.registry}/{base.reference.repository} to find its Python and "
            f"packages ({counted(len(base.layers), 'layer')}, {size_text(total)}; once per base image)"
        )
        fs = RootFS()
        for number, descriptor in enumerate(base.layers, 1):
            layer = client.read_blob(
                base.reference.repository,
                descriptor["digest"],
                int(descriptor.get("size", 0)),
                f"base layer {number}/{len(base.layers)}",
                lambda stream: read_layer(stream, wanted),
            )
            fs.apply(layer)
        facts = analyse(fs, base.config, digest)
        store(facts)
        progress.stage(f"Base image: {describe(facts)}")
    return facts


def describe(facts: BaseFacts) -> str:
    if not facts.python:
        return f"no Python interpreter found ({facts.python_reason})"
    version = f"Python {facts.python_version}" if facts.python_version else "Python of unknown version"
    return f"{facts.python} ({version}, {facts.python_path}), {len(facts.distributions)} distributions installed"


def know_read_base(spec: MLJobSpec, client: RegistryClient, base: BaseImage, progress: Progress) -> BaseInfo:
    """What spec.base_image brings, for a build that has resolved it (`base`, read through `client`)."""
    if not needs_reading(spec):
        return base_info(spec)
    facts = read_base(client, base, progress)
    remember(spec.base_image, facts.digest)
    return base_info(spec, facts)


def know_base(
    spec: MLJobSpec, progress: Progress, retry: RetryPolicy | None = None, session: BuildSession | None = None
) -> BaseInfo:
    """What spec.base_image brings, for a dry run: from the table or the keys when they say it all,
    else read from the base's registry (its manifest, and its layers the first time). When that
    registry cannot be reached, what was read from the same reference before is used, with a note.
    `session`: the command's (a deploy's), whose base, read once, is used rather than read again."""
    if not needs_reading(spec):
        return base_info(spec)
    ref = spec.base_reference
    facts = cached(ref.digest) if ref.digest else None
    if facts is None:
        try:
            if session is not None:
                return know_read_base(spec, session.base_client, session.base(), progress)
            with RegistryClient(ref.registry, progress, retry, role=BASE) as client:
                return know_read_base(spec, client, resolve_base(client, ref), progress)
        except RegistryUnreachableError as e:
            facts = last_read(spec.base_image)
            if facts is None:
                raise type(e)(
                    f"base image {spec.base_image} is not one the builder knows, and it cannot be read to find its "
                    f"Python and packages: {e.problem}",
                    f"{e.fix}; or describe the base in [ml-training] of {spec.config_path} (`base_python = python3`, "
                    "`base_python_version = 3.11`, `base_provides = torch, numpy`) so that nothing is read",
                ) from None
            progress.stage(
                f"note: {ref.registry} cannot be reached; using what was read from {spec.base_image} "
                f"({facts.digest[:19]}) before"
            )
        except RegistryError as e:
            raise type(e)(
                f"reading base image {spec.base_image} (to find its Python and packages): {e.problem}",
                f"{e.fix}; or describe the base in [ml-training] of {spec.config_path} (`base_python`, "
                "`base_python_version`, `base_provides`) so that nothing is read",
            ) from None
    return base_info(spec, facts)

"""Whether what a job imports will be in its image, checked from its source in milliseconds.

The entrypoint and the job's own modules it imports (transitively) are parsed; every import of a module
that is neither in the standard library nor one of the job's own must come from a distribution that
requirements.txt lists (or one those depend on, as far as this machine's installed packages tell) or that
the base image provides. Imports guarded by `try: ... except ImportError`, under `if TYPE_CHECKING:`, or
under a test of the Python version or platform (`sys.version_info`, `sys.platform`, `find_spec`) are
optional and left alone. Import names map to distributions through this machine's installed packages'
metadata and a table of well-known names that differ (`yaml` -> PyYAML).

Pure: reads files and installed packages' metadata, contacts nothing.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Set
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from vdk.plugin.ml_training.source.requirements import RequirementsFile

STANDARD_LIBRARY = frozenset(sys.stdlib_module_names) | {"__future__", "__main__"}

# Import names whose distribution is named otherwise (the first is the one to add).
WELL_KNOWN: dict[str, tuple[str, ...]] = {
    "yaml": ("PyYAML",),
    "cv2": ("opencv-python", "opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless"),
    "sklearn": ("scikit-learn",),
    "PIL": ("Pillow",),
    "skimage": ("scikit-image",),
    "bs4": ("beautifulsoup4",),
    "dateutil": ("python-dateutil",),
    "attr": ("attrs",),
    "jwt": ("PyJWT",),
    "Crypto": ("pycryptodome",),
    "OpenSSL": ("pyOpenSSL",),
    "dotenv": ("python-dotenv",),
    "serial": ("pyserial",),
    "git": ("GitPython",),
    "hydra": ("hydra-core",),
    "faiss": ("faiss-cpu", "faiss-gpu"),
    "zmq": ("pyzmq",),
    "MySQLdb": ("mysqlclient",),
    "psycopg2": ("psycopg2-binary", "psycopg2"),
    "Bio": ("biopython",),
    "fitz": ("PyMuPDF",),
    "docx": ("python-docx",),
    "magic": ("python-magic",),
    "Levenshtein": ("Levenshtein", "python-Levenshtein"),
    "pkg_resources": ("setuptools",),
    "mpl_toolkits": ("matplotlib",),
    "flash_attn": ("flash-attn",),
    "transformer_engine": ("transformer-engine",),
    "pytorch_lightning": ("pytorch-lightning", "lightning"),
    "lightning_fabric": ("lightning-fabric", "lightning"),
    "google": ("protobuf",),
    "tensorflow_datasets": ("tensorflow-datasets",),
    "sentence_transformers": ("sentence-transformers",),
    "torch_geometric": ("torch-geometric",),
    "huggingface_hub": ("huggingface-hub",),
}
# Namespace packages that many distributions share: any requirement named with one of the prefixes provides them.
NAMESPACES: dict[str, tuple[str, ...]] = {
    "google": ("google-", "googleapis-", "protobuf"),
    "nvidia": ("nvidia-",),
    "azure": ("azure-",),
    "jaxlib": ("jaxlib", "jax"),
}
# Tests under which an import is conditional: the image's Python or platform may take the other branch.
_CONDITIONAL = re.compile(r"\b(version_info|platform|os\.name|find_spec|find_loader|is_\w*available)\b")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


@dataclass(frozen=True)
class ImportSite:
    """One `import x` / `from x import y` of a module from outside the job."""

    path: str  # relative to the job directory
    line: int
    module: str  # as written: `yaml`, `google.protobuf.message`
    statement: str  # `import yaml`

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


@dataclass(frozen=True)
class Undeclared:
    site: ImportSite
    distribution: str  # the one to add to requirements.txt
    version: str | None = None  # the version installed here, if it is


@dataclass(frozen=True)
class ImportCheck:
    """What the check found: undeclared imports, each at its first place."""

    undeclared: tuple[Undeclared, ...] = ()
    base_known: bool = True  # False: the base image's packages are unknown (never read)
    files: tuple[str, ...] = ()  # what was parsed

    @property
    def passed(self) -> bool:
        return not self.undeclared


def listed_for(requirements: RequirementsFile, module: str) -> str | None:
    """The distribution `requirements` lists that provides import name `module`, if one is listed."""
    top = module.split(".")[0]
    candidates = [top, *WELL_KNOWN.get(top, ()), *_Installed().distributions(top)]
    return next((c for c in candidates if requirements.lists(c)), None)


class _Installed:
    """This machine's installed distributions, read only when a name is not found otherwise (importlib.metadata
    is imported then too: it takes longer than the whole check of most jobs)."""

    @cached_property
    def by_import(self) -> Mapping[str, list[str]]:
        import importlib.metadata

        try:
            return importlib.metadata.packages_distributions()
        except Exception:  # noqa: BLE001 - broken metadata of one package must not break the check
            return {}

    def distributions(self, top: str) -> list[str]:
        return list(dict.fromkeys(self.by_import.get(top, [])))

    @staticmethod
    def version(distribution: str) -> str | None:
        import importlib.metadata

        try:
            return importlib.metadata.version(distribution)
        except Exception:  # noqa: BLE001 - broken metadata of one package must not break the check
            return None

    @staticmethod
    def requires(distribution: str) -> list[str]:
        import importlib.metadata

        try:
            return importlib.metadata.requires(distribution) or []
        except Exception:  # noqa: BLE001 - broken metadata of one package must not break the check
            return []


def distribution_for(module: str, installed: _Installed | None = None) -> str:
    """The distribution that provides import name `module` (its top level): as installed here, else the
    table of well-known names, else the name itself."""
    top = module.split(".")[0]
    found = (installed or _Installed()).distributions(top)
    if found:
        return found[0]
    return WELL_KNOWN.get(top, (top,))[0]


def check_imports(
    job_dir: Path,
    entry_file: Path,
    search_root: Path,
    requirements: Path | None,
    base_provides: Iterable[str] | None,
    declared_by_user: Iterable[str] = (),
) -> ImportCheck:
    """Check the imports of `entry_file` and the job's modules it imports; `search_root` is the directory
    absolute imports are found in (the script's directory; the job directory for `-m`); `base_provides`
    are the base image's packages (None: not known); `declared_by_user` those the job's `base_provides` names,
    which count whether or not the base was read."""
    sites, files = collect_imports(job_dir, entry_file, search_root)
    return check_sites(sites, requirements, base_provides, files, declared_by_user)


def check_sites(
    sites: Iterable[ImportSite],
    requirements: Path | None,
    base_provides: Iterable[str] | None,
    files: Iterable[str] = (),
    declared_by_user: Iterable[str] = (),
) -> ImportCheck:
    """Whether the modules of `sites` will be in the image: listed in `requirements` (or a dependency of what is),
    or among `base_provides` (None: not known) or `declared_by_user` (the job's `base_provides`: the user said
    so, known or not). `check_imports` reads them from the job's source; other callers name modules that a
    library imports by name (a Trainer's `report_to=wandb`)."""
    declared = RequirementsFile.read(requirements)
    provided = {canonicalize_name(n) for n in [*(base_provides or ()), *declared_by_user]}
    installed = _Installed()
    closure: set[str] | None = None
    undeclared: dict[str, Undeclared] = {}
    for site in sites:
        top = site.top
        if top in undeclared or top in STANDARD_LIBRARY:
            continue
        direct = {canonicalize_name(top), *(canonicalize_name(d) for d in WELL_KNOWN.get(top, ()))}
        if _provided(top, direct, declared.names.keys() | provided):
            continue
        candidates = direct | {canonicalize_name(d) for d in installed.distributions(top)}
        if closure is None:
            closure = _closure(declared.names, provided, installed)
        if _provided(top, candidates, declared.names.keys() | provided | closure):
            continue
        distribution = distribution_for(top, installed)
        undeclared[top] = Undeclared(site, distribution, installed.version(distribution))
    return ImportCheck(tuple(undeclared.values()), base_provides is not None, tuple(files))


def _provided(top: str, candidates: Set[str], available: Set[str]) -> bool:
    if candidates & available:
        return True
    prefixes = NAMESPACES.get(top, ())
    return any(name.startswith(prefixes) for name in available) if prefixes else False


def _closure(listed: Mapping[str, Iterable[str]], provided: Set[str], installed: _Installed) -> set[str]:
    """What the listed and provided distributions depend on, as their metadata here says (extras as asked)."""
    seen: set[str] = set()
    queue = [(name, set(extras)) for name, extras in listed.items()] + [(name, set()) for name in provided]
    while queue:
        name, extras = queue.pop()
        key = (name, *sorted(extras))
        if ":".join(key) in seen:
            continue
        seen.add(":".join(key))
        for requirement in installed.requires(name):
            try:
                parsed = Requirement(requirement)
            except InvalidRequirement:
                continue
            wanted = _EXTRA_MARKER.search(str(parsed.marker or ""))
            if wanted and canonicalize_name(wanted.group(1)) not in extras:
                continue
            queue.append((canonicalize_name(parsed.name), {canonicalize_name(e) for e in parsed.extras}))
    return {key.split(":")[0] for key in seen}


# --- reading the job's source --------------------------------------------------------------


def collect_imports(job_dir: Path, entry_file: Path, search_root: Path) -> tuple[list[ImportSite], list[str]]:
    """Unguarded imports of modules from outside the job, in the entrypoint and the job's own modules it
    imports; and the files parsed (relative to the job directory)."""
    job_dir = job_dir.resolve()
    queue = [entry_file.resolve()]
    parsed: list[Path] = []
    sites: list[ImportSite] = []
    while queue:
        path = queue.pop(0)
        if path in parsed or not path.is_file() or not path.is_relative_to(job_dir):
            continue
        parsed.append(path)
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue  # the smoke run shows a syntax error where Python finds it
        visitor = _Imports(path, search_root.resolve(), job_dir)
        visitor.visit(tree)
        sites += visitor.sites
        queue += visitor.local_files
    return sites, [p.relative_to(job_dir).as_posix() for p in parsed]


class _Imports(ast.NodeVisitor):
    def __init__(self, path: Path, root: Path, job_dir: Path):
        self.path, self.root, self.job_dir = path, root, job_dir
        self.relpath = path.relative_to(job_dir).as_posix()
        self.sites: list[ImportSite] = []
        self.local_files: list[Path] = []
        self.optional = 0

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(h.type) for h in node.handlers)
        self._visit_all(node.body, optional=guarded)
        for part in (node.handlers, node.orelse, node.finalbody):
            self._visit_all(part)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        """`with contextlib.suppress(ImportError):` guards its body like a try."""
        guarded = any(
            isinstance(item.context_expr, ast.Call)
            and ast.unparse(item.context_expr.func).split(".")[-1] == "suppress"
            and any(_catches_import_error(arg) for arg in item.context_expr.args)
            for item in node.items
        )
        self._visit_all(node.body, optional=guarded)

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if re.search(r"\bTYPE_CHECKING\b", test):
            self._visit_all(node.orelse)
            return
        conditional = bool(_CONDITIONAL.search(test))
        self._visit_all(node.body, optional=conditional)
        self._visit_all(node.orelse, optional=conditional)

    def _visit_all(self, nodes: list, optional: bool = False) -> None:
        self.optional += optional
        try:
            for child in nodes:
                self.visit(child)
        finally:
            self.optional -= optional

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._found(alias.name, node, f"import {alias.name}", ())

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        names = tuple(a.name for a in node.names if a.name != "*")
        if node.level:
            base = self.path.parent
            for _ in range(node.level - 1):
                base = base.parent
            self._local(base, (node.module or "").split(".") if node.module else [], names)
            return
        if node.module:
            self._found(node.module, node, f"from {node.module} import {', '.join(names) or '*'}", names)

    def _found(self, module: str, node: ast.stmt, statement: str, names: tuple[str, ...]) -> None:
        top = module.split(".")[0]
        if self._is_local(top):
            self._local(self.root if _is_module(self.root, top) else self.job_dir, module.split("."), names)
        elif not self.optional:
            self.sites.append(ImportSite(self.relpath, node.lineno, module, statement))

    def _is_local(self, top: str) -> bool:
        """A module of the job: in the directory absolute imports start from, or (a mistake the smoke run
        shows as it happens) at the job's root."""
        return _is_module(self.root, top) or _is_module(self.job_dir, top)

    def _local(self, base: Path, parts: list[str], names: tuple[str, ...]) -> None:
        """The job's files that `parts` (a dotted module below `base`) and its imported `names` are."""
        directory = base
        for part in parts:
            self.local_files.append(directory / part / "__init__.py")
            directory = directory / part
        if parts:
            self.local_files.append(directory.with_suffix(".py"))
        else:
            self.local_files.append(directory / "__init__.py")
        for name in names:  # `from pkg import module`
            self.local_files += [directory / f"{name}.py", directory / name / "__init__.py"]


def _catches_import_error(handler: ast.expr | None) -> bool:
    if handler is None:
        return True  # a bare except
    names = [handler] if not isinstance(handler, ast.Tuple) else list(handler.elts)
    caught = {ast.unparse(n).split(".")[-1] for n in names}
    return bool(caught & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _is_module(directory: Path, name: str) -> bool:
    """`name` is a module or package in `directory` (a directory of data files is not)."""
    package = directory / name
    if (directory / f"{name}.py").is_file() or (package / "__init__.py").is_file():
        return True
    return package.is_dir() and any(package.glob("*.py"))

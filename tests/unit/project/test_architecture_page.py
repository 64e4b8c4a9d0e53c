"""docs/architecture.md's diagram of the layers is the import-linter contract of pyproject.toml (what `make lint`
enforces), drawn: the two are read and compared, so that neither changes alone. Every room of the package has
its layer in the contract: a new package or top-level module cannot stand outside the layers unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PROJECT = Path(__file__).resolve().parents[3]
PACKAGE_DIR = PROJECT / "src" / "vdk" / "plugin" / "ml_training"
PAGE = PROJECT / "docs" / "architecture.md"
SECTION = "## The layers"
ROOMS_COLUMN = 50  # in the diagram the rooms stand left of this column, their descriptions from it on
ROOM = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*(?:\.py|/))")  # `cli/`, `layout.py`; not `vdk-core` or a word


def _room(module: str, root: str) -> str:
    """`vdk.plugin.ml_training.cli` -> `cli/`, `...layout` -> `layout.py`, as the page names rooms."""
    name = module.removeprefix(root + ".")
    return f"{name}/" if (PACKAGE_DIR / name).is_dir() else f"{name}.py"


def contract_layers(pyproject: str) -> list[set[str]]:
    """The layers contract of pyproject.toml's [tool.importlinter], top first, each layer a set of rooms."""
    config = tomllib.loads(pyproject)["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [{_room(m.strip(), config["root_package"]) for m in layer.split("|")} for layer in contract["layers"]]


def diagram_layers(page: str) -> list[set[str]]:
    """The layers the page draws, top first: the rooms left of ROOMS_COLUMN on each line of the section's first
    code block (a line without a room is an arrow or a description's continuation)."""
    block = page.split(SECTION, 1)[1].split("```", 2)[1]
    rows = [set(ROOM.findall(line[:ROOMS_COLUMN])) for line in block.splitlines()]
    return [row for row in rows if row]


def test_the_page_draws_the_layers_of_the_contract():
    drawn = diagram_layers(PAGE.read_text(encoding="utf-8"))
    enforced = contract_layers((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))
    assert drawn == enforced, "docs/architecture.md's diagram and pyproject.toml's layers contract disagree"


def test_every_room_of_the_package_has_its_layer():
    rooms = {f"{p.name}/" for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()}
    rooms |= {p.name for p in PACKAGE_DIR.glob("*.py") if p.name != "__init__.py"}
    layered = set().union(*contract_layers((PROJECT / "pyproject.toml").read_text(encoding="utf-8")))
    assert sorted(rooms - layered) == [], "give each its layer in pyproject.toml's contract and on the page"


def test_the_reader_tells_a_room_from_its_description_and_sees_a_changed_order():
    page = f"""{SECTION}

```
  vdk-core ──hooks──▶ plugin.py{" " * 19}VDK hooks only; delegates to cli/
                          │
         k8s/          image/         local/      backends: independent
                          │{" " * 23}-> findings for diagnosis/ and layout.py
                      layout.py
```
"""
    assert diagram_layers(page) == [{"plugin.py"}, {"k8s/", "image/", "local/"}, {"layout.py"}]
    contract = """
[tool.importlinter]
root_package = "vdk.plugin.ml_training"
[[tool.importlinter.contracts]]
name = "layers"
type = "layers"
layers = ["vdk.plugin.ml_training.plugin", "vdk.plugin.ml_training.layout",
          "vdk.plugin.ml_training.k8s | vdk.plugin.ml_training.image | vdk.plugin.ml_training.local"]
"""
    assert contract_layers(contract) == [{"plugin.py"}, {"layout.py"}, {"k8s/", "image/", "local/"}]
    assert diagram_layers(page) != contract_layers(contract)

"""README and the documentation site stay true: the job-format table lists exactly the keys the parser
accepts, the set-up commands are the ones CI runs, every page of docs/ is in mkdocs.yml's nav, and every
relative link of README.md leads to a file of the repository (`mkdocs build --strict`, in `make test`,
checks the links inside docs/)."""

import re
from pathlib import Path

import yaml

from vdk.plugin.ml_training.job import KEYS
from vdk.plugin.ml_training.job import key_table
from vdk.plugin.ml_training.job.settings import CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
JOB_FORMAT = DOCS / "job-format.md"  # the job format: config.ini, every key, cluster-wide settings


def test_job_format_table_matches_the_parser():
    section = JOB_FORMAT.read_text()
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    vdk_keys = {k for k in documented if k.startswith("ml_training_")}
    assert set(documented) - vdk_keys == set(KEYS)
    assert vdk_keys == set(CONFIG_KEYS)


def test_the_key_tables_are_the_catalogue():
    """Both tables of the job format are printed from the one catalogue of keys (job/keys.py)."""
    page = JOB_FORMAT.read_text()
    regenerate = "print them again: `python -m vdk.plugin.ml_training.job.key_table`"
    assert key_table.job_keys_table().strip() in page, f"docs/job-format.md's key table is stale: {regenerate}"
    assert key_table.settings_table().strip() in page, f"docs/job-format.md's settings table is stale: {regenerate}"


def test_setup_commands_are_what_ci_runs():
    assert "make demo" in README and "make test" in README
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.M)


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200


def _nav_pages(entries) -> list[str]:
    """The page files a `nav:` of mkdocs.yml names, at any depth (`- Title: page.md`, `- page.md`, sections)."""
    pages = []
    for entry in entries:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_every_page_of_docs_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    on_disk = {str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md")}
    assert not on_disk - set(nav), f"pages of docs/ missing from the nav of mkdocs.yml: {sorted(on_disk - set(nav))}"
    assert not set(nav) - on_disk, f"mkdocs.yml's nav names pages docs/ lacks: {sorted(set(nav) - on_disk)}"
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_every_relative_link_of_the_readme_leads_to_a_file():
    text = re.sub(r"^```.*?^```", "", README, flags=re.M | re.S)  # links in code blocks are no links
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    assert relative, "README links to no page of the repository"
    missing = [t for t in relative if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"

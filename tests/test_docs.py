"""The documents a released package carries: a license the README states, a changelog whose
newest version is the one --version prints and the metadata carries, a README that is a landing
page linking every page of the docs site, pages that name no path outside the project, and a
configuration reference that is what the schema says."""

import importlib.util
import re
from importlib import metadata

import pytest
import yaml

import reluexp
from reluexp.hydra_glue import key_meanings, versions_line
from tests.helpers import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
DOCS = REPO_ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


def nav_pages(nav: list) -> list[str]:
    """The pages of mkdocs.yml's navigation, in its order."""
    found = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


# mkdocs.yml's tags (!ENV and the like) are not needed here: its nav is plain YAML.
NAV = nav_pages(yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())["nav"])


def test_the_license_is_there_and_the_readme_states_it():
    assert (REPO_ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert "under the MIT license (`LICENSE`)" in README


def test_the_changelogs_newest_version_is_the_packages():
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## (\S+) \(\d{4}-\d{2}-\d{2}\)$", changelog, flags=re.M)
    assert versions and versions[0] == reluexp.__version__
    assert metadata.version("reluexp") == reluexp.__version__
    assert versions_line().startswith(f"reluexp {reluexp.__version__}, ")


def test_the_readme_names_no_path_outside_the_project():
    """47.6: it sent the reader to ../shared/seed/, which is not part of the project."""
    assert not re.findall(r"(?<![./])\.\./", README)


@pytest.mark.parametrize("page", [REPO_ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_path_a_page_names_is_in_the_project(page):
    text = page.read_text()
    assert "shared/" not in text
    for path in re.findall(
        r"`((?:docs|benchmarks|conf|experiments|tests|reluexp)/[\w./-]+)`", text
    ):
        assert (REPO_ROOT / path).exists() or "*" in path or "<" in path, path
    for link in re.findall(r"\]\(([^)#:]+\.(?:md|png))(?:#[^)]*)?\)", text):
        assert (page.parent / link).resolve().is_file(), link


def test_the_readme_is_a_landing_page_that_links_every_docs_page():
    """63: 1,356 lines in 19 sections; now at most 200, with every page of the site one click
    away (a relative link, which works on the repository's web page too)."""
    assert len(README.splitlines()) <= 200
    linked = set(re.findall(r"\]\(docs/([^)#]+\.md)\)", README))
    assert set(NAV) <= linked, sorted(set(NAV) - linked)
    assert sorted(str(p.relative_to(DOCS)) for p in PAGES) == sorted(NAV)  # no page unlisted
    assert 'pip install torch==2.13.0 -e ".[dev]" && pytest' in README  # what CI runs


@pytest.mark.parametrize("name", ["configuration.md", "outputs.md"])
def test_a_reference_page_is_what_the_code_generates(name):
    """63: the configuration table, hand-kept, had drifted from the schema (--help's keys).
    docs/reference_tables.py writes it from the schema, and the event tags from their
    descriptions; each page must be what it writes."""
    spec = importlib.util.spec_from_file_location("tables", DOCS / "reference_tables.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    page = (generator.REFERENCE / name).read_text()
    assert generator.page(name, page) == page, "run: python docs/reference_tables.py"
    if name == "configuration.md":
        for key in key_meanings():  # every key --help lists
            assert f"| `{key}` |" in page, key


def test_the_configuration_page_lists_every_shipped_activation_as_it_is():
    page = (DOCS / "reference" / "configuration.md").read_text()
    for path in sorted((REPO_ROOT / "conf" / "activation").glob("*.yaml")):
        activation = yaml.safe_load(path.read_text())
        if path.stem != "custom":
            row = f"| `{path.stem}` | `{activation['target']}` | `{activation['reference']}` |"
            assert row in page, row

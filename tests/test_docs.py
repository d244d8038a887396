"""The documents a released package carries: a license the README states, a changelog whose
newest version is the one --version prints and the metadata carries, and a README that stands
alone (no path outside the project)."""

import re
from importlib import metadata

import reluexp
from reluexp.hydra_glue import versions_line
from tests.helpers import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


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
    for path in re.findall(
        r"`((?:docs|benchmarks|conf|experiments|tests|reluexp)/[\w./]+)`", README
    ):
        assert (REPO_ROOT / path).exists() or "*" in path or "<" in path, path

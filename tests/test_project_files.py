"""The files a user of the package sees besides the code: the project links in
the package metadata, and a changelog shipped in the sdist and shown in the
documentation."""

from __future__ import annotations

import re
import tomllib

import pytest
from helpers import ROOT

import kernix

#: The metadata and version an installed kernix carries.
pytestmark = pytest.mark.installed


def test_the_metadata_links_the_project() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    home = urls["Homepage"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", home)
    assert all(u == home or u.startswith(home + "/") for u in urls.values())  # one home for all of them
    assert (ROOT / urls["Changelog"].rsplit("/", 1)[1]).is_file()


def test_the_changelog_covers_every_release() -> None:
    text = (ROOT / "CHANGELOG.rst").read_text()
    headings = re.findall(r"^(\d+\.\d+(?:\.\d+)?) \((.+)\)\n-+$", text, re.MULTILINE)
    versions = [tuple(int(n) for n in v.split(".")) for v, _ in headings]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)  # newest first
    assert headings[-1][0] == "0.1.0"
    dates = [d for _, d in headings]
    assert "unreleased" not in dates[1:]  # only the work in progress, at the top
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", d) for d in dates if d != "unreleased")
    assert kernix.__version__.split(".dev")[0] in [v for v, _ in headings]  # this version has its entry
    assert ".. include:: ../CHANGELOG.rst" in (ROOT / "docs" / "changelog.rst").read_text()


def test_the_sdist_ships_the_changelog() -> None:
    manifest = ROOT / "MANIFEST.in"
    if not manifest.is_file():
        pytest.skip("MANIFEST.in is not here (the tests run from a copy beside an installed kernix)")
    assert re.search(r"^include .*\bCHANGELOG\.rst\b", manifest.read_text(), re.MULTILINE)


def test_the_metadata_names_the_authors() -> None:
    authors = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("authors", [])
    assert authors and all(a.get("name") for a in authors)


def test_every_declared_pytest_marker_marks_a_test() -> None:
    """A marker nobody uses promises a selection (``-m "not slow"``) that selects nothing."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    sources = "".join(p.read_text() for p in (ROOT / "tests").glob("*.py"))
    for marker in (m.split(":", 1)[0].strip() for m in declared):
        assert re.search(rf"pytest\.mark\.{marker}\b", sources), f"the marker {marker!r} marks no test"

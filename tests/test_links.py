"""Documentation and project links come from the installed package's ``Project-URL`` metadata, and
are absent, never made up, where it names none (the outputs' side: tests/test_output_formats.py)."""

from __future__ import annotations

import importlib.metadata

import pytest

from warp_lint import links
from warp_lint.finding import Finding, Position, rule_url
from warp_lint.trace.matching import RuntimeProblem

DOCS = "https://docs.example.org/warp-lint"
HOME = "https://example.org/warp-lint"


def _finding(cls=Finding, code="WL101") -> Finding:
    return cls(code=code, name="name", message="message", path="k.py", start=Position(1, 1), end=Position(1, 2))


def test_the_installed_metadata_names_no_links():
    """pyproject.toml has no [project.urls] (and must not point at a made-up place)."""
    assert links.documentation_base() is None and links.home_url() is None
    assert rule_url("WL101") is None
    assert _finding().url is None and _finding(RuntimeProblem, "WR201").url is None


def test_pages_under_the_declared_documentation(declare_project_urls):
    declare_project_urls(f"Documentation, {DOCS}/", f"Homepage, {HOME}")
    assert links.documentation_base() == DOCS  # the trailing slash goes
    assert rule_url("WL101") == f"{DOCS}/rules/WL101.md"
    assert _finding().url == f"{DOCS}/rules/WL101.md"
    assert _finding(RuntimeProblem, "WR201").url == f"{DOCS}/trace.md#wr201"
    assert links.home_url() == HOME


@pytest.mark.parametrize("label", ["Documentation", "documentation", "Docs", "DOCS", "Documen-tation"])
def test_documentation_labels_compare_normalised(declare_project_urls, label):
    declare_project_urls(f"{label}, {DOCS}")
    assert links.documentation_base() == DOCS


@pytest.mark.parametrize("label", ["Homepage", "Home-page", "home page", "Home", "Repository", "Source"])
def test_home_labels(declare_project_urls, label):
    declare_project_urls(f"Documentation, {DOCS}", f"{label}, {HOME}")
    assert links.home_url() == HOME


def test_home_falls_back_to_the_documentation(declare_project_urls):
    declare_project_urls(f"Docs, {DOCS}", f"Changelog, {HOME}/changes")
    assert links.home_url() == DOCS


def test_other_labels_and_malformed_entries_link_nothing(declare_project_urls):
    declare_project_urls(f"Changelog, {HOME}/changes", "Documentation", "Documentation, ")
    assert links.documentation_base() is None and links.home_url() is None and rule_url("WL101") is None


def test_not_installed_links_nothing(declare_project_urls, monkeypatch):
    def missing() -> list[str]:
        raise importlib.metadata.PackageNotFoundError(links.DISTRIBUTION)

    monkeypatch.setattr(links, "_declared_project_urls", missing)
    links.project_urls.cache_clear()
    assert links.documentation_base() is None and links.home_url() is None


def test_lsp_diagnostic_has_a_code_description_only_with_a_page(declare_project_urls):
    pytest.importorskip("pygls")
    from pygls.workspace import PositionCodec

    from warp_lint.lsp import TextMap, to_diagnostic

    def diagnostic():
        return to_diagnostic(_finding(), TextMap("x = 1\n", PositionCodec()), "\n", {}, 1)

    declare_project_urls()
    assert diagnostic().code_description is None  # LSP requires an href wherever there is one
    declare_project_urls(f"Documentation, {DOCS}")
    assert diagnostic().code_description.href == f"{DOCS}/rules/WL101.md"

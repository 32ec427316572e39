"""Where warp-lint's documentation and project page live, as the installed package's metadata says.

The links come from the distribution's ``Project-URL`` entries (pyproject's ``[project.urls]``),
never from a constant here: a hard-coded address outlives the place it names, and a link to a page
that does not exist is worse than none. Where the metadata names no such URL, or warp-lint runs
from a tree that is not installed, the functions return None and every output leaves the link out.

Imports nothing from the rest of warp_lint, so every layer can use it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import string

DISTRIBUTION = "warp-lint"
DOCUMENTATION_LABELS = ("documentation", "docs")
HOME_LABELS = ("homepage", "home", "repository", "source")

# PEP 753: labels compare lowercased, without punctuation or whitespace ("Home-page" == "homepage").
_LABEL_NOISE = str.maketrans("", "", string.punctuation + string.whitespace)


def normalised_label(label: str) -> str:
    return label.translate(_LABEL_NOISE).lower()


def _declared_project_urls() -> list[str]:
    """The raw ``Project-URL`` entries ("Label, https://..."); the one place that reads metadata."""
    return importlib.metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []


@functools.cache
def project_urls() -> dict[str, str]:
    """The metadata's URLs by normalised label (the first entry of a label wins); empty when
    warp-lint is not installed. Cached: every finding of a run asks for its link."""
    try:
        entries = _declared_project_urls()
    except importlib.metadata.PackageNotFoundError:
        return {}
    urls: dict[str, str] = {}
    for entry in entries:
        label, comma, url = entry.partition(",")
        if comma and url.strip():
            urls.setdefault(normalised_label(label), url.strip())
    return urls


def _first(labels: tuple[str, ...]) -> str | None:
    urls = project_urls()
    return next((urls[label] for label in labels if label in urls), None)


def documentation_base() -> str | None:
    """The documentation's root URL, without a trailing slash, or None."""
    base = _first(DOCUMENTATION_LABELS)
    return base.rstrip("/") if base else None


def documentation_page(page: str) -> str | None:
    """``page`` (a path under the documentation root, e.g. ``rules/WL101.md``) as a URL, or None."""
    base = documentation_base()
    return f"{base}/{page}" if base else None


def home_url() -> str | None:
    """The project's home page (SARIF's informationUri): its home or repository URL, else the
    documentation's, else None."""
    return _first(HOME_LABELS) or _first(DOCUMENTATION_LABELS)

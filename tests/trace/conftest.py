"""Fixtures for the ``warp-lint trace`` tests."""

from __future__ import annotations

import pathlib
import shutil

import pytest
from trace_helpers import EXAMPLE


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> pathlib.Path:
    """A copy of the bundled example project (its own pytest.ini collects ``check_*.py``)."""
    target = tmp_path_factory.mktemp("trace_project") / "trace_project"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return target

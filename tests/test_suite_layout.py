"""The test suite runs in pieces: any set of its folders collects on its own.

pytest imports every ``conftest.py`` under the one module name ``conftest``, so a test module that
does ``from conftest import X`` gets whichever conftest was imported last: with
``pytest tests/runtime tests/trace`` that is the trace one, and collection fails. Shared helpers
live in modules with their own names (``runtime_helpers``, ``trace_helpers``, ``lsp_helpers``).
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

TESTS = pathlib.Path(__file__).parent


def _imports_conftest(path: pathlib.Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "conftest":
            return True
        if isinstance(node, ast.Import) and any(alias.name == "conftest" for alias in node.names):
            return True
    return False


def test_no_test_module_imports_a_conftest():
    offenders = [str(path.relative_to(TESTS)) for path in TESTS.rglob("*.py") if _imports_conftest(path)]
    assert not offenders, f"import the helpers from a named module instead: {offenders}"


def test_the_test_folders_collect_together():
    environment = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/runtime", "tests/trace", "tests/lsp"],
        cwd=TESTS.parent, env=environment, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

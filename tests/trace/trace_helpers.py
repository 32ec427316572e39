"""Helpers for the ``warp-lint trace`` tests (imported by name: a ``conftest`` is not a module to import):
each test runs real commands in a temporary folder.

The Warp kernel cache comes from tests/conftest.py (``WARP_CACHE_PATH``, one per run), which the
traced commands inherit. With overwrite tracking on Warp rebuilds every module it loads, so each
traced run costs a compile: the tests share runs through module-scoped fixtures.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trace_project"
SCRIPTS = pathlib.Path(__file__).parent / "scripts"


def run(command: list[str], cwd: pathlib.Path, env: dict | None = None, timeout: float = 300):
    environment = dict(os.environ)
    environment.pop("PYTEST_ADDOPTS", None)
    environment.pop("PYTEST_CURRENT_TEST", None)
    environment.update(env or {})
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)


def trace(cwd: pathlib.Path, command: list[str], *options: str, env: dict | None = None):
    """``warp-lint trace`` with the report in trace-report.json and the text in trace.txt."""
    report = cwd / "trace-report.json"
    text = cwd / "trace.txt"
    result = run([sys.executable, "-m", "warp_lint", "trace", "--no-cache", "--report", str(report),
                  "--output-file", str(text), *options, "--", *command], cwd, env)
    document = json.loads(report.read_text()) if report.exists() else None
    return result, document, (text.read_text() if text.exists() else "")


def by_code(document: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for item in document["findings"] + document["runtime_problems"]:
        found.setdefault(item["code"], []).append(item)
    return found

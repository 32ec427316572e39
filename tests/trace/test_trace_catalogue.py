"""Every host rule (WL201-WL213) observed by `warp-lint trace`, and its near-miss twin silent.

``catalogue/`` holds one program per rule in the shapes users write (a class holding its tape,
helpers, step loops, a wrapper around ``wp.launch``): ``hazard()`` and ``twin()``, which differs
by the one thing that makes it right. A traced run of ``main.py`` (both functions of every
program) must observe each hazard, matched to the static finding where the static pass sees it
and as a runtime-only problem (``WR2xx``) where it does not, and report nothing in any twin. The
static host fixtures of ``tests/fixtures`` (one planted hazard each) are traced too: there every
static finding gets its verdict from the run.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import sys

import pytest
from trace_helpers import trace

from warp_lint.versions import overlaps

CATALOGUE = pathlib.Path(__file__).parent / "catalogue"
FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
OPTIONS = ("--select", "WL2", "--target-warp-version", ">=1.16")
PROGRAMS = {path.stem[:5].upper(): path.name for path in sorted(CATALOGUE.glob("wl2*.py"))}
# The runtime-only problem each hazard is reported as when no static finding covers it.
RUNTIME_CODES = {"WL201": {"WR201"}, "WL202": {"WR202", "WR203"}, "WL203": {"WR211"}, "WL204": {"WR204"},
                 "WL205": {"WR205"}, "WL206": {"WR213"}, "WL207": {"WR207"}, "WL208": set(), "WL209": {"WR209"},
                 "WL210": {"WR210"}, "WL211": {"WR201"}, "WL212": {"WR212"}, "WL213": set()}


def _function_lines(path: pathlib.Path, name: str) -> tuple[int, int]:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return node.lineno, node.end_lineno


def _frames(value) -> list[tuple[str, int]]:
    """Every (file name, line) a finding or problem points at: its location and its evidence."""
    found = []
    if isinstance(value, dict):
        if "file" in value and "line" in value:
            found.append((pathlib.Path(str(value["file"])).name, int(value["line"])))
        for item in value.values():
            found += _frames(item)
    elif isinstance(value, list):
        for item in value:
            found += _frames(item)
    return found


def _points_into(item: dict, file: str, lines: tuple[int, int]) -> bool:
    frames = [(pathlib.Path(item["filename"]).name, item["location"]["row"])] + _frames(item["confirmation"])
    return any(name == file and lines[0] <= line <= lines[1] for name, line in frames)


@pytest.fixture(scope="module")
def catalogue_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("catalogue") / "catalogue"
    shutil.copytree(CATALOGUE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    result, document, _ = trace(folder, [sys.executable, "main.py"], *OPTIONS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert document["instrumentation_errors"] == []
    return folder, document


@pytest.fixture(scope="module")
def fixtures_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("host_fixtures")
    for path in [*(FIXTURES / "host").glob("sim_wl2*.py"), *(FIXTURES / "host_catalogue").glob("sim_wl2*.py")]:
        shutil.copy(path, folder / path.name)
    (folder / "run_all.py").write_text(
        "import glob, runpy\n"
        "for path in sorted(glob.glob('sim_wl2*.py')):\n"
        "    runpy.run_path(path, run_name='__main__')\n")
    result, document, _ = trace(folder, [sys.executable, "run_all.py"], *OPTIONS)
    assert result.returncode == 0, result.stdout + result.stderr
    return document


def _expected_status(code: str, document: dict) -> str:
    # WL213's hazard is gone from 1.17: the run observes the copy and clears it on newer releases.
    return "cleared" if code == "WL213" and not overlaps("<1.17", f"=={document['warp_version']}") else "confirmed"


def test_every_rule_has_a_program():
    assert sorted(PROGRAMS) == [f"WL2{n:02d}" for n in range(1, 14)]


@pytest.mark.parametrize("code", sorted(PROGRAMS))
def test_each_hazard_is_observed(catalogue_run, code):
    folder, document = catalogue_run
    file = PROGRAMS[code]
    lines = _function_lines(folder / file, "hazard")
    status = _expected_status(code, document)
    static = [f for f in document["findings"] if f["code"] == code and _points_into(f, file, lines)]
    runtime = [p for p in document["runtime_problems"] if p["code"] in RUNTIME_CODES[code]
               and _points_into(p, file, lines)]
    assert [f["confirmation"]["status"] for f in static] == [status] * len(static)
    assert static or runtime, f"{code}: nothing observed in {file}"
    for item in static + runtime:
        assert item["confirmation"]["evidence"], item


@pytest.mark.parametrize("code", sorted(PROGRAMS))
def test_each_near_miss_twin_raises_nothing(catalogue_run, code):
    folder, document = catalogue_run
    file = PROGRAMS[code]
    lines = _function_lines(folder / file, "twin")
    reported = [item for item in document["findings"] + document["runtime_problems"]
                if _points_into(item, file, lines)]
    assert reported == []


@pytest.mark.parametrize("code", [f"WL2{n:02d}" for n in range(1, 14)])
def test_static_findings_get_the_verdict_of_the_run(fixtures_run, code):
    findings = [f for f in fixtures_run["findings"] if f["code"] == code]
    assert findings, f"no static {code} finding in the host fixtures"
    status = _expected_status(code, fixtures_run)
    assert [f["confirmation"]["status"] for f in findings] == [status] * len(findings), findings
    assert fixtures_run["runtime_problems"] == []

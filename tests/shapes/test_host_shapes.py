"""Host rules WL201-WL213 on programs written the way users write them (issue 13).

Every scenario of ``shape_programs`` (one rule's hazard and its near-miss twin) is written in every
shape (helpers one and two calls deep, a class holding ``self.tape``, state made in ``__init__``, a
``step()`` called from the main loop, ``backward()`` in another method, a package of ``kernels.py``,
``sim.py`` and ``train.py`` (names imported, or modules imported whole), a wrapper around
``wp.launch``; and ``flat``, the rule's own single-function form, as the control). Each program is
checked twice:

- statically: ``warp-lint check --output-format json`` (the real CLI, in process) on the program's
  folder, selecting every WL2 rule. The hazard must give exactly its ``# expect:`` finding (code,
  file and line) and nothing else; the twin nothing at all.
- at run time: ``tests/measured/measure_programs.py`` runs every program in one child process on the
  CPU and compares the tape's gradient with central differences of the program's loss. The hazard
  must fail the way its rule says (``shape_programs.FAILURES``: a wrong gradient, an all-zero one, one
  doubled by a second pass, or Warp raising) where the rule's versions include the measured Warp, and
  match elsewhere (WL213 is fixed from 1.17); the twin must match. ``WARP_LINT_MEASURE_PYTHON=PATH``
  measures with another interpreter (a scratch environment with another Warp release).

Cells that do not hold yet are listed in ``KNOWN_GAPS``: their static test is a strict xfail, so a
fix shows up as an XPASS to remove from the list. Run: ``pytest tests/shapes``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from shape_programs import (FAILURES, SCENARIO_BY_NAME, SCENARIOS, SHAPE_BY_NAME, SHAPES, Program,
                            write_manifest, write_program)

from warp_lint.cli import main as warp_lint
from warp_lint.registry import all_rules

MEASURED = Path(__file__).parents[1] / "measured"
MEASURE_PROGRAMS = MEASURED / "measure_programs.py"
_spec = importlib.util.spec_from_file_location("measure_kernel_hazards", MEASURED / "measure_kernel_hazards.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
VARIANTS = ("hazard", "twin")

# Cells a shape cannot express. None so far: every scenario renders as a meaningful program in every
# shape. Where the hazardous statement belongs to the tape itself (`backward()`, `with tape:`, an
# allocation of the driver's state), the helper and package shapes move the recorded launches into
# helpers and the statement stays with the tape; `WL206-temporary` puts an allocation inside the helper.
NOT_APPLICABLE: dict[tuple[str, str], str] = {}

# Cells that do not hold yet (none): (scenario, shape) -> why. The three gaps this suite found first
# (launch wrappers carrying their caller's lists and literals, constructors of recording objects,
# per-step buffers passed to callees) are fixed in the recordings.
KNOWN_GAPS: dict[tuple[str, str], str] = {}

CELLS = [(s.name, sh.name) for s in SCENARIOS for sh in SHAPES if (s.name, sh.name) not in NOT_APPLICABLE]


def cell_params(gaps: dict[tuple[str, str], str] | None = None) -> list:
    params = []
    for cell in CELLS:
        marks = [pytest.mark.xfail(strict=True, reason=gaps[cell])] if gaps and cell in gaps else []
        params.append(pytest.param(*cell, id="-".join(cell), marks=marks))
    return params


@pytest.fixture(scope="session")
def programs(tmp_path_factory) -> dict[str, Program]:
    root = tmp_path_factory.mktemp("shapes")
    written = [write_program(SCENARIO_BY_NAME[s], SHAPE_BY_NAME[sh], v, root) for s, sh in CELLS for v in VARIANTS]
    return {p.id: p for p in written}


def pair(programs: dict[str, Program], scenario: str, shape: str) -> tuple[Program, Program]:
    return programs[f"{scenario}-{shape}-hazard"], programs[f"{scenario}-{shape}-twin"]


# -- static ---------------------------------------------------------------------------------------------

def lint(program: Program) -> list[tuple[str, int, str]]:
    """The WL2 findings of the real CLI on the program's folder: (file, line, code)."""
    report = program.folder.with_name(program.folder.name + ".findings.json")
    warp_lint(["check", "--output-format", "json", "--no-cache", "--select", "WL2", "--exit-zero", "--quiet",
               "--target-warp-version", program.scenario.target, "--output-file", str(report), str(program.folder)])
    found = json.loads(report.read_text())
    return sorted((Path(f["filename"]).relative_to(program.folder).as_posix(), f["location"]["row"], f["code"])
                  for f in found)


def static_problems(program: Program, found: list[tuple[str, int, str]]) -> list[str]:
    """What is wrong with ``found`` for ``program``: every WL2 finding must be one of its markers, and
    every marker found (a twin has none)."""
    expected = program.expected()
    problems = [f"{program.id}: missed {code} at {path}:{line}" for path, line, code in expected
                if (path, line, code) not in found]
    problems += [f"{program.id}: unexpected {code} at {path}:{line}" for path, line, code in found
                 if (path, line, code) not in expected]
    return problems


@pytest.mark.parametrize(("scenario", "shape"), cell_params(KNOWN_GAPS))
def test_static(scenario, shape, programs):
    hazard, twin = pair(programs, scenario, shape)
    assert hazard.expected() and all(code == hazard.scenario.rule for _, _, code in hazard.expected())
    assert not twin.expected()
    problems = static_problems(hazard, lint(hazard)) + static_problems(twin, lint(twin))
    assert not problems, "\n".join(problems)


# -- runtime ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def measured(programs, tmp_path_factory) -> dict[str, dict]:
    """Every program measured in one child process (one Warp import, the kernels compiled once per module
    name), by this interpreter or ``$WARP_LINT_MEASURE_PYTHON`` (one with another Warp release).
    The Warp version measured is under the key ``"warp"``."""
    python = os.environ.get("WARP_LINT_MEASURE_PYTHON") or sys.executable
    if python == sys.executable:
        pytest.importorskip("warp")
    manifest = write_manifest(list(programs.values()), tmp_path_factory.mktemp("manifest") / "programs.json")
    run = subprocess.run([python, str(MEASURE_PROGRAMS), str(manifest)], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result.get("id", "warp")] = result
    return results


def affected(rule: str, version: str) -> bool:
    """Whether ``rule``'s hazard changes gradients on Warp ``version`` (its ``affected_versions``)."""
    spec = all_rules()[rule].affected_versions
    return not spec or Version(version) in SpecifierSet(spec)


def failure(result: dict) -> set[str]:
    """The ``FAILURES`` a measurement shows (empty when AD matches FD)."""
    verdict = result.get("verdict")
    if verdict == "raises":
        return {"raises"} if result.get("error", "").startswith("RuntimeError") else set()
    if verdict != "wrong":
        return set()
    ad, fd = np.asarray(result["ad"]), np.asarray(result["fd"])
    found = {"wrong"}
    if not ad.any() and fd.any():
        found.add("zero")
    if harness.compare(ad, 2 * fd)["verdict"] == "match":
        found.add("doubled")
    return found


def runtime_problems(program: Program, result: dict, version: str) -> list[str]:
    """What is wrong with a program's measurement: a twin must match; a hazard must fail as its scenario
    says (``FAILURES``) where its rule affects ``version``, and match where it does not."""
    scenario = program.scenario
    if program.variant == "hazard" and affected(scenario.rule, version):
        if scenario.fails not in failure(result):
            return [f"{program.id}: expected {FAILURES[scenario.fails]}, measured {result}"]
    elif result.get("verdict") != "match":
        return [f"{program.id}: expected AD to match FD, measured {result}"]
    return []


@pytest.mark.parametrize(("scenario", "shape"), cell_params())
def test_runtime(scenario, shape, programs, measured):
    version = measured["warp"]["warp"]
    problems = []
    for program in pair(programs, scenario, shape):
        problems += runtime_problems(program, measured[program.id], version)
    assert not problems, "\n".join(problems)


# -- the matrix itself ------------------------------------------------------------------------------------

def test_every_host_rule_has_a_scenario():
    host_rules = {code for code in all_rules() if code.startswith("WL2")}
    assert host_rules == {s.rule for s in SCENARIOS}


def test_known_gaps_and_not_applicable_cells_exist():
    cells = {(s.name, sh.name) for s in SCENARIOS for sh in SHAPES}
    assert set(KNOWN_GAPS) <= cells and set(NOT_APPLICABLE) <= cells
    assert not set(KNOWN_GAPS) & set(NOT_APPLICABLE)


def test_a_wrong_expectation_fails_the_checks(programs):
    """The checks can fail: a finding on another line, a flagged twin, a matching hazard, a wrong twin."""
    hazard, twin = pair(programs, "WL201", "flat")
    found = lint(hazard)
    assert found and not static_problems(hazard, found)
    path, line, code = found[0]
    assert static_problems(hazard, [(path, line + 1, code)])  # reported on another line
    assert static_problems(hazard, [])  # missed
    assert static_problems(twin, found)  # the twin flagged
    # the marker moved down one line in the program itself: the real finding no longer matches it
    text = (hazard.folder / path).read_text().splitlines(keepends=True)
    marker = text[line - 1].index("  # expect:")
    text[line - 1], text[line] = text[line - 1][:marker] + "\n", text[line].rstrip("\n") + text[line - 1][marker:]
    moved = Program(hazard.scenario, hazard.shape, hazard.variant, hazard.folder, {path: "".join(text)})
    assert static_problems(moved, found)
    wrong = {"verdict": "wrong", "ad": [1.0, 9.0], "fd": [2.0, 6.0]}
    zero = {"verdict": "wrong", "ad": [0.0, 0.0], "fd": [2.0, 6.0]}
    doubled = {"verdict": "wrong", "ad": [4.0, 12.0], "fd": [2.0, 6.0]}
    match = {"verdict": "match", "ad": [2.0, 6.0], "fd": [2.0, 6.0]}
    assert runtime_problems(hazard, match, "1.19.0") and not runtime_problems(hazard, wrong, "1.19.0")
    assert runtime_problems(twin, wrong, "1.19.0") and not runtime_problems(twin, match, "1.19.0")
    lost, _ = pair(programs, "WL206", "flat")  # documented as zero gradients: another wrong value is not that
    assert runtime_problems(lost, wrong, "1.19.0") and not runtime_problems(lost, zero, "1.19.0")
    accumulated, _ = pair(programs, "WL204", "flat")
    assert runtime_problems(accumulated, wrong, "1.19.0") and not runtime_problems(accumulated, doubled, "1.19.0")
    copy_hazard, _ = pair(programs, "WL213", "flat")  # fixed in 1.17: the hazard must match there, not before
    assert runtime_problems(copy_hazard, wrong, "1.19.0") and runtime_problems(copy_hazard, match, "1.16.0")
    nested, _ = pair(programs, "WL202-nested", "flat")
    assert runtime_problems(nested, {"verdict": "raises", "error": "ValueError: x"}, "1.19.0")
    assert not runtime_problems(nested, {"verdict": "raises", "error": "RuntimeError: x"}, "1.19.0")
